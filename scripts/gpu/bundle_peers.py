"""The peer benchmark clients (scripts/client_capacity.py's PEERS: guidellm, inference-perf) for the GPU host, as
venv-like folders that client_capacity.py and client_scaling.py find with LLMCOMPARE_PEERS_DIR
(scripts/gpu/bundle.py --peers)."""

from __future__ import annotations

import configparser
import shutil
import subprocess
import sys
from pathlib import Path

from bundle_pip import install, parse_spec, resolve
from bundle_plan import keep, norm

PEER_WRAPPER = """#!/usr/bin/env bash
# {what} (written by scripts/gpu/bundle.py --peers)
D=$(cd "$(dirname "$0")/.." && pwd)
export PYTHONPATH=$D/site${{PYTHONPATH:+:$PYTHONPATH}}
exec python3 {args}
"""


def python312() -> str:
    """A python 3.12 for the peers' resolve (inference-perf requires >= 3.12, and pip 23 checks the interpreter
    it runs in, whatever --python-version says)."""
    pyenv = sorted(Path("~/.pyenv/versions").expanduser().glob("3.12.*/bin/python"), reverse=True)
    for exe in ("python3.12", *map(str, pyenv)):
        path = shutil.which(exe) or (exe if Path(exe).exists() else None)
        if path and subprocess.run([path, "-c", ""], capture_output=True).returncode == 0:
            return path
    raise SystemExit("--peers: no python 3.12 to resolve with (e.g. pyenv install 3.12)")


def console_scripts(site: Path, dist: str) -> dict[str, str]:
    """name -> 'module:function' of a distribution's console scripts (its entry_points.txt)."""
    (info,) = [d for d in site.glob("*.dist-info") if norm(d.name.removesuffix(".dist-info").rsplit("-", 1)[0]) == norm(dist)]
    ep = configparser.ConfigParser(delimiters=("=",))
    ep.optionxform = str
    ep.read_string((info / "entry_points.txt").read_text() if (info / "entry_points.txt").exists() else "")
    return {k.strip(): v.strip() for k, v in (ep["console_scripts"].items() if "console_scripts" in ep else [])}


def write_commands(d: Path, name: str) -> list[str]:
    """d/bin/python (python3 with d/site first) and d/bin/<command> for each console script of distribution
    `name` installed in d/site; returns the commands."""
    (d / "bin").mkdir(parents=True, exist_ok=True)
    wrappers = {"python": ("python3 with its site first", '"$@"')}
    for cmd, target in console_scripts(d / "site", name).items():
        mod, _, attr = target.partition(":")
        code = (f"import sys, importlib, functools; sys.argv[0] = {cmd!r}; "
                f"sys.exit(functools.reduce(getattr, {attr!r}.split('.'), importlib.import_module({mod!r}))())")
        wrappers[cmd] = (f"{name}'s {cmd}", f"-c \"{code}\" \"$@\"")
    for cmd, (what, args) in wrappers.items():
        (d / "bin" / cmd).write_text(PEER_WRAPPER.format(what=what, args=args))
        (d / "bin" / cmd).chmod(0o755)
    return sorted(wrappers)


def stage_peers(specs: list[str], stage: Path, work: Path, host: set[str]) -> dict[str, list[str]]:
    """Each peer benchmark client (scripts/client_capacity.py's PEERS) as a venv-like folder stage/peers/<name>/:
    site/ (its packages less the host's), bin/python (python3 with site/ first) and bin/<command> for each of its
    console scripts; client_capacity.py finds them with LLMCOMPARE_PEERS_DIR=/tmp/llmc/peers."""
    py, out = python312(), {}
    for spec in specs:
        name, version = parse_spec(spec)
        pkgs = keep(resolve(f"{name}=={version}", work, python=py), host, name)
        install(pkgs, stage / "peers" / name / "site", python=py)
        cmds = write_commands(stage / "peers" / name, name)
        out[spec] = [f"{n}=={v}" for n, v in pkgs]
        print(f"peer {spec}: {len(pkgs)} packages, commands {cmds}", file=sys.stderr)
    return out
