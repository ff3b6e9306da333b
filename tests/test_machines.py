"""One machine per comparison (issue 26 item 3): each engine record carries its machine; a verdict between engines
not shown to be measured on one machine is refused unless asked for, and then says so."""

import json
import shutil
from pathlib import Path

import pytest

from llmcompare.analysis import machines, verdict
from llmcompare.report.build import build_report
from llmcompare.schema.files import load_run
from llmcompare.schema.machine import Machine
from llmcompare.schema.run import EngineRecord
from llmcompare.serve.runner import same_machine
from llmcompare.setup import host

DATA = Path(__file__).parent / "data"
TM, VL = DATA / "h200-grid-turbomind", DATA / "h200-grid-vllm"  # two runs: two H200 machines (DEVICE-NOTES)


def rec(name, key, **kw):
    return EngineRecord(name=name, machine=Machine(key=key, hostname="vm", **kw))


def test_difference_names_both_machines_and_is_none_for_one():
    assert machines.difference(rec("a", "boot 1 gpus G1"), rec("b", "boot 1 gpus G1")) is None
    why = machines.difference(rec("a", "boot 1 gpus G1", gpu_uuids=["GPU-1111"]),
                              rec("b", "boot 2 gpus G2", gpu_uuids=["GPU-2222"]))
    assert why.startswith("measured on different machines") and "GPU-1111" in why and "GPU-2222" in why
    assert "not shown to be one machine" in machines.difference(rec("a", ""), rec("b", ""))  # "" never matches
    assert machines.difference(EngineRecord(name="a"), rec("b", "k")) == "machine not recorded for a"


def test_this_machine_is_named_by_the_gpus_the_engine_sees_else_the_boot_id(monkeypatch):
    found = [{"name": "NVIDIA H200", "uuid": "GPU-aaaa"}, {"name": "NVIDIA H200", "uuid": "GPU-bbbb"}]
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    everyone = host.machine({}, found=found)
    assert everyone.gpu_uuids == ["GPU-aaaa", "GPU-bbbb"] and everyone.boot_id == host.boot_id() != ""
    assert everyone.key == "gpus GPU-aaaa,GPU-bbbb" and everyone.gpu_name == "NVIDIA H200"
    assert host.machine({"CUDA_VISIBLE_DEVICES": "1"}, found=found).gpu_uuids == ["GPU-bbbb"]
    assert host.machine({"CUDA_VISIBLE_DEVICES": "GPU-aa"}, found=found).gpu_uuids == ["GPU-aaaa"]
    cpu = host.machine({}, found=[])
    assert cpu.gpu_uuids == [] and cpu.key == f"boot {host.boot_id()}" and cpu.cpu_model == host.cpu_model()
    remote = host.machine({}, server_host="10.0.0.7", found=found)
    assert remote.key == "" and remote.server_host == "10.0.0.7"  # another address: its machine is not known


def test_an_engine_restarted_on_another_machine_is_not_one_machine():
    a, b = Machine(key="boot 1", hostname="vm"), Machine(key="boot 2", hostname="vm")
    assert same_machine(None, a) is a and same_machine(a, Machine(key="boot 1")).key == "boot 1"
    both = same_machine(a, b)
    assert both.key == "" and "more than one machine" in both.source
    assert same_machine(both, Machine(key="boot 2")).key == ""  # and stays so


def test_older_files_get_the_runs_host_as_machine_one_run_one_machine(tmp_path):
    tm, vl = load_run(TM), load_run(VL)
    m = tm.engines["turbomind"].machine
    assert m.source == "run host" and m.key == f"run {tm.created_at}" and m.hostname == "vm"
    assert vl.engines["vllm"].machine.key == f"run {vl.created_at}"  # another run: another machine
    data = json.loads((TM / "run.json").read_text())
    data["resumed"] = [{"at": "x"}]  # a resumed run may have moved between machines: not known
    (tmp_path / "run.json").write_text(json.dumps(data))
    m = load_run(tmp_path).engines["turbomind"].machine
    assert m.key == "" and "resumed" in m.source


def test_a_cross_machine_verdict_is_refused_unless_asked_and_then_says_so(tmp_path):
    tm, vl = load_run(TM).engines["turbomind"], load_run(VL).engines["vllm"]
    assert verdict.compare(tm, vl, figures="whole") == []
    assert "different machines" in verdict.refused(tm, vl, cross_machine=False)
    rows = verdict.compare(tm, vl, figures="whole", cross_machine=True)
    assert rows and all(r.machines and "different machines" in r.machines for r in rows)
    assert verdict.refused(tm, vl, cross_machine=True) is None

    no = (build_report([str(TM), str(VL)], str(tmp_path / "no"), baseline="vllm", figures="whole") / "report.md")
    text = no.read_text()
    assert "No verdict between turbomind and vllm: measured on different machines" in text
    assert "report --cross-machine" in text and "gap % [95% interval]" not in text  # no verdict table
    yes = build_report([str(TM), str(VL)], str(tmp_path / "yes"), baseline="vllm", figures="whole",
                       cross_machine=True) / "report.md"
    text = yes.read_text()
    assert "Compared across machines, as asked" in text and "(across machines)" in text


def test_the_same_run_on_one_machine_is_compared(tmp_path):
    """Both engines of one run share its key: no refusal (a new file records the boot id per engine)."""
    d = tmp_path / "run"
    shutil.copytree(VL, d)
    data = json.loads((d / "run.json").read_text())
    data["engines"]["vllm2"] = {**data["engines"]["vllm"], "name": "vllm2"}
    for e in data["engines"].values():
        e["machine"] = {"key": "boot 42 gpus GPU-x", "hostname": "vm", "gpu_uuids": ["GPU-x"]}
    (d / "run.json").write_text(json.dumps(data))
    run = load_run(d)
    assert verdict.refused(run.engines["vllm2"], run.engines["vllm"], False) is None
    assert verdict.compare(run.engines["vllm2"], run.engines["vllm"], figures="whole")


@pytest.mark.parametrize("bad", ["yes please", 3])
def test_interleave_takes_a_boolean(tmp_path, bad):
    from llmcompare.errors import ScenarioError
    from llmcompare.scenario import load
    f = tmp_path / "s.yaml"
    f.write_text(json.dumps({"name": "x", "model": {"path": "m"}, "engines": [{"name": "a", "kind": "vllm"}],
                             "load": {"interleave": bad}}))
    with pytest.raises(ScenarioError, match="interleave"):
        load(str(f))


def test_a_start_keeps_its_own_machine_as_latest_key():
    a, b = Machine(key="boot 1"), Machine(key="boot 2")
    assert same_machine(None, a).latest_key == "boot 1"
    both = same_machine(same_machine(None, a), b)
    assert both.key == "" and both.latest_key == "boot 2"  # the record spans machines; its new points are on boot 2


def _resumed_pair(tmp_path, cell_machines):
    """h200-grid-vllm's run as two engines whose records span machines (a resume elsewhere, key ""), with each
    point stamped by `cell_machines(label, engine) -> key` as serve-bench stamps them from session 33 on."""
    d = tmp_path / "run"
    shutil.copytree(VL, d)
    data = json.loads((d / "run.json").read_text())
    data["engines"]["vllm2"] = json.loads(json.dumps({**data["engines"]["vllm"], "name": "vllm2"}))
    for name, e in data["engines"].items():
        e["machine"] = {"key": "", "hostname": "vm", "source": "measured on more than one machine"}
        for p in e["points"]:
            p["machine_key"] = cell_machines(f"c={p['concurrency']} in={p['input_len']}", name)
    (d / "run.json").write_text(json.dumps(data))
    shutil.copy(d / "vllm.requests.jsonl.xz", d / "vllm2.requests.jsonl.xz")
    run = load_run(d)
    return d, run.engines["vllm2"], run.engines["vllm"]


def test_a_run_resumed_on_another_machine_gives_verdicts_where_each_cell_was_on_one(tmp_path):
    """Cells of 1024-token prompts were measured on machine A by both engines, c=1 with 512 on B by both, c=16 with
    512 on A by one engine and B by the other: verdicts at the first five, none at the last, and the report says
    where and why."""
    def where(label, engine):
        return "gpus GPU-B" if label == "c=1 in=512" or (label == "c=16 in=512" and engine == "vllm2") else "gpus GPU-A"
    d, a, b = _resumed_pair(tmp_path, where)
    assert machines.difference(a, b).startswith("not shown to be one machine")  # the records alone: refused
    rows = verdict.compare(a, b, figures="whole")
    assert {r.key.label for r in rows} == {"c=1 in=1024 out=256", "c=16 in=1024 out=256", "c=64 in=1024 out=256",
                                           "c=256 in=1024 out=256", "c=1 in=512 out=256"}
    assert all(r.machines is None for r in rows)
    assert verdict.refused(a, b, False) is None
    left = verdict.machine_left_out(a, b, False)
    assert left.startswith("vllm2 against vllm: no verdict at c=16 in=512 out=256 (measured on different machines "
                           "(vllm2: gpus GPU-B; vllm: gpus GPU-A))")
    assert len(verdict.compare(a, b, figures="whole", cross_machine=True)) == 6
    assert verdict.machine_left_out(a, b, True) is None
    text = (build_report([str(d)], str(tmp_path / "r"), baseline="vllm", figures="whole") / "report.md").read_text()
    assert "Vllm2 against vllm: no verdict at c=16 in=512 out=256 (measured on different machines" in text


def test_points_of_one_cell_on_two_machines_or_an_unknown_one_are_not_one_machine(tmp_path):
    _, a, b = _resumed_pair(tmp_path, lambda label, engine: "")  # a server at another address: not known
    assert verdict.compare(a, b, figures="whole") == []
    assert verdict.refused(a, b, False).startswith("no verdict between vllm2 and vllm: not shown to be one machine")
    _, a, b = _resumed_pair(tmp_path / "2", lambda label, engine: "gpus GPU-A")
    assert len(verdict.compare(a, b, figures="whole")) == 6 and verdict.machine_left_out(a, b, False) is None
    pts = verdict.usable_points(a)
    key = next(iter(pts))
    pts[key][0].machine_key = "gpus GPU-B"  # one repeat of the cell elsewhere
    assert "measured on different machines (vllm2: gpus GPU-A, gpus GPU-B; vllm: gpus GPU-A)" in \
        machines.cell_difference(a, pts[key], b, verdict.usable_points(b)[key])


def test_keys_in_messages_keep_every_gpu():
    two = "gpus GPU-34f47e86-4dfd-0919-423a-fcd6b6bda967,GPU-aaaaaaaa-4dfd-0919-423a-fcd6b6bda967"
    assert machines._short(two) == "gpus GPU-34f47e86…,GPU-aaaaaaaa…" and machines._short("") == "not known"
