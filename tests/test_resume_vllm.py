"""`serve-bench --resume` against a real vLLM CPU server: a run cut by Ctrl-C inside its second load point is
continued in its own directory with one more load point; what finished is not measured again."""

import json
import signal
import subprocess
import time

import pytest
import yaml
from test_e2e_vllm import group_gone, scenario_file

pytestmark = pytest.mark.vllm


LABEL = "c=4 in=64 out=32"


def _cut_in_second_point(tmp_path, vllm_py, tiny_model, cli):
    """Starts c=1 (3 requests) then c=4 (24 requests of 32 tokens); Ctrl-C once c=4 has finished two."""
    f = scenario_file(tmp_path, vllm_py, tiny_model, concurrency=[1, 4])
    data = yaml.safe_load(f.read_text())
    data["workload"].update(num_prompts=3, prompts_per_concurrency=6, output_len=32)
    f.write_text(yaml.safe_dump(data))
    proc = subprocess.Popen([*cli, "serve-bench", str(f)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline and proc.poll() is None:
        runs = list((tmp_path / "runs").glob("*/run.json")) if (tmp_path / "runs").exists() else []
        req_file = runs[0].parent / "vllm-cpu.requests.jsonl" if runs else None
        if req_file and req_file.exists() and req_file.read_text().count(f'"label": "{LABEL}"') >= 2:
            proc.send_signal(signal.SIGINT)
            assert proc.communicate(timeout=120)[1] and proc.returncode == 130
            return f, runs[0].parent
        time.sleep(0.05)
    proc.kill()
    pytest.fail("the second load point never started: " + proc.communicate()[1][-3000:])


def test_an_interrupted_run_resumes_and_adds_a_point(tmp_path, vllm_py, tiny_model, cli):
    f, d = _cut_in_second_point(tmp_path, vllm_py, tiny_model, cli)
    before = json.loads((d / "run.json").read_text())["engines"]["vllm-cpu"]["points"]
    assert [(p["index"], p["status"]) for p in before][-1] == (1, "interrupted")
    data = yaml.safe_load(f.read_text())
    data["load"]["concurrency"] = [1, 4, 2]  # one more load point
    f.write_text(yaml.safe_dump(data))
    p = subprocess.run([*cli, "serve-bench", str(f), "--resume", str(d)], capture_output=True, text=True,
                       timeout=900)
    assert p.returncode in (0, 4), p.stderr[-3000:]  # 4: the client could not time a point (it says why)
    assert p.stdout.strip() == str(d) and len(list((tmp_path / "runs").iterdir())) == 1
    assert f"resuming {d}: {len(before)} point results on file, 2 cells to do" in p.stderr
    # the cut cell's duration is known only if an attempt of it finished before the cut (on a loaded machine the
    # first can finish untrusted before the second is cut); the new point's never
    measured = int(any(q["index"] == 1 and q["metrics"] and q["metrics"]["duration_s"] for q in before))
    assert "time estimate: 2 cells to do" in p.stderr
    assert f"{measured} from this run's measured durations, {2 - measured} a rough" in p.stderr
    assert "progress: 1 of 2 cells done" in p.stderr and "progress: 2 of 2 cells done" in p.stderr
    run = json.loads((d / "run.json").read_text())
    assert run["status"] == "complete" and len(run["resumed"]) == 1 and "--resume" in run["resumed"][0]["argv"]
    assert run["scenario"]["load"]["concurrency"] == [1, 4, 2]
    assert run["resumed"][0]["axes_before"]["load.concurrency"] == [1, 4]
    eng = run["engines"]["vllm-cpu"]
    assert eng["points"][:len(before)] == before  # c=1 finished before the cut: not measured again, untouched
    assert eng["starts"] == 2 and eng["status"] == "complete" and group_gone(eng["pid"])
    cut = before[-1]
    assert (cut["index"], cut["label"], cut["status"]) == (1, LABEL, "interrupted")
    new = eng["points"][len(before):]
    final = {(q["index"], q["label"]): q for q in new}
    assert set(final) == {(1, LABEL), (2, "c=2 in=64 out=32")}
    assert min(q["attempt"] for q in new if q["index"] == 1) == cut["attempt"] + 1  # numbered after the cut one
    # both lives ran here: every point carries this machine (a resume elsewhere would be judged cell by cell)
    assert {q["machine_key"] for q in eng["points"]} == {eng["machine"]["key"]} == {eng["machine"]["latest_key"]}
    reqs = [json.loads(x) for x in (d / "vllm-cpu.requests.jsonl").read_text().splitlines()]
    for q in (final[k] for k in final):
        mine = [r for r in reqs if (r["point"], r["attempt"]) == (q["index"], q["attempt"])]
        assert q["status"] in ("complete", "untrusted") and len(mine) == q["num_prompts"] == q["metrics"]["completed"]
    assert sum(r["point"] == 0 for r in reqs) == sum(q["metrics"]["completed"] for q in before if q["index"] == 0)

    # again: nothing left to do, no server started (said, and counted: not a wall-clock bound a loaded machine
    # may not meet)
    p = subprocess.run([*cli, "serve-bench", str(f), "--resume", str(d)], capture_output=True, text=True, timeout=300)
    assert p.returncode in (0, 4), p.stderr[-3000:]
    assert "vllm-cpu: every cell is done already" in p.stderr and "starting" not in p.stderr
    assert "time estimate: 0 cells to do" in p.stderr
    again = json.loads((d / "run.json").read_text())["engines"]["vllm-cpu"]
    assert again["points"] == eng["points"] and again["starts"] == eng["starts"]

    data["workload"]["output_len"] = 64  # not the same scenario: refused before anything starts
    f.write_text(yaml.safe_dump(data))
    p = subprocess.run([*cli, "serve-bench", str(f), "--resume", str(d)], capture_output=True, text=True, timeout=300)
    assert p.returncode == 2 and "workload.output_len: [32] on file but not in the scenario" in p.stderr
