"""Tensor parallelism (issue #16): the degree in scenarios, engine flags, the host's GPU topology, per-GPU GEMM
shapes, the all-reduce worker's plan and output, and the communication term of the attribution."""

import copy
import os

import pytest
import yaml

from llmcompare import scenario
from llmcompare.engines import launch
from llmcompare.errors import ScenarioError
from llmcompare.schema.scenario import Engine
from llmcompare.setup import host

BASE = {
    "model": {"path": "/models/x"},
    "engines": [{"name": "v", "kind": "vllm", "python": "/venv/bin/python"},
                {"name": "tm", "kind": "lmdeploy", "python": "/venv/bin/python"},
                {"name": "o", "kind": "openai", "base_url": "http://127.0.0.1:1"}],
    "workload": {"input_len": 16, "output_len": 4, "num_prompts": 2},
    "load": {"concurrency": [1]},
}


def load(tmp_path, **top):
    data = copy.deepcopy(BASE)
    data.update(top)
    f = tmp_path / "s.yaml"
    f.write_text(yaml.safe_dump(data))
    return scenario.load(str(f))


def test_scenario_degree_is_every_engines_unless_it_sets_its_own(tmp_path):
    s = load(tmp_path)
    assert s.tensor_parallel == 1 and [e.tensor_parallel for e in s.engines] == [1, 1, 1]
    assert s.kernel_bench.tensor_parallel == 1
    data = copy.deepcopy(BASE)
    data["engines"][1]["tensor_parallel"] = 4
    s = load(tmp_path, engines=data["engines"], tensor_parallel=2)
    assert [e.tensor_parallel for e in s.engines] == [2, 4, 2]
    assert s.kernel_bench.tensor_parallel == 2  # null: the scenario's
    s = load(tmp_path, tensor_parallel=2, kernel_bench={"tensor_parallel": 8})
    assert s.kernel_bench.tensor_parallel == 8


def test_the_flag_goes_on_each_engines_command_line(tmp_path):
    s = load(tmp_path, tensor_parallel=2)
    v, tm, o = s.engines
    assert launch.server_command(v, "/m", 1)[-2:] == ["--tensor-parallel-size", "2"]
    cmd = launch.server_command(tm, "/m", 1)
    assert cmd[-2:] == ["--tp", "2"] and cmd.count("--tp") == 1
    with pytest.raises(ScenarioError, match="not launched"):  # an already-running server: recorded, nothing passed
        launch.server_command(o, "/m", 1)
    one = Engine(name="v", kind="vllm", command=["vllm"], tensor_parallel=1)
    assert "--tensor-parallel-size" not in launch.server_command(one, "/m", 1)  # degree 1: the engine's default


def test_the_same_flag_in_args_is_kept_once_and_a_different_one_is_an_error(tmp_path):
    data = copy.deepcopy(BASE)
    data["engines"][0]["args"] = ["-tp", "2"]
    data["engines"][1]["args"] = ["--tp=2"]
    s = load(tmp_path, engines=data["engines"], tensor_parallel=2)
    v_cmd, tm_cmd = (launch.server_command(e, "/m", 1) for e in s.engines[:2])
    assert v_cmd[-2:] == ["-tp", "2"] and "--tensor-parallel-size" not in v_cmd
    assert "--tp=2" in tm_cmd and "--tp" not in tm_cmd
    data["engines"][1]["tensor_parallel"] = 4
    with pytest.raises(ScenarioError) as e:
        load(tmp_path, engines=data["engines"], tensor_parallel=2)
    assert str(e.value) == ("s.yaml: engines[1].args: passes --tp 2, but the engine's tensor-parallel degree is 4 "
                            "(engines[1].tensor_parallel); set tensor_parallel: 2 instead and drop --tp from args "
                            "(llmcompare passes --tp)")


def fake_nvidia_smi(tmp_path, topo_rc=0):
    """An nvidia-smi on PATH that answers the two queries setup/host.py makes."""
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    f = bin_ / "nvidia-smi"
    f.write_text("#!/bin/sh\n"
                 'if [ "$1" = topo ]; then printf "\\tGPU0\\tGPU1\\nGPU0\\t X \\tNV18\\nGPU1\\tNV18\\t X \\n"; '
                 f"exit {topo_rc}; fi\n"
                 'echo "NVIDIA H100 80GB HBM3, 570.1, 81559 MiB, 1980 MHz, 2619 MHz, 700.00 W"\n'
                 'echo "NVIDIA H100 80GB HBM3, 570.1, 81559 MiB, 1980 MHz, 2619 MHz, 700.00 W"\n')
    f.chmod(0o755)
    return str(bin_)


def test_host_records_gpu_count_and_topology_for_tensor_parallel_runs(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", fake_nvidia_smi(tmp_path) + os.pathsep + os.environ["PATH"])
    one, two = host.host_info(), host.host_info(tensor_parallel=2)
    assert one["gpu_count"] == 2 and one["gpu_topology"] is None  # degree 1: not asked
    assert two["tensor_parallel"] == 2 and "GPU0\t X \tNV18" in two["gpu_topology"]


def test_host_without_nvidia_smi_or_with_a_failing_one_still_answers(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no nvidia-smi at all
    info = host.host_info(tensor_parallel=4)
    assert info["gpus"] == [] and info["gpu_count"] == 0 and info["gpu_topology"] is None
    monkeypatch.setenv("PATH", fake_nvidia_smi(tmp_path, topo_rc=9) + os.pathsep + "/usr/bin:/bin")
    assert host.host_info(tensor_parallel=2)["gpu_topology"] is None


# ---- the all-reduce worker (kernels/in_engine/collectives.py) --------------------------------------------------------
def test_allreduce_plan_sizes_and_bad_arguments():
    from llmcompare.kernels.in_engine import collectives as C

    cfg = C.config(2, 5120, [256, 1, 16, 1], dtype="bfloat16")
    pts = C.plan(cfg)
    assert [(p.m, p.bytes) for p in pts] == [(1, 10240), (16, 163840), (256, 2621440)]  # M x 5120 x 2 bytes
    assert {(p.world_size, p.hidden_size, p.dtype, p.backend) for p in pts} == {(2, 5120, "bfloat16", "nccl")}
    with pytest.raises(ValueError, match="world_size: an all-reduce needs 2 or more processes, got 1"):
        C.config(1, 5120, [1])
    with pytest.raises(ValueError, match="dtype: 'int8' is not valid; valid: float16, bfloat16, float32"):
        C.config(2, 5120, [1], dtype="int8")
    with pytest.raises(ValueError, match="every M must be > 0"):
        C.config(2, 5120, [0])


def test_allreduce_summary_and_bus_bandwidth_by_hand():
    from llmcompare.kernels.in_engine import collectives as C

    p = C.plan(C.config(4, 1024, [512]))[0]  # 512 x 1024 x 2 = 1 MiB per GPU
    p = C.summarise(p, [30.0, 10.0, 20.0, 40.0, 50.0])
    assert (p.status, p.us, p.us_p20, p.us_p80) == ("ok", 30.0, 20.0, 50.0)
    assert p.algbw_gbps == pytest.approx(1048576 / 30e-6 / 1e9)
    assert p.busbw_gbps == pytest.approx(p.algbw_gbps * 2 * 3 / 4)  # ring: each byte crosses 2(n-1)/n links


def test_worker_lines_parse_into_typed_points():
    from llmcompare.kernels.in_engine import collectives as C
    from llmcompare.schema.kernel_run import AllReducePoint

    lines = ["NCCL INFO Bootstrap : Using eth0", "[1, 2]", '{"type": "env", "torch": "2.9"}',
             '{"type": "allreduce", "world_size": 2, "m": 16, "hidden_size": 5120, "bytes": 163840, "status": "ok", '
             '"us": 12.5, "busbw_gbps": 13.1, "new_field": 1}']
    msgs = [m for m in map(C.parse_line, lines) if m]
    assert [m["type"] for m in msgs] == ["env", "allreduce"]
    p = C.point_of(msgs[1])
    assert isinstance(p, AllReducePoint) and (p.m, p.us, p.busbw_gbps, p.dtype) == (16, 12.5, 13.1, "float16")


def test_allreduce_timing_loop_runs_over_gloo_on_cpu(vllm_py, tmp_path):
    """The worker itself, two processes over gloo on this CPU (the vLLM CPU build's torch): NCCL is not here."""
    import json
    import subprocess
    from pathlib import Path

    from llmcompare.kernels.in_engine import collectives as C

    cfg = C.config(2, 64, [1, 8], backend="gloo", iters=3, reps=5, warmup=1)
    root = str(Path(__file__).resolve().parents[1])
    p = subprocess.run([vllm_py, "-m", "llmcompare.kernels.in_engine.collectives", json.dumps(cfg)], capture_output=True,
                       text=True, timeout=180, env={**os.environ, "PYTHONPATH": root})
    assert p.returncode == 0, p.stderr[-2000:]
    msgs = [m for m in map(C.parse_line, p.stdout.splitlines()) if m]
    assert [m["type"] for m in msgs] == ["env", "allreduce", "allreduce", "done"]  # rank 0 alone prints
    pts = [C.point_of(m) for m in msgs[1:3]]
    assert [(x.m, x.bytes, x.status, x.backend) for x in pts] == [(1, 128, "ok", "gloo"), (8, 1024, "ok", "gloo")]
    assert all(0 < x.us_p20 <= x.us <= x.us_p80 for x in pts)


def test_kernel_bench_at_degree_2_times_per_gpu_shapes_and_records_the_allreduce(tmp_path, monkeypatch):
    import sys

    from llmcompare.kernels import bench
    from llmcompare.schema.files import load_run

    block = tmp_path / "block" / "torch"  # the worker's `import torch` fails: every backend and the all-reduce skip
    block.mkdir(parents=True)
    (block / "__init__.py").write_text("raise ImportError('blocked by the test')\n")
    monkeypatch.setenv("PYTHONPATH", str(block.parent))
    s = scenario.load("qwen32b-awq-tp2-h200", {"output_dir": str(tmp_path), "kernel_bench": {
        "m": [1, 64], "backends": ["cublas"], "python": {"cublas": sys.executable}}})
    run = load_run(bench.kernel_bench(s, ["test"]))
    assert run.tensor_parallel == 2 and run.host["tensor_parallel"] == 2 and run.layers == 64
    assert [(x["name"], x["n"], x["k"]) for x in run.shapes] == [
        ("qkv", 3584, 5120), ("o", 5120, 2560), ("gate_up", 27648, 5120), ("down", 5120, 13824)]
    w = run.collectives_worker
    assert w["status"] == "skipped" and "torch is not installed" in w["reason"]
    assert w["config"]["world_size"] == 2 and w["config"]["hidden_size"] == 5120 and w["config"]["m"] == [1, 64]


def test_report_splits_each_engines_time_into_gemm_communication_and_the_rest(tmp_path):
    """The committed H200 kernel run (tests/data/h200-kernels-v1: reports/h200-kernels/run.json), given an all-reduce
    table as a degree-2 run would record, beside the committed two-engine serve run: the report's time split adds up
    to each point's duration."""
    import json
    import re
    from pathlib import Path

    from llmcompare.report.build import build_report

    root = Path(__file__).resolve().parents[1]
    kdir = tmp_path / "kernels-tp2"
    kdir.mkdir()
    run = json.loads((root / "tests/data/h200-kernels-v1/run.json").read_text())
    run["tensor_parallel"] = 2
    run["collectives_worker"] = {"status": "complete", "env": {"nccl": "2.27.3"}}
    run["collectives"] = [{"world_size": 2, "m": m, "hidden_size": 3584, "bytes": m * 3584 * 2, "status": "ok",
                           "us": us, "busbw_gbps": 1.0} for m, us in ((1, 10.0), (256, 20.0), (16384, 400.0))]
    (kdir / "run.json").write_text(json.dumps(run))
    out = build_report([str(root / "tests/data/report-serve"), str(kdir)], str(tmp_path / "r"))
    md = (out / "report.md").read_text()
    assert "All-reduce over 2 GPUs (torch.distributed, NCCL, eager" in md
    assert "one GPU's share at tensor_parallel 2; all-reduce measured at M [1, 256, 16384]" in md
    assert "WARNING: vllm-a ran at tensor_parallel 1, the kernel table is at 2." in md
    split = md.split("Time per engine and point", 1)[1]
    header = next(ln for ln in split.splitlines() if ln.startswith("| engine |"))
    assert header.startswith("| engine | point | GEMM backend | duration s | GEMM s | GEMM % | comm s | comm %")
    rows = [[c.strip() for c in ln.strip("|").split("|")] for ln in split.splitlines()
            if ln.startswith("| vllm-")]
    points = {(r[0], r[1].split()[0]) for r in rows}  # the load (a workload cell may follow it)
    assert points == {("vllm-a", "c=1"), ("vllm-a", "c=4"), ("vllm-b", "c=1"), ("vllm-b", "c=4")}
    num = lambda s: float(re.sub(",", "", s))  # noqa: E731
    for r in rows:
        assert num(r[6]) > 0  # communication is counted
        assert num(r[4]) + num(r[6]) + num(r[8]) == pytest.approx(num(r[3]), abs=0.2)  # rounded to 0.1
        assert num(r[5]) + num(r[7]) + num(r[9]) == pytest.approx(100, abs=0.2)


def test_doctor_counts_the_gpus_an_engine_at_degree_n_can_see(monkeypatch):
    from llmcompare.setup import doctor, gpus

    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    one = [gpus.Gpu(0, "NVIDIA H200", "580", 9.0, 143771, 0)]
    check = lambda tp, **env: doctor.EnvCheck(0, Engine(name="v", kind="vllm", tensor_parallel=tp, env=env),  # noqa: E731
                                              probe={"version": "0.26.0", "torch": "2.11", "torch_cuda": "13.0"})
    (f,) = doctor.check_tensor_parallel([check(2)], one)
    assert (f.level, f.detail) == ("problem", "2 GPUs asked, 1 visible") and "lower tensor_parallel" in f.fix
    assert doctor.check_tensor_parallel([check(2)], one * 2)[0].level == "ok"
    (f,) = doctor.check_tensor_parallel([check(2, CUDA_VISIBLE_DEVICES="3")], one * 8)
    assert (f.level, f.detail) == ("problem", "2 GPUs asked, 1 visible (CUDA_VISIBLE_DEVICES=3)")
    assert doctor.check_tensor_parallel([check(1)], one) == []  # one GPU: nothing to say


def test_serve_bench_records_the_degree_of_an_already_running_server(tmp_path, tiny_model, cli):
    """An `openai` engine at tensor_parallel 2: nothing to pass, but run.json says it (and the host's GPUs)."""
    import json
    import subprocess

    import fakeserver  # tests/fakeserver.py

    from llmcompare.engines.server import free_port

    port = free_port()
    proc = fakeserver.launch(port)
    try:
        f = tmp_path / "s.yaml"
        f.write_text(yaml.safe_dump({
            "name": "tp", "model": {"path": tiny_model}, "tensor_parallel": 2,
            "engines": [{"name": "stub", "kind": "openai", "base_url": f"http://127.0.0.1:{port}"}],
            "workload": {"input_len": 8, "output_len": 4, "num_prompts": 2},
            "load": {"concurrency": [1], "warmup_requests": 0, "metrics_interval_s": 0},
            "output_dir": str(tmp_path / "runs")}))
        p = subprocess.run([*cli, "serve-bench", str(f)], capture_output=True, text=True, timeout=120)
    finally:
        proc.terminate()
        proc.wait()
    # 4: a point untrusted (on a loaded machine the client's loop wakes late against the fake server's 1-2 ms
    # TPOT); this test is about what run.json records, not about trust
    assert p.returncode in (0, 4), p.stderr[-2000:]
    (d,) = (tmp_path / "runs").iterdir()
    run = json.loads((d / "run.json").read_text())
    assert run["engines"]["stub"]["tensor_parallel"] == 2 and run["scenario"]["tensor_parallel"] == 2
    assert run["host"]["tensor_parallel"] == 2 and "gpu_count" in run["host"] and "gpu_topology" in run["host"]
