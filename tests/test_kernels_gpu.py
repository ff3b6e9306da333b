"""Opt-in GPU tests (pytest -m gpu), run on the device: each backend's int4 GEMM on a small shape is correct
against the fp32 reference and gets timed. Skipped without CUDA; a backend whose engine is absent is skipped."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]
ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("backend", ["cublas", "marlin", "machete", "turbomind", "sglang-marlin"])
def test_backend_is_correct_and_timed(backend):
    cfg = {"backends": [backend], "shapes": [["t", 4096, 4096]], "m": [1, 64, 512], "group_size": 128, "seed": 1,
           "rtol": 2e-3, "rep_ms": 20, "profile_m": [64], "ceilings": False}
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    out = subprocess.run([sys.executable, "-m", "llmcompare.kernels.in_engine.worker", json.dumps(cfg)], capture_output=True,
                         text=True, env=env, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    msgs = [json.loads(x) for x in out.stdout.splitlines()]
    skips = [m for m in msgs if m["type"] == "skip"]
    if skips:
        pytest.skip(skips[0]["reason"])
    points = [m for m in msgs if m["type"] == "point"]
    assert [p["m"] for p in points] == [1, 64, 512]
    for p in points:
        assert p["status"] == "ok", p
        assert p["rel_err"] < 2e-3 and p["graph_us"] > 0 and p["eager_us"] > 0
    assert points[1]["kernels"], "the profiler saw no kernel"


def test_sglang_marlin_atomic_add_shape_is_correct():
    """SGLang 0.5.15 turns on Marlin's atomic-add reduce for n < 2048 and k >= 2048 (sglang_marlin.use_atomic_add):
    a shape that takes it, checked by the worker on an output poisoned with NaN (a kernel that added into its
    output without first writing it would fail)."""
    cfg = {"backends": ["sglang-marlin"], "shapes": [["t", 1024, 4096]], "m": [1, 16], "group_size": 128,
           "seed": 2, "rtol": 2e-3, "rep_ms": 10, "profile_m": [], "ceilings": False}
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    out = subprocess.run([sys.executable, "-m", "llmcompare.kernels.in_engine.worker", json.dumps(cfg)],
                         capture_output=True, text=True, env=env, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    msgs = [json.loads(x) for x in out.stdout.splitlines()]
    if skips := [m for m in msgs if m["type"] == "skip"]:
        pytest.skip(skips[0]["reason"])
    points = [m for m in msgs if m["type"] == "point"]
    assert [p["m"] for p in points] == [1, 16] and all(p["status"] == "ok" and p["rel_err"] < 2e-3 for p in points)
