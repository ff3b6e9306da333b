"""Opt-in GPU test (pytest -m gpu), run on the device: the TurboMind backend with whichever lmdeploy API is installed
(0.17's _turbomind classes or 0.18's lmdeploy.turbomind.linear) is correct and timed, each point carries the GEMM
lines TurboMind printed while tuning its M (tm_gemm), and none of that output reaches the worker's JSON stdout.
LLMCOMPARE_TURBOMIND_PYTHON picks the interpreter (e.g. /tmp/llmc/site/bin/python-lmdeploy-0.17.0)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]
ROOT = Path(__file__).resolve().parents[1]


def test_turbomind_points_carry_their_gemm_choice():
    n, k = 2048, 4096
    cfg = {"backends": ["turbomind"], "shapes": [["t", n, k]], "m": [1, 64, 512], "group_size": 128, "seed": 1,
           "rtol": 2e-3, "rep_ms": 20, "profile_m": [64], "ceilings": False}
    py = os.environ.get("LLMCOMPARE_TURBOMIND_PYTHON", sys.executable)
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    out = subprocess.run([py, "-m", "llmcompare.kernels.in_engine.worker", json.dumps(cfg)], capture_output=True, text=True,
                         env=env, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    msgs = [json.loads(x) for x in out.stdout.splitlines()]  # every stdout line is the worker's JSON
    if skips := [m for m in msgs if m["type"] == "skip"]:
        pytest.skip(skips[0]["reason"])
    points = [m for m in msgs if m["type"] == "point"]
    assert [p["m"] for p in points] == [1, 64, 512]
    for p in points:
        assert p["status"] == "ok", p
        assert p["graph_ok"] and p["graph_us"] > 0 and p["eager_us"] > 0, p
        assert p["tm_api"] and p["tm_gemm"], f"no TurboMind GEMM line parsed at M={p['m']}: {out.stderr[-3000:]}"
        kept = p["tm_gemm"][-1] if p["tm_gemm"][-1]["line"] == "gemm" else p["tm_gemm"][0]
        assert kept["k"] == k and {kept["m"], kept["n"]} == {p["m"], n}, kept
        assert kept["splits"] >= 1 and kept["kernel"]
