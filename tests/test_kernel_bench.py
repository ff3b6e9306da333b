import csv
import json

import pytest

from llmcompare import scenario
from llmcompare.kernels import bench


def test_normalisation_by_hand():
    # M=1, N=K=1024, int4 g128: weight 1024*1024/2 + 2*1024*8 + 1024*8/2 = 544768 B; x 2048 B; y 2048 B
    p = {"backend": "marlin", "shape": "t", "n": 1024, "k": 1024, "m": 1, "status": "ok", "graph_us": 10.0}
    out = bench.derive(dict(p), {"copy_gbps": 1000.0, "fp16_tflops": 100.0}, 128)
    nbytes = 544768 + 2048 + 2048
    assert out["gbps"] == pytest.approx(nbytes / 10e-6 / 1e9)
    assert out["pct_copy_bw"] == pytest.approx(100 * out["gbps"] / 1000)
    assert out["tflops"] == pytest.approx(2 * 1024 * 1024 / 10e-6 / 1e12)
    assert out["floor_us"] == pytest.approx(nbytes / 1e12 * 1e6)  # memory-bound: bytes / bandwidth
    assert out["pct_roofline"] == pytest.approx(100 * out["floor_us"] / 10.0)


def test_speedup_against_cublas_same_shape_and_m():
    pts = [{"backend": "cublas", "shape": "t", "m": 8, "graph_us": 30.0},
           {"backend": "marlin", "shape": "t", "m": 8, "graph_us": 10.0},
           {"backend": "marlin", "shape": "t", "m": 16, "graph_us": 10.0}]
    bench.add_speedups(pts)
    assert pts[1]["speedup_vs_cublas"] == pytest.approx(3.0) and "speedup_vs_cublas" not in pts[2]


def test_without_torch_every_backend_is_skipped_with_its_reason(tmp_path):
    s = scenario.load("qwen-awq", {"output_dir": str(tmp_path), "kernel_bench": {"m": [1]}})
    d = bench.kernel_bench(s, ["test"])
    run = json.loads((d / "run.json").read_text())
    assert run["schema"] == "llmcompare.kernel-bench/1" and run["status"] == "complete"
    assert [sh["n"] for sh in run["shapes"]] == [4608, 3584, 37888, 3584, 16384]
    for b in ("cublas", "marlin", "machete", "turbomind"):
        assert run["backends"][b]["status"] == "skipped" and "torch is not installed" in run["backends"][b]["reason"]
    assert list(csv.reader(open(d / "kernels.csv")))[0][:4] == ["backend", "shape", "n", "k"]


def test_committed_h200_results_follow_the_schema():
    from pathlib import Path

    run = json.loads((Path(__file__).parents[1] / "reports/h200-kernels/run.json").read_text())
    assert run["schema"] == "llmcompare.kernel-bench/1"
    assert {p["status"] for p in run["points"]} == {"ok"}
    assert all(p["rel_err"] < run["rtol"] for p in run["points"])
