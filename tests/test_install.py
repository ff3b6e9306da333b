"""A non-editable install (`pip install .`, as a user installs a release) carries the named scenarios as package
data: `llmcompare serve-bench demo` finds `demo` from any directory, and runs (against the real vLLM CPU build)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """llmcompare installed from a copy of the tracked tree into a target directory (its dependencies are this
    interpreter's)."""
    tmp = tmp_path_factory.mktemp("install")
    src = tmp / "src"
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT, capture_output=True,
                           text=True, check=True).stdout.split()
    for f in files:
        if f.startswith(("llmcompare/", "pyproject.toml", "README.md")) and (ROOT / f).is_file():
            (src / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / f, src / f)
    target = tmp / "site"
    p = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps",
                        "--target", str(target), str(src)], capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr
    shutil.rmtree(src)  # nothing of the source tree is left to be found
    return target


def _env(target: Path, **extra: str) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(target), **extra}


def test_a_non_editable_install_finds_the_named_scenarios(installed, tmp_path):
    code = ("import llmcompare, json; from llmcompare import scenario; "
            "print(json.dumps([llmcompare.__file__, str(scenario.resolve_path('demo')), scenario.load('demo').name]))")
    p = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=_env(installed), capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    pkg, demo, name = json.loads(p.stdout)
    assert pkg.startswith(str(installed)) and demo.startswith(str(installed)) and demo.endswith("demo.yaml")
    assert name == "demo"


@pytest.mark.slow
def test_a_non_editable_install_runs_serve_bench_demo(installed, tmp_path, vllm_py):
    env = _env(installed, LLMCOMPARE_VLLM_PYTHON=vllm_py, LLMCOMPARE_HOME=str(tmp_path / "home"))
    p = subprocess.run([sys.executable, "-m", "llmcompare.cli", "serve-bench", "demo", "--num-prompts", "4",
                        "--concurrency", "2", "--output-dir", str(tmp_path / "runs")], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=900)
    assert p.returncode in (0, 4), p.stderr[-3000:]  # 4: complete, a point untrusted on a loaded machine
    run = json.loads((Path(p.stdout.strip().splitlines()[-1]) / "run.json").read_text())
    assert run["status"] == "complete" and run["engines"]["vllm-cpu"]["points"][0]["metrics"]["completed"] == 4
