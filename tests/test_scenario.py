import copy
import math
import re
from pathlib import Path

import pytest
import yaml

from llmcompare import expand, scenario
from llmcompare.errors import ScenarioError
from llmcompare.serve import loadgen

BASE = {
    "model": {"path": "/models/x"},
    "engines": [{"name": "v", "kind": "vllm", "python": "/venv/bin/python"}],
    "workload": {"dataset": "random", "input_len": 16, "output_len": 4, "num_prompts": 2},
    "load": {"concurrency": [1, 2]},
}


def load_with(tmp_path, change):
    data = copy.deepcopy(BASE)
    change(data)
    f = tmp_path / "s.yaml"
    f.write_text(yaml.safe_dump(data))
    return scenario.load(str(f))


def setter(path, value):
    def change(d):
        keys = path.split(".")
        for k in keys[:-1]:
            d = d[int(k)] if isinstance(d, list) else d[k]
        d[keys[-1] if not isinstance(d, list) else int(keys[-1])] = value
    return change


def deleter(path):
    def change(d):
        keys = path.split(".")
        for k in keys[:-1]:
            d = d[k]
        del d[keys[-1]]
    return change


BAD = [
    (setter("modle", {}), "s.yaml: unknown key 'modle'; valid keys: name, description, model, engines, workload, "
     "load, slo, percentiles, kernel_bench, profile, references, checks, output_dir, tensor_parallel"),
    (setter("model.path", ""), "s.yaml: model.path: required (a local checkpoint directory)"),
    (setter("model.weights", "x"), "s.yaml: model: unknown key 'weights'; valid keys: path, tokenizer, make"),
    (setter("model", "/models/x"), "s.yaml: model: expected a mapping, got str '/models/x'"),
    (setter("engines", []), "s.yaml: engines: at least one engine is required"),
    (setter("engines", {"kind": "vllm"}), "s.yaml: engines: expected a list of a mapping, got dict {'kind': 'vllm'}"),
    (setter("engines.0.kind", "tgi"), "s.yaml: engines[0].kind: 'tgi' is not valid; valid: vllm, lmdeploy, sglang, openai"),
    (setter("engines.0.port", 70000), "s.yaml: engines[0].port: must be in 1..65535, got 70000"),
    (setter("engines.0.port", "80"), "s.yaml: engines[0].port: expected an integer, got '80'"),
    (setter("engines.0.args", "--foo"), "s.yaml: engines[0].args: expected a list of a string, got str '--foo'"),
    (setter("engines.0.command", ["vllm"]), "s.yaml: engines[0]: give python or command, not both"),
    (setter("engines.0.startup_timeout_s", -1), "s.yaml: engines[0].startup_timeout_s: must be in 1..86400 s, got -1.0"),
    (lambda d: d["engines"].append({"name": "v", "kind": "lmdeploy"}),
     "s.yaml: engines[1].name: 'v' is used twice; engine names must be unique"),
    (setter("engines.0", {"name": "o", "kind": "openai"}),
     "s.yaml: engines[0].base_url: required for kind openai (an already-running server)"),
    (setter("workload.dataset", "alpaca"), "s.yaml: workload.dataset: 'alpaca' is not valid; valid: random, sharegpt, jsonl, hf, synthetic-sharegpt, shared-prefix"),
    (setter("workload.dataset", "sharegpt"), "s.yaml: workload.path: required for dataset sharegpt"),
    (setter("workload.input_len", 0), "s.yaml: workload.input_len: must be >= 1 (a length in tokens), got 0"),
    (setter("workload.num_prompts", 2.5), "s.yaml: workload.num_prompts: expected an integer, got 2.5"),
    (setter("workload.ignore_eos", "yes please"), "s.yaml: workload.ignore_eos: expected true or false, got 'yes please'"),
    (setter("load.concurrency", [1, -4]), "s.yaml: load.concurrency[1]: must be in 1..100000 requests in flight, got -4"),
    (setter("load.concurrency", 8), "s.yaml: load.concurrency: expected a list of an integer, got int 8"),
    (lambda d: d["load"].update(concurrency=[]),
     "s.yaml: load: give at least one of concurrency (a list of integers), request_rate or capacity"),
    (setter("load.request_rate", [0]), "s.yaml: load.request_rate[0]: must be in 0.01..1e+06 req/s, or .inf (every request at once), got 0.0"),
    (setter("load.arrival", "uniform"), "s.yaml: load: unknown key 'arrival'; valid keys: concurrency, request_rate, "
     "burstiness, max_concurrency, warmup_requests, request_timeout_s, metrics_interval_s, repeats, "
     "restart_between_repeats, interleave, min_duration_s, max_prompts_per_point, max_attempts, client_workers, allow_failures, capacity, "
     "converge"),
    (setter("load.concurrency", [4, 4]), "s.yaml: load.concurrency: [4] listed twice; each load point must be distinct "
     "(use load.repeats to measure a point several times)"),
    (setter("load.repeats", 0), "s.yaml: load.repeats: must be in 1..1000, got 0"),
    (setter("engines.0.kind", "tgi"), "s.yaml: engines[0].kind: 'tgi' is not valid; valid: vllm, lmdeploy, sglang, openai"),
    (setter("slo", {"ttft_ms": -5}), "s.yaml: slo.ttft_ms: must be in 0.001..8.64e+07 ms, got -5.0"),
    (setter("percentiles", [50, 100]), "s.yaml: percentiles[1]: must be in (0, 100), got 100.0"),
    (setter("kernel_bench", {"backends": ["exllama"]}),
     "s.yaml: kernel_bench.backends[0]: unknown backend 'exllama'; valid: cublas, marlin, machete, turbomind, sglang-marlin "
     "(optionally with @LABEL, e.g. turbomind@0.17.0, to run it from another environment)"),
    (setter("kernel_bench", {"m": [0]}), "s.yaml: kernel_bench.m[0]: must be in 1..1e+07 tokens, got 0"),
    (deleter("load"), "s.yaml: load: give at least one of concurrency (a list of integers), request_rate or capacity"),
    (lambda d: d["workload"].update(dataset="jsonl", path="/nonexistent/prompts.jsonl"),
     "s.yaml: workload.path: '/nonexistent/prompts.jsonl' is not a readable file"),
    (setter("engines.0.gemm_backend", "cutlass"),
     "s.yaml: engines[0].gemm_backend: unknown backend 'cutlass'; valid: cublas, marlin, machete, turbomind, sglang-marlin "
     "(optionally with @LABEL, e.g. turbomind@0.17.0, to run it from another environment)"),
    (setter("tensor_parallel", 0),
     "s.yaml: tensor_parallel: must be an integer >= 1 (the GPUs the model is sharded over), got 0"),
    (setter("tensor_parallel", 1.5), "s.yaml: tensor_parallel: expected an integer, got 1.5"),
    (setter("engines.0.tensor_parallel", -2),
     "s.yaml: engines[0].tensor_parallel: must be an integer >= 1 (the GPUs the model is sharded over), got -2"),
    (setter("kernel_bench", {"tensor_parallel": 0}),
     "s.yaml: kernel_bench.tensor_parallel: must be an integer >= 1 (the GPUs the model is sharded over), got 0"),
    (setter("engines.0.args", ["--tensor-parallel-size", "4"]),
     "s.yaml: engines[0].args: passes --tensor-parallel-size 4, but the engine's tensor-parallel degree is 1 (the "
     "scenario's tensor_parallel); set tensor_parallel: 4 instead and drop --tensor-parallel-size from args "
     "(llmcompare passes --tensor-parallel-size)"),
    # absurd values (issue 27 item 9): every number finite and in a stated range the time estimate can honour
    (lambda d: d.update(slo={"ttft_ms": 100}) or d["load"].update(capacity={"min_rate": 1e-9}), "s.yaml: load.capacity.min_rate: must be in 0.01..1e+06 req/s, "
     "got 1e-09"),
    (setter("profile", {"seconds": ".inf"}), "s.yaml: profile.seconds: must be in 0.01..60 s (a capture window), "
     "got inf"),
    (setter("load.request_rate", [1e-9]), "s.yaml: load.request_rate[0]: must be in 0.01..1e+06 req/s, or .inf "
     "(every request at once), got 1e-09"),
    (setter("load.min_duration_s", ".inf"), "s.yaml: load.min_duration_s: must be in 0.01..86400 s, or 0 (off), "
     "got inf"),
    (setter("load.request_timeout_s", float("nan")), "s.yaml: load.request_timeout_s: must be in 0.1..86400 s, got nan"),
    (setter("load.metrics_interval_s", 1e-6), "s.yaml: load.metrics_interval_s: must be in 0.05..3600 s, or 0 (off), "
     "got 1e-06"),
    (setter("engines.0.startup_timeout_s", ".inf"), "s.yaml: engines[0].startup_timeout_s: must be in 1..86400 s, "
     "got inf"),
    (setter("load.burstiness", 0.0), "s.yaml: load.burstiness: must be in 0.01..100 (gamma shape; 1 is Poisson), or "
     ".inf (a regular schedule), got 0.0"),
    (setter("workload.num_prompts", 10**9), "s.yaml: workload.num_prompts: must be in 1..1e+07 requests per load "
     "point, got 1000000000"),
    (setter("workload.temperature", float("nan")), "s.yaml: workload.temperature: must be in 0..10, got nan"),
    (setter("kernel_bench", {"timeout_s": ".inf"}), "s.yaml: kernel_bench.timeout_s: must be in 1..86400 s, got inf"),
    (setter("profile", {"telemetry_interval_ms": 1}), "s.yaml: profile.telemetry_interval_ms: must be in 10..60000 "
     "ms, or 0 (off), got 1"),
    (setter("load.converge", {"rel_halfwidth": 0}), "s.yaml: load.converge.rel_halfwidth: must be in 0.001..0.5 (a "
     "fraction of the rate: 0.02 is +-2%), got 0.0"),
    (setter("load.converge", {"max_s": 5}), "s.yaml: load.converge.max_s: must be in 30..86400 s (MSER-5 and 10 "
     "batch means need at least 30 s of series), got 5.0"),
    (setter("load.converge", {"max_s": ".inf"}), "s.yaml: load.converge.max_s: must be in 30..86400 s (MSER-5 and "
     "10 batch means need at least 30 s of series), got inf"),
    (setter("load.converge", {"rel_halfwidth": 0.02, "until": 3}), "s.yaml: load.converge: unknown key 'until'; "
     "valid keys: rel_halfwidth, max_s"),
    (lambda d: d["load"].update(request_rate=[".inf"], converge={}), "s.yaml: load.converge: cannot be combined "
     "with load.request_rate .inf (every request sent at once: nothing left to stop sending)"),
    (lambda d: d["workload"].update(dataset="jsonl", path=__file__) or d["load"].update(converge={}),
     "s.yaml: load.converge: needs a generated workload.dataset (random, shared-prefix, synthetic-sharegpt: a "
     "file's points have fixed sizes); got dataset jsonl"),
    (setter("references", [{"label": "x", "metric": "speed"}]),
     "s.yaml: references[0].metric: 'speed' is not valid; valid: output_throughput, request_throughput, gap_pct, gemm_s"),
]


@pytest.mark.parametrize("change,message", BAD, ids=[m.split(": ", 1)[1][:50] for _, m in BAD])
def test_bad_scenarios_name_the_field_and_what_is_valid(tmp_path, change, message):
    with pytest.raises(ScenarioError) as e:
        load_with(tmp_path, change)
    assert str(e.value) == message


def test_unknown_scenario_name_lists_the_shipped_ones():
    with pytest.raises(ScenarioError, match=r"unknown scenario 'nope'.*demo.*qwen-awq"):
        scenario.load("nope")


def test_not_yaml(tmp_path):
    f = tmp_path / "b.yaml"
    f.write_text("model: [unclosed")
    with pytest.raises(ScenarioError, match="not valid YAML"):
        scenario.load(str(f))


def test_shipped_scenarios_are_valid():
    import llmcompare

    names = sorted(f.stem for f in (Path(llmcompare.__file__).parent / "scenarios").glob("*.yaml"))
    assert {"demo", "qwen-awq", "three-engines-h200"} <= set(names)
    for name in names:  # every file shipped, the GPU campaigns' included: a typo is found here, not on the device
        s = scenario.load(name)
        assert s.engines and (s.load.concurrency or s.load.request_rate), name


def test_precedence_cli_over_file_over_defaults(tmp_path):
    f = tmp_path / "s.yaml"
    f.write_text(yaml.safe_dump(BASE))
    s = scenario.load(str(f), scenario.parse_set(["workload.num_prompts=7", "load.request_rate=[.inf]"]))
    assert s.workload.num_prompts == 7  # CLI
    assert s.workload.input_len == 16  # file
    assert s.workload.seed == 0 and s.load.warmup_requests == 2  # defaults
    assert s.load.request_rate == [float("inf")]


def test_load_converge_reads_with_its_defaults(tmp_path):
    s = load_with(tmp_path, setter("load.converge", {"max_s": 120}))
    assert s.load.converge.rel_halfwidth == 0.02 and s.load.converge.max_s == 120.0
    assert load_with(tmp_path, lambda d: None).load.converge is None  # off unless asked


def test_env_expansion(monkeypatch):
    monkeypatch.setenv("LLMC_X", "/opt/x")
    monkeypatch.delenv("LLMC_UNSET", raising=False)
    assert expand.expand("${LLMC_X}/bin") == "/opt/x/bin"
    assert expand.expand("${LLMC_UNSET:-/d}/bin") == "/d/bin"


def test_missing_model_path_is_reported_before_anything_starts(tmp_path, cli):
    import subprocess

    f = tmp_path / "s.yaml"
    f.write_text(yaml.safe_dump({**BASE, "model": {"path": "/nonexistent/model"}, "output_dir": str(tmp_path)}))
    p = subprocess.run([*cli, "serve-bench", str(f)], capture_output=True, text=True, timeout=60)
    assert p.returncode == 2
    assert "model.path: /nonexistent/model does not exist (and model.make is not set to build it)" in p.stderr


def test_bad_command_line_overrides(cli):
    import subprocess

    p = subprocess.run([*cli, "serve-bench", "demo", "--set", "load.concurrency=[1,"], capture_output=True, text=True)
    assert p.returncode == 2 and "--set 'load.concurrency=[1,': the value is not valid YAML" in p.stderr
    p = subprocess.run([*cli, "kernel-bench", "qwen-awq", "--python", "marlin"], capture_output=True, text=True)
    assert p.returncode == 2 and "--python 'marlin': expected BACKEND=PYTHON" in p.stderr


def test_lengths_take_a_list_as_a_grid_axis(tmp_path):
    s = load_with(tmp_path, lambda d: d["workload"].update(input_len=[512, 128], output_len=64))
    assert s.workload.cells() == [(512, 64, None, None), (128, 64, None, None)] and s.workload.input_lens == [512, 128]
    pts = loadgen.plan([1, 8], [2.0], None, 4, 0, s.workload.cells())  # cell outer, closed loop before open
    assert [(p.index, p.key.label) for p in pts] == [
        (0, "c=1 in=512 out=64"), (1, "c=8 in=512 out=64"), (2, "rate=2 in=512 out=64"),
        (3, "c=1 in=128 out=64"), (4, "c=8 in=128 out=64"), (5, "rate=2 in=128 out=64")]


@pytest.mark.parametrize("workload, msg", [
    ({"input_len": []}, "workload.input_len: an empty list; give a length in tokens or a list of them"),
    ({"input_len": [64, 64]}, "workload.input_len: [64, 64] lists a value twice"),
    ({"output_len": [8, 0]}, "workload.output_len[1]: must be >= 1 (a length in tokens), got 0"),
    ({"output_len": "x"}, "workload.output_len: expected an integer, got 'x'"),
    ({"dataset": "jsonl", "path": "__FILE__", "output_len": [8, 16]},
     "workload.output_len: a list (a grid axis) needs workload.dataset random or shared-prefix; dataset jsonl"),
])
def test_bad_grid_axes_name_the_field(tmp_path, workload, msg):
    f = tmp_path / "p.jsonl"
    f.write_text('{"prompt": "hi"}\n')
    wl = {k: (str(f) if v == "__FILE__" else v) for k, v in workload.items()}
    with pytest.raises(ScenarioError, match=re.escape(msg)):
        load_with(tmp_path, lambda d: d["workload"].update(wl))



def test_profile_cell_filter_names_the_grid_and_picks_its_cell(tmp_path):
    from llmcompare.schema.run import LoadKey

    f = tmp_path / "s.yaml"
    f.write_text(yaml.safe_dump({**BASE, "load": {"concurrency": [1, 64]},
                                 "workload": {**BASE["workload"], "input_len": [128, 1024], "output_len": 16}}))
    with pytest.raises(ScenarioError, match=r"profile.input_len: 512 is not a cell of the grid; valid: "
                                            r"workload.input_len \(128, 1024\)"):
        scenario.load(str(f), scenario.parse_set(["profile.points=[64]", "profile.input_len=512"]))
    p = scenario.load(str(f), scenario.parse_set(["profile.points=[64]", "profile.input_len=1024"])).profile
    assert p.wants(LoadKey(concurrency=64, input_len=1024, output_len=16))
    assert not p.wants(LoadKey(concurrency=64, input_len=128, output_len=16))
    assert not p.wants(LoadKey(concurrency=1, input_len=1024, output_len=16))


def test_profile_waves_is_at_least_four_and_says_why(tmp_path):
    f = tmp_path / "s.yaml"
    f.write_text(yaml.safe_dump({**BASE, "load": {"concurrency": [64]}}))
    assert scenario.load(str(f), scenario.parse_set(["profile.points=[64]", "profile.waves=4"])).profile.waves == 4
    with pytest.raises(ScenarioError, match=r"profile.waves: must be in 4..1000 waves \(profile.window_wave \+ 2"):
        scenario.load(str(f), scenario.parse_set(["profile.points=[64]", "profile.waves=3"]))
    with pytest.raises(ScenarioError, match=r"profile.waves: must be in 12..1000 waves"):  # the window after 10
        scenario.load(str(f), scenario.parse_set(["profile.points=[64]", "profile.window_wave=10", "profile.waves=8"]))


def test_the_estimate_says_how_long_the_capacity_searchs_first_probe_takes(tmp_path):
    from llmcompare.serve import campaign

    s = load_with(tmp_path, lambda d: d.update(slo={"ttft_ms": 100})
                  or d["load"].update(concurrency=[], capacity={"min_rate": 0.05}))
    prog, line = campaign.estimate(s, campaign.Campaign([], {"v": {}}), None)
    assert "capacity search of up to 12 probes x 1 repeat(s), not in this estimate: the first probe, at 0.05 req/s, " \
           "about 0m40s a repeat" in line  # 2 requests at 0.05 req/s
    # 0.05, 0.1, ... 51.2, then max_rate: 12 probes at most; each 2 requests (num_prompts) or 1 s (min_duration_s)
    probes = [0.05 * 2 ** i for i in range(11)] + [s.load.capacity.max_rate]
    doubling = sum(max(2, math.ceil(r * s.load.min_duration_s)) / r for r in probes)
    assert f"doubling to {s.load.capacity.max_rate:g} req/s without a failing probe, 12 probes, about " \
           f"{campaign._hms(doubling)}" in line
    assert prog.startups_s > 0 and "server start-ups 0m00s" not in line  # the search's engine still starts
