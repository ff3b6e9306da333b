"""Generated workloads (shared-prefix, synthetic-sharegpt), Hugging Face datasets, and prefix-cache fields:
construction and validation, no server."""

import json
import random
import re

import pytest

from llmcompare.engines import launch, prefix_cache
from llmcompare.errors import ScenarioError
from llmcompare.scenario.loader import validate
from llmcompare.schema.build import build
from llmcompare.schema.scenario import Engine, Workload
from llmcompare.workload import synthetic
from llmcompare.workload.prompts import Prompts, load_tokenizer


@pytest.fixture(scope="module")
def tok(tiny_model):
    return load_tokenizer(tiny_model)


def ntok(tok, text):
    return len(tok(text, add_special_tokens=False)["input_ids"])


def test_shared_prefix_exact_lengths_shared_heads_and_unique_suffixes(tok):
    wl = Workload(dataset="shared-prefix", prefix_len=40, num_prefixes=3, input_len=25, output_len=5, seed=1)
    p = Prompts(wl, tok)
    specs = p.sample(7, stream=0)
    heads = [tok.decode(h) for h in p.prefixes()]
    assert len(set(heads)) == 3
    for i, s in enumerate(specs):
        assert ntok(tok, s.prompt) == s.prompt_len == 65 and s.output_len == 5
        assert s.prompt.startswith(heads[i % 3])
    other = p.sample(7, stream=1)
    assert [s.prompt[:len(heads[0])] for s in other][::3] == [heads[0]] * 3  # the same prefixes in every stream
    assert not {s.prompt for s in specs} & {s.prompt for s in other}  # but no whole prompt twice
    again = Prompts(Workload(dataset="shared-prefix", prefix_len=40, num_prefixes=3, input_len=25, output_len=5,
                             seed=1), tok).sample(7, stream=0)
    assert [s.prompt for s in again] == [s.prompt for s in specs]  # seeded
    assert p.longest() == 70


def test_shared_prefix_grid_cells_cross_the_suffix_and_prefix_axes():
    wl = Workload(dataset="shared-prefix", prefix_len=8, input_len=[16, 32], output_len=4)
    assert wl.cells() == [(16, 4, 8, 1), (32, 4, 8, 1)]  # scalars: one prefix cell
    wl = Workload(dataset="shared-prefix", prefix_len=[64, 8], num_prefixes=[1, 4], input_len=16, output_len=4)
    assert wl.cells() == [(16, 4, 64, 1), (16, 4, 64, 4), (16, 4, 8, 1), (16, 4, 8, 4)]  # in the order given
    assert [c.prefix_len for c in wl.cells()] == [64, 64, 8, 8]
    assert Workload(dataset="random", input_len=[16, 32], output_len=4).cells() == [(16, 4, None, None),
                                                                                  (32, 4, None, None)]


def test_shared_prefix_prompts_of_a_cell_use_its_prefix_len_and_num_prefixes(tok):
    wl = Workload(dataset="shared-prefix", prefix_len=[40, 12], num_prefixes=[3, 1], input_len=25, output_len=5,
                  seed=1)
    p = Prompts(wl, tok)
    by_cell = {(c.prefix_len, c.num_prefixes): p.sample(6, stream=0, lengths=c) for c in wl.cells()}
    assert sorted(by_cell) == [(12, 1), (12, 3), (40, 1), (40, 3)]
    for (plen, count), specs in by_cell.items():
        heads = [tok.decode(h) for h in p.prefixes(plen, count)]
        assert len(set(heads)) == count
        for i, s in enumerate(specs):
            assert ntok(tok, s.prompt) == s.prompt_len == plen + 25 and s.output_len == 5
            assert s.prompt.startswith(heads[i % count])
    # prefix k of a length is the same in every cell that has it, and as a scalar scenario makes it
    assert p.prefixes(40, 3)[0] == p.prefixes(40, 1)[0]
    scalar = Prompts(Workload(dataset="shared-prefix", prefix_len=40, num_prefixes=3, input_len=25, output_len=5,
                              seed=1), tok)
    assert [x.prompt for x in scalar.sample(6, 0)] == [x.prompt for x in by_cell[(40, 3)]]
    assert p.sample(6, 0) == by_cell[(40, 3)]  # no cell given: the axes' first values
    assert p.longest() == 40 + 25 + 5


def test_synthetic_sharegpt_lengths_are_exact_seeded_and_near_the_published_means(tok):
    wl = Workload(dataset="synthetic-sharegpt", seed=3)
    specs = Prompts(wl, tok).sample(6, stream=2)
    for s in specs:
        assert ntok(tok, s.prompt) == s.prompt_len
        assert 4 <= s.prompt_len <= 1024 and s.output_len >= 4 and s.prompt_len + s.output_len <= 2048
    assert [s.prompt for s in Prompts(wl, tok).sample(6, stream=2)] == [s.prompt for s in specs]
    st = synthetic.synthetic_stats(0, 4000, 1.0, 0.8, 2048)
    # the clipping trims the tails a little: within 10% of the published means
    assert abs(st["mean_input_tokens"] / synthetic.SHAREGPT_MEAN_INPUT_TOKENS - 1) < 0.10
    assert abs(st["mean_output_tokens"] / synthetic.SHAREGPT_MEAN_OUTPUT_TOKENS - 1) < 0.10


def test_synthetic_sharegpt_clips_to_max_total_len():
    rng = random.Random(0)
    pairs = [synthetic.sharegpt_lengths(rng, 1.0, 0.8, 300) for _ in range(500)]
    assert max(p.input_len + p.output_len for p in pairs) <= 300
    assert min(min(p.input_len, p.output_len) for p in pairs) >= 4


def _scenario(workload, engine=None):
    return validate(build(__import__("llmcompare.schema.scenario", fromlist=["Scenario"]).Scenario, {
        "model": {"path": "/m"}, "engines": [engine or {"name": "v", "kind": "vllm"}],
        "workload": workload, "load": {"concurrency": [1]}}))


@pytest.mark.parametrize("workload, msg", [
    ({"dataset": "shared-prefix", "prefix_len": 0}, "workload.prefix_len: must be >= 1"),
    ({"dataset": "shared-prefix", "prefix_len": 8, "num_prefixes": 0}, "workload.num_prefixes: must be >= 1"),
    ({"dataset": "random", "prefix_len": 8},
     "workload.prefix_len: 8 is only for dataset shared-prefix, got dataset random; leave it out (default 0)"),
    ({"dataset": "synthetic-sharegpt", "num_prefixes": [2]},
     "workload.num_prefixes: [2] is only for dataset shared-prefix, got dataset synthetic-sharegpt"),
    ({"dataset": "shared-prefix", "prefix_len": [64, 0]},
     "workload.prefix_len[1]: must be >= 1 (tokens of each shared prefix), got 0"),
    ({"dataset": "shared-prefix", "prefix_len": 8, "num_prefixes": [4, 0]},
     "workload.num_prefixes[1]: must be >= 1 (distinct prefixes), got 0"),
    ({"dataset": "shared-prefix", "prefix_len": []},
     "workload.prefix_len: an empty list; give tokens of each shared prefix or a list of them"),
    ({"dataset": "shared-prefix", "prefix_len": 8, "num_prefixes": [4, 4]},
     "workload.num_prefixes: [4, 4] lists a value twice; each grid cell must be distinct"),
    ({"dataset": "shared-prefix", "prefix_len": [8, "x"]}, "workload.prefix_len"),
    ({"dataset": "synthetic-sharegpt", "sigma_input": 5}, "workload.sigma_input: must be in 0..3"),
    ({"dataset": "hf"}, "workload.path: required for dataset hf"),
    ({"dataset": "random", "prompt_column": "q"}, "workload.prompt_column/output_column: only for dataset hf"),
    ({"dataset": "nope"}, "workload.dataset"),
])
def test_bad_workload_fields_name_the_field(workload, msg):
    with pytest.raises(ScenarioError, match=re.escape(msg)):
        _scenario(workload)


def test_prefix_cache_flags_per_engine_and_conflicts():
    v = Engine(name="v", kind="vllm", prefix_cache="on")
    assert "--enable-prefix-caching" in launch.server_command(v, "/m", 8000)
    v.prefix_cache = "off"
    assert "--no-enable-prefix-caching" in launch.server_command(v, "/m", 8000)
    lm = Engine(name="t", kind="lmdeploy", prefix_cache="on")
    assert "--enable-prefix-caching" in launch.server_command(lm, "/m", 8000)
    lm.prefix_cache = "off"  # lmdeploy's default: no flag
    assert "prefix" not in " ".join(launch.server_command(lm, "/m", 8000))
    v.prefix_cache = "as-shipped"
    assert "prefix" not in " ".join(launch.server_command(v, "/m", 8000))
    with pytest.raises(ScenarioError, match=r"engines\[0\]\.args: passes --no-enable-prefix-caching, and "
                                            r"prefix_cache: on sets the prefix cache too"):
        _scenario({}, {"name": "v", "kind": "vllm", "prefix_cache": "on", "args": ["--no-enable-prefix-caching"]})
    with pytest.raises(ScenarioError, match=r"engines\[0\]\.prefix_cache: 'maybe' is not valid; valid: as-shipped"):
        _scenario({}, {"name": "v", "kind": "vllm", "prefix_cache": "maybe"})


def test_prefix_cache_counters_and_hit_rate():
    page = ('# HELP vllm:prefix_cache_queries Prefix cache queries\nvllm:prefix_cache_queries_total{engine="0"} 300.0\n'
            'vllm:prefix_cache_hits_total{engine="0"} 120.0\nvllm:external_prefix_cache_hits_total 9.0\n')
    before = prefix_cache.parse(page)
    assert before == {"queries": 300.0, "hits": 120.0}
    after = {"queries": 700.0, "hits": 420.0}
    c = prefix_cache.delta(before, after)
    assert c.reported and c.hit_rate == pytest.approx(0.75) and c.queries_tokens == 400
    assert not prefix_cache.delta({}, {}).reported
    assert "unreadable" in prefix_cache.delta("HTTP 404", after).note


# ---- Hugging Face datasets (the `datasets` extra) -------------------------------------------------------------
def test_hf_local_file_with_column_mapping(tok, tmp_path):
    pytest.importorskip("datasets")
    f = tmp_path / "d.jsonl"
    rows = [{"q": "Tell me about the sea", "a": "The sea is wide and deep and blue"},
            {"q": "Name a colour please", "a": "Blue is a colour that many people like"}]
    f.write_text("".join(json.dumps(r) + "\n" for r in rows))
    specs = Prompts(Workload(dataset="hf", path=str(f), prompt_column="q", output_column="a"), tok).sample(2, 0)
    assert sorted((s.prompt, s.output_len) for s in specs) == sorted((r["q"], ntok(tok, r["a"])) for r in rows)
    only = Prompts(Workload(dataset="hf", path=str(f), prompt_column="q", output_len=9), tok).sample(2, 0)
    assert {s.output_len for s in only} == {9}
    with pytest.raises(ScenarioError, match=r"workload.output_column: no column 'answer' in the dataset; columns: q, a"):
        Prompts(Workload(dataset="hf", path=str(f), prompt_column="q", output_column="answer"), tok).sample(1, 0)
    with pytest.raises(ScenarioError, match=r"workload.prompt_column: not given and none of prompt, .* columns: q, a"):
        Prompts(Workload(dataset="hf", path=str(f)), tok).sample(1, 0)


def test_hf_saved_dataset_dir_with_sharegpt_turns(tok, tmp_path):
    datasets = pytest.importorskip("datasets")
    conv = [{"from": "human", "value": "Tell me about the sea and the sky please"},
            {"from": "gpt", "value": "The sea is wide and the sky is high above it"}]
    f = tmp_path / "sg.jsonl"
    f.write_text(json.dumps({"conversations": conv}) + "\n" + json.dumps({"conversations": conv[:1]}) + "\n")
    # (Dataset.from_list fails to fingerprint with pyarrow 26 in datasets 5.2.0: a loaded file is saved instead)
    datasets.load_dataset("json", data_files=str(f), split="train").save_to_disk(str(tmp_path / "ds"))
    (spec,) = Prompts(Workload(dataset="hf", path=str(tmp_path / "ds")), tok).sample(1, 0)
    assert spec.prompt == conv[0]["value"] and spec.output_len == ntok(tok, conv[1]["value"])


def test_hf_without_the_datasets_package_says_what_to_install(tok, tmp_path, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "datasets", None)  # import datasets -> ImportError
    f = tmp_path / "d.jsonl"
    f.write_text('{"prompt": "hi"}\n')
    with pytest.raises(ScenarioError, match=r"the `datasets` package is not installed; pip install 'llmcompare\[datasets\]'"):
        Prompts(Workload(dataset="hf", path=str(f)), tok).sample(1, 0)


def test_bare_yaml_on_off_are_prefix_cache_modes_and_h200_scenarios_load(tmp_path):
    from llmcompare import scenario

    f = tmp_path / "s.yaml"
    f.write_text("model: {path: /m}\nengines:\n  - {name: a, kind: vllm, prefix_cache: on}\n"
                 "  - {name: b, kind: lmdeploy, prefix_cache: off}\nload: {concurrency: [1]}\n")
    assert [e.prefix_cache for e in scenario.load(str(f)).engines] == ["on", "off"]
    s = scenario.load("shared-prefix-h200")
    assert s.workload.dataset == "shared-prefix" and [e.prefix_cache for e in s.engines] == [
        "as-shipped", "on", "as-shipped", "off"]
    assert scenario.load("llama3-8b-awq-h200").model.make.preset == "llama3-8b"
