"""How scripts/gpu/bundle.py asks pip (no code of a package runs): engine and peer specs, resolving a spec for
the GPU host (cp312, manylinux x86_64, the host's torch stack taken as given) and installing wheels into a folder."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import zipfile
from pathlib import Path

from bundle_plan import norm

PLAT = ["--python-version", "3.12", "--implementation", "cp", "--only-binary=:all:"] + [
    a for p in ("manylinux_2_35_x86_64", "manylinux_2_34_x86_64", "manylinux_2_31_x86_64", "manylinux_2_28_x86_64",
                "manylinux_2_27_x86_64", "manylinux_2_24_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64",
                "manylinux1_x86_64", "linux_x86_64", "any") for a in ("--platform", p)]
HOST_TORCH = {"torch": "2.11.0", "torchvision": "0.26.0", "torchaudio": "2.11.0", "triton": "3.6.0"}


def parse_spec(spec: str) -> tuple[str, str]:
    """'lmdeploy==0.17.0' -> ('lmdeploy', '0.17.0'); an engine version must be pinned."""
    m = re.fullmatch(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*==\s*([0-9][A-Za-z0-9.+!-]*)\s*", spec)
    if not m:
        raise SystemExit(f"bad engine {spec!r}: give NAME==VERSION, e.g. lmdeploy==0.17.0")
    return norm(m.group(1)), m.group(2)


def sh(*cmd: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(list(cmd), check=True, **kw)


def fake_wheels(d: Path) -> None:
    """Empty wheels for the host's torch stack, so the resolver takes them as given."""
    d.mkdir(parents=True, exist_ok=True)
    for name, ver in HOST_TORCH.items():
        dist = f"{name}-{ver}+host"
        with zipfile.ZipFile(d / f"{dist}-py3-none-any.whl", "w") as z:
            z.writestr(f"{dist}.dist-info/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: {ver}+host\n")
            z.writestr(f"{dist}.dist-info/WHEEL", "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
            z.writestr(f"{dist}.dist-info/RECORD", "")


def resolve(spec: str, work: Path, prefer: list[tuple[str, str]] = (), python: str = sys.executable) -> list[tuple[str, str]]:
    """The packages `spec` installs; with `prefer`, tried first with those versions as constraints (and
    resolved freely if they conflict). `python`: whose pip resolves (a 3.12 one for a Requires-Python >= 3.12)."""
    report = work / f"{norm(spec)}.json"
    cmd = [python, "-m", "pip", "install", "-q", "--dry-run", "--ignore-installed", "--find-links",
           str(work / "fake"), "--report", str(report), "--target", str(work / "t"), *PLAT, spec]
    if prefer:
        (work / "prefer.txt").write_text("".join(f"{n}=={v}\n" for n, v in prefer))
        if subprocess.run(cmd + ["-c", str(work / "prefer.txt")], stderr=subprocess.DEVNULL).returncode != 0:
            print(f"{spec}: the preferred versions conflict; resolved freely", file=sys.stderr)
            sh(*cmd, stderr=subprocess.DEVNULL)
    else:
        sh(*cmd, stderr=subprocess.DEVNULL)
    items = json.loads(report.read_text())["install"]
    return [(i["metadata"]["name"], i["metadata"]["version"]) for i in items]


def install(pkgs: list[tuple[str, str]], target: Path, python: str = sys.executable) -> None:
    sh(python, "-m", "pip", "install", "-q", "--no-deps", "--no-compile", "--target", str(target), *PLAT,
       *[f"{n}=={v}" for n, v in pkgs], stderr=subprocess.DEVNULL)
