import csv
import os
import subprocess
import sys
from pathlib import Path

import pytest

from llmcompare import scenario
from llmcompare.engines.gemm_backends import weight_bytes
from llmcompare.kernels import bench
from llmcompare.schema.files import load_run
from llmcompare.schema.kernel_run import KernelPoint


def test_normalisation_by_hand():
    # M=1, N=K=1024, int4 g128: weight 1024*1024/2 + 2*1024*8 + 1024*8/2 = 544768 B; x 2048 B; y 2048 B
    p = KernelPoint(backend="marlin", shape="t", n=1024, k=1024, m=1, status="ok", graph_us=10.0)
    out = bench.derive(p, {"copy_gbps": 1000.0, "fp16_tflops": 100.0}, 128)
    nbytes = 544768 + 2048 + 2048
    assert out.gbps == pytest.approx(nbytes / 10e-6 / 1e9)
    assert out.pct_copy_bw == pytest.approx(100 * out.gbps / 1000)
    assert out.tflops == pytest.approx(2 * 1024 * 1024 / 10e-6 / 1e12)
    assert out.floor_us == pytest.approx(nbytes / 1e12 * 1e6)  # memory-bound: bytes / bandwidth
    assert out.pct_roofline == pytest.approx(100 * out.floor_us / 10.0)


def test_versioned_backend_names_share_the_registry_entry():
    assert weight_bytes("turbomind@0.17.0", 1024, 1024, 128) == weight_bytes("turbomind", 1024, 1024, 128) == 544768
    with pytest.raises(ValueError, match="unknown backend 'nope@1'; valid: cublas, marlin, machete, turbomind"):
        weight_bytes("nope@1", 8, 8, 8)


def test_speedup_against_cublas_same_shape_and_m():
    pts = [KernelPoint(backend="cublas", shape="t", m=8, graph_us=30.0),
           KernelPoint(backend="marlin", shape="t", m=8, graph_us=10.0),
           KernelPoint(backend="marlin", shape="t", m=16, graph_us=10.0)]
    bench.add_speedups(pts)
    assert pts[1].speedup_vs_cublas == pytest.approx(3.0) and pts[2].speedup_vs_cublas is None


def test_a_python_without_torch_skips_every_backend_with_its_reason(tmp_path, monkeypatch):
    # whether or not this python has torch, the worker's import of it fails: a torch package that refuses
    block = tmp_path / "block" / "torch"
    block.mkdir(parents=True)
    (block / "__init__.py").write_text("raise ImportError('blocked by the test')\n")
    monkeypatch.setenv("PYTHONPATH", str(block.parent))
    py = sys.executable
    s = scenario.load("qwen-awq", {"output_dir": str(tmp_path), "kernel_bench": {
        "m": [1], "backends": ["cublas", "turbomind@0.17.0"], "python": {"cublas": py, "turbomind@0.17.0": py}}})
    d = bench.kernel_bench(s, ["test"])
    run = load_run(d)
    assert run.schema == "llmcompare.kernel-bench/2" and run.status == "complete"
    assert run.scenario["kernel_bench"]["backends"] == ["cublas", "turbomind@0.17.0"]  # the full scenario
    assert [sh["n"] for sh in run.shapes] == [4608, 3584, 37888, 3584, 16384]
    assert run.tensor_parallel == 1 and run.collectives_worker == {} and run.collectives == []  # one GPU: no all-reduce
    for b in ("cublas", "turbomind@0.17.0"):
        assert run.backends[b]["status"] == "skipped" and "torch is not installed" in run.backends[b]["reason"]
    assert list(csv.reader(open(d / "kernels.csv")))[0][:4] == ["backend", "shape", "n", "k"]


def test_a_hung_worker_is_stopped_at_its_deadline(tmp_path):
    fake = tmp_path / "fakepy"
    mark = f"sleep 300.{os.getpid()}"  # this test's own: another job's `sleep 300` is not a worker left behind
    fake.write_text(f"#!/bin/sh\n{mark} &\n{mark}\n")  # a worker (and a child) that never answers
    fake.chmod(0o755)
    s = scenario.load("qwen-awq", {"output_dir": str(tmp_path), "kernel_bench": {
        "m": [1], "backends": ["cublas"], "python": {"cublas": str(fake)}, "timeout_s": 2}})
    d = bench.kernel_bench(s, ["test"])
    run = load_run(d)
    assert run.backends["cublas"]["status"] == "failed" and "deadline" in run.backends["cublas"]["reason"]
    left = subprocess.run(["pgrep", "-f", mark], capture_output=True, text=True).stdout.split()
    assert not left, f"worker processes left behind: {left}"


def test_version_1_kernel_runs_are_read():
    run = load_run(Path(__file__).parent / "data/h200-kernels-v1")  # a copy of reports/h200-kernels/run.json
    assert run.schema == "llmcompare.kernel-bench/1" and run.scenario_name == "qwen-awq"
    assert {p.status for p in run.points} == {"ok"}
    tm = next(p for p in run.points if (p.backend, p.shape, p.m) == ("turbomind", "down", 1))
    assert tm.graph_us > 0 and tm.kernels
