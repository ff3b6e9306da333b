"""Issue 10, items 3, 4 and 7: everything is validated before the first server starts (datasets parsed in full,
paths, ${VAR}s, the tokenizer, each engine's program), names cannot leave the run directory, and bad input is
exit 2 with nothing left on disk. Items 3-4 checks that need an engine's environment use the real vLLM CPU
build's python; none of these tests starts a server."""

import copy
import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from llmcompare import expand, scenario
from llmcompare.errors import ScenarioError
from llmcompare.schema.scenario import Workload
from llmcompare.serve.preflight import check_output_dir, preflight
from llmcompare.workload.prompts import Prompts, load_tokenizer

ROOT = Path(__file__).resolve().parents[1]
BASE = {
    "model": {"path": "/models/x"},
    "engines": [{"name": "v", "kind": "vllm", "python": "/venv/bin/python"}],
    "workload": {"dataset": "random", "input_len": 16, "output_len": 4, "num_prompts": 2},
    "load": {"concurrency": [1]},
}


def write(tmp_path, data, name="s.yaml") -> Path:
    f = tmp_path / name
    f.write_text(yaml.safe_dump(data))
    return f


def serve_bench(cli, f, *args, env=None):
    return subprocess.run([*cli, "serve-bench", str(f), *args], capture_output=True, text=True, timeout=300,
                          env={**os.environ, **(env or {})})


def bench_file(tmp_path, model_path, python, **change) -> Path:
    d = {"name": "pre", "model": {"path": model_path},
         "engines": [{"name": "v", "kind": "vllm", "python": python, "startup_timeout_s": 60}],
         "workload": {"input_len": 8, "output_len": 4, "num_prompts": 2},
         "load": {"concurrency": [1], "warmup_requests": 0}, "output_dir": str(tmp_path / "runs")}
    for k, v in change.items():
        d[k] = {**d[k], **v} if isinstance(v, dict) and isinstance(d.get(k), dict) else v
    return write(tmp_path, d)


def nothing_written(tmp_path) -> bool:
    runs = tmp_path / "runs"
    return not runs.exists() or not any(runs.iterdir())


# ---- item 3: ${VAR} -----------------------------------------------------------------------------------------
def test_unset_variable_without_default_is_an_error_naming_it_and_the_field(monkeypatch):
    monkeypatch.delenv("LLMC_UNSET", raising=False)
    monkeypatch.setenv("LLMC_EMPTY", "")
    with pytest.raises(ScenarioError) as e:
        expand.expand("${LLMC_UNSET}/models/x", "model.path")
    assert str(e.value) == ("model.path: ${LLMC_UNSET} in '${LLMC_UNSET}/models/x' is not set (or is empty) and has "
                            "no default; set LLMC_UNSET, or write ${LLMC_UNSET:-DEFAULT}")
    with pytest.raises(ScenarioError, match=r"\$\{LLMC_EMPTY\} in"):
        expand.expand("${LLMC_EMPTY}")
    assert expand.expand("${LLMC_UNSET:-}x") == "x" and expand.expand("${LLMC_EMPTY:-/d}") == "/d"


def test_unset_variable_in_model_path_stops_before_a_model_is_made(tmp_path, monkeypatch):
    # today: ${LLMC_UNSET} became '' and model.make built the model at /models/tiny
    monkeypatch.delenv("LLMC_UNSET", raising=False)
    d = copy.deepcopy(BASE)
    d["model"] = {"path": "${LLMC_UNSET}/models/tiny", "make": {"preset": "tiny"}}
    d["engines"][0]["python"] = sys.executable
    d["output_dir"] = str(tmp_path / "runs")
    with pytest.raises(ScenarioError, match=r"^model.path: \$\{LLMC_UNSET\} in '\$\{LLMC_UNSET\}/models/tiny' is not set"):
        preflight(scenario.load(str(write(tmp_path, d))))


def test_unset_variable_in_an_engine_field_is_bad_input_and_nothing_starts(tmp_path, tiny_model, cli):
    f = bench_file(tmp_path, tiny_model, "${LLMC_UNSET_PY}")
    env = {k: v for k, v in os.environ.items() if k != "LLMC_UNSET_PY"}
    p = subprocess.run([*cli, "serve-bench", str(f)], capture_output=True, text=True, timeout=300, env=env)
    assert p.returncode == 2, p.stderr[-2000:]
    assert "error: engines[0].python: ${LLMC_UNSET_PY} in '${LLMC_UNSET_PY}' is not set (or is empty)" in p.stderr
    assert nothing_written(tmp_path)


# ---- item 3: datasets parsed in full, with the right line number --------------------------------------------
def test_malformed_jsonl_line_is_reported_with_its_line_number(tiny_model, tmp_path):
    f = tmp_path / "p.jsonl"
    f.write_text('{"prompt": "a b c"}\n\n{"prompt": "d e f", "output_len": 3}\n{"prompt": "g", oops}\n')
    p = Prompts(Workload(dataset="jsonl", path=str(f)), load_tokenizer(tiny_model))
    with pytest.raises(ScenarioError) as e:
        p.sample(1, 0)
    assert str(e.value).startswith(f"workload.path: {f}:4: not valid JSON (Expecting property name enclosed in "
                                   "double quotes, column 17): '{\"prompt\": \"g\", oops}'; expected {\"prompt\"")
    f.write_text('{"prompt": "a"}\n{"prompt": "b", "output_len": "7"}\n')
    with pytest.raises(ScenarioError, match=rf"^workload.path: {f}:2: expected \{{\"prompt\": a non-empty string, "
                                            r"\"output_len\"\?: an integer > 0\}, got"):
        Prompts(Workload(dataset="jsonl", path=str(f)), load_tokenizer(tiny_model)).sample(1, 0)


def test_malformed_sharegpt_entry_is_named(tiny_model, tmp_path):
    f = tmp_path / "sg.json"
    f.write_text(json.dumps([{"conversations": [{"value": "hi there you"}, {"value": "hello to you"}]},
                             {"conversations": [{"from": "human"}, {"value": "x"}]}]))
    with pytest.raises(ScenarioError, match=r"sg.json: entry 1: its first two turns need a string \"value\""):
        Prompts(Workload(dataset="sharegpt", path=str(f)), load_tokenizer(tiny_model)).sample(1, 0)


@pytest.mark.vllm
def test_malformed_dataset_is_found_before_the_server_starts(tmp_path, tiny_model, cli, vllm_py):
    # today: found after vLLM's start-up (minutes on a GPU), with the wrong line number, run.json left "running"
    data = tmp_path / "p.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"hello {i}"}) + "\n" for i in range(6)) + "{not json\n")
    f = bench_file(tmp_path, tiny_model, vllm_py, workload={"dataset": "jsonl", "path": str(data)})
    p = serve_bench(cli, f)
    assert p.returncode == 2, p.stderr[-2000:]
    assert f"error: workload.path: {data}:7: not valid JSON" in p.stderr
    assert "starting" not in p.stderr  # no server was launched
    assert nothing_written(tmp_path)


# ---- item 3: engines' programs, tokenizer, model -------------------------------------------------------------
def _exe(tmp_path, name, mode):
    f = tmp_path / name
    f.write_text("#!/bin/sh\nexit 0\n")
    f.chmod(mode)
    return str(f)


@pytest.mark.parametrize("engine,message", [
    ({"python": "/nonexistent/bin/python"},
     "engines[0].python: '/nonexistent/bin/python': no such file; give the engine environment's python"),
    ({"python": "NOTEXEC"}, "engines[0].python: 'NOTEXEC' is not executable"),
    ({"python": sys.executable}, f"engines[0].python: {sys.executable} has no vllm package (with the engine's env)"),
    ({"command": ["no-such-vllm-console"]}, "engines[0].command[0]: 'no-such-vllm-console' is not on PATH"),
    ({"kind": "openai", "base_url": "http://127.0.0.1:9"},
     "engines[0].base_url: no OpenAI-compatible server answers http://127.0.0.1:9/v1/models"),
])
def test_each_engine_program_is_checked_before_anything_starts(tmp_path, tiny_model, cli, engine, message):
    notexec = _exe(tmp_path, "python-notexec", stat.S_IRUSR | stat.S_IWUSR)
    e = {"name": "v", "kind": "vllm", "startup_timeout_s": 60,
         **{k: (notexec if v == "NOTEXEC" else v) for k, v in engine.items()}}
    f = bench_file(tmp_path, tiny_model, None, engines=[e])
    p = serve_bench(cli, f)
    assert p.returncode == 2, p.stderr[-2000:]
    assert f"error: {message.replace('NOTEXEC', notexec)}" in p.stderr
    assert nothing_written(tmp_path)


def test_only_the_chosen_engines_are_checked(tmp_path, tiny_model):
    d = yaml.safe_load(bench_file(tmp_path, tiny_model, "/nonexistent/python").read_text())
    d["engines"].append({"name": "w", "kind": "vllm", "python": "/nonexistent/other"})
    s = scenario.load(str(write(tmp_path, d)))
    with pytest.raises(ScenarioError, match=r"^engines\[1\].python: '/nonexistent/other': no such file"):
        preflight(s, ["w"])
    with pytest.raises(ScenarioError, match=r"^engines: no engine named 'x'"):
        preflight(s, ["x"])


@pytest.mark.vllm
def test_bad_tokenizer_and_model_preset_are_bad_input(tmp_path, tiny_model, cli, vllm_py):
    (tmp_path / "empty").mkdir()
    f = bench_file(tmp_path, tiny_model, vllm_py, model={"path": tiny_model, "tokenizer": str(tmp_path / "empty")})
    p = serve_bench(cli, f)
    assert p.returncode == 2 and "error: model.tokenizer: cannot load a tokenizer from" in p.stderr, p.stderr[-2000:]
    f = bench_file(tmp_path, tiny_model, vllm_py,
                   model={"path": str(tmp_path / "m"), "make": {"preset": "huge"}})
    p = serve_bench(cli, f)
    assert p.returncode == 2, p.stderr[-2000:]
    assert "error: model.make.preset: unknown preset 'huge'; valid: tiny, qwen2.5-0.5b, qwen2.5-7b, qwen2.5-32b" in p.stderr
    assert not (tmp_path / "m").exists() and nothing_written(tmp_path)


# ---- item 4: names are not paths ----------------------------------------------------------------------------
RULE = "allowed: letters, digits, '.', '_' and '-', not starting with '.', at most 100 characters"


@pytest.mark.parametrize("name", ["../escape", "a/b", "..", ".hidden", "with space", "x" * 101, "tab\there"])
def test_engine_names_that_are_not_plain_file_names_are_refused(tmp_path, name):
    d = copy.deepcopy(BASE)
    d["engines"][0]["name"] = name
    with pytest.raises(ScenarioError) as e:
        scenario.load(str(write(tmp_path, d)))
    assert str(e.value) == f"s.yaml: engines[0].name: {name!r} is not a valid name (it names the run's files); {RULE}"


def test_scenario_name_cannot_leave_the_output_directory(tmp_path):
    with pytest.raises(ScenarioError, match=r"^s.yaml: name: '../../tmp/elsewhere' is not a valid name"):
        scenario.load(str(write(tmp_path, {**BASE, "name": "../../tmp/elsewhere"})))
    for ok in ("vllm-0.26.0_marlin", "TurboMind.v2", "_x"):
        d = copy.deepcopy(BASE)
        d["engines"][0]["name"] = ok
        assert scenario.load(str(write(tmp_path, d))).engines[0].name == ok


def test_preflight_checks_names_of_a_scenario_built_in_code(tmp_path):
    s = scenario.load(str(write(tmp_path, BASE)))
    s.engines[0].name = "../../etc/x"
    with pytest.raises(ScenarioError, match=r"^engines\[0\].name: '../../etc/x' is not a valid name"):
        preflight(s)


# ---- item 7: output directories, --set into lists, report ------------------------------------------------
def test_bad_output_dir_is_bad_input_and_leaves_nothing(tmp_path, tiny_model, cli):
    afile = tmp_path / "afile"
    afile.write_text("x")
    for out, why in ((afile, "is not a directory"), (afile / "runs", "is not a directory")):
        f = bench_file(tmp_path, tiny_model, sys.executable, output_dir=str(out))
        p = serve_bench(cli, f)
        assert p.returncode == 2, p.stderr[-2000:]
        assert f"error: output_dir: {str(out)!r}: {afile} {why}, so the run directory cannot be made there" in p.stderr
    assert afile.read_text() == "x" and sorted(x.name for x in tmp_path.iterdir()) == ["afile", "s.yaml"]


def test_output_dir_check_creates_nothing(tmp_path):
    check_output_dir(str(tmp_path / "new" / "runs"))
    check_output_dir(str(tmp_path))
    assert list(tmp_path.iterdir()) == []
    os.symlink(tmp_path / "gone", tmp_path / "dangling")
    with pytest.raises(ScenarioError, match="dangling is not a directory"):
        check_output_dir(str(tmp_path / "dangling" / "runs"))


def test_set_reaches_list_elements(tmp_path):
    d = copy.deepcopy(BASE)
    d["engines"].append({"name": "w", "kind": "vllm", "python": "/p", "env": {"A": "1"}})
    f = write(tmp_path, d)
    s = scenario.load(str(f), scenario.parse_set(["engines.0.args=[--max-model-len, '512']", "engines.1.env.B=2",
                                                  "engines.1.port=8001"]))
    assert s.engines[0].args == ["--max-model-len", "512"] and s.engines[0].python == "/venv/bin/python"
    assert s.engines[1].env == {"A": "1", "B": "2"} and s.engines[1].port == 8001


@pytest.mark.parametrize("item,message", [
    ("engines.2.args=[]", "--set engines.2: index 2 is out of range: engines has 1 element (valid: 0..0)"),
    ("engines.args=[]", "--set engines.args: engines is a list; pick an element by its index (0..0), e.g. engines.0"),
    ("references.0.label=x", "--set references.0: index 0 is out of range: references has 0 elements (it is empty)"),
    ("engines.0.nmae=x", "s.yaml: engines[0]: unknown key 'nmae'; valid keys: name, kind,"),
])
def test_set_into_a_list_names_a_bad_index(tmp_path, item, message):
    with pytest.raises(ScenarioError) as e:
        scenario.load(str(write(tmp_path, BASE)), scenario.parse_set([item]))
    assert str(e.value).startswith(message)


def test_set_engine_args_on_the_command_line(tmp_path, tiny_model, cli):
    f = write(tmp_path, {**BASE, "model": {"path": tiny_model}, "output_dir": str(tmp_path / "runs")})
    p = serve_bench(cli, f, "--set", "engines.0.args=[--dtype, float16]", "engines.0.python=/nonexistent/py")
    # the override reached the engine (today: "engines: expected a list of a mapping, got dict")
    assert p.returncode == 2 and "error: engines[0].python: '/nonexistent/py': no such file" in p.stderr, p.stderr


def _report(cli, *args):
    return subprocess.run([*cli, "report", *args], capture_output=True, text=True, timeout=300)


def test_report_unknown_baseline_lists_the_engines(tmp_path, cli):
    out = tmp_path / "rep"
    p = _report(cli, str(ROOT / "tests/data/report-serve"), "--out", str(out), "--baseline", "vllm-c")
    assert p.returncode == 2, p.stderr[-2000:]
    assert "no engine named 'vllm-c' in these runs; engines: vllm-a, vllm-b" in p.stderr
    assert not out.exists()


def test_report_on_a_corrupt_run_json_names_the_file(tmp_path, cli):
    run = tmp_path / "run1"
    shutil.copytree(ROOT / "tests/data/report-serve", run)
    text = (run / "run.json").read_text()
    (run / "run.json").write_text(text[: len(text) // 2])  # cut short
    p = _report(cli, str(run), "--out", str(tmp_path / "rep"))
    assert p.returncode == 2, p.stderr[-2000:]
    assert f"error: {run / 'run.json'}: " in p.stderr and "Traceback" not in p.stderr
    (run / "run.json").write_text("[1, 2]")
    p = _report(cli, str(run), "--out", str(tmp_path / "rep"))
    assert p.returncode == 2 and f"error: {run / 'run.json'}: " in p.stderr and "Traceback" not in p.stderr
