#!/usr/bin/env python3
"""Builds, on a machine without a GPU, the SGLang JIT modules that a first SGLang start on the H200 would otherwise
compile there (device minutes): SGLang 0.5.15 compiles some CUDA kernels at first use with tvm-ffi and nvcc and
keeps them in $TVM_FFI_CACHE_DIR (default ~/.cache/tvm-ffi) as <module>__arch_9.0__tvmffi_<version>/<module>.so,
where <module> hashes the kernel's sources and template arguments, not where they are installed
(sglang/jit_kernel/utils.py load_jit). A module found there is loaded, not compiled.

  python3.12 scripts/gpu/sglang_jit_cache.py SITE OUT [--cuda-home /usr/local/cuda]

SITE: a bundle site folder holding sglang/ and tvm_ffi/ (bundle.py's site/sglang-0.5.15, or common/ for tvm_ffi;
give both with ':'); OUT: the cache folder made (its layout is TVM_FFI_CACHE_DIR's). Needs python 3.12 (tvm_ffi's
core.abi3.so uses 3.12's C API) and CUDA 13's nvcc (the host's toolkit is 13.0). No torch: these kernels include
no torch header, so a stand-in gives load_jit the few names it reads (dtypes, torch.version); SGLang's package
__init__ is not run (it imports the server).

Built (what an AWQ Qwen2.5-7B in float16 on one Hopper GPU is known to load; sglang 0.5.15's source):
  gptq_marlin<fp16_t>          the int4 GEMM (awq_marlin's apply): 277 s on one core here, most of the saving
  awq_marlin_repack            the weight repack at load
  kvcache<1024, true>          the KV-cache store: 4 KV heads x 128 x 2 bytes a row; PDL on (sm90)
Other JIT kernels a start compiles (activation, norm, rope, clamp_position, ...) depend on runtime choices not
emulated here; the host compiles those, and `background.sh` brings its ~/.cache/tvm-ffi back for the next bundle.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import time
import types
from pathlib import Path

# (label, jit module, function, arguments): arguments as SGLang passes them; "fp16" stands for torch.float16
KERNELS = [
    ("awq_marlin_repack", "awq_marlin_repack", "_jit_awq_marlin_repack_module", ()),
    ("kvcache row_bytes=1024", "kvcache", "_jit_kvcache_module", (1024,)),
    ("gptq_marlin fp16", "gptq_marlin", "_jit_gptq_marlin_module", ("fp16",)),
]


def torch_stand_in() -> types.ModuleType:
    """The names sglang/jit_kernel/utils.py and the three modules read at import and build time."""
    torch = types.ModuleType("torch")

    class dtype:  # noqa: N801 (torch's name)
        def __init__(self, name: str):
            self.name = name

        def __repr__(self) -> str:
            return f"torch.{self.name}"

    for n in ("float", "float16", "float8_e4m3fn", "bfloat16", "int8", "int32", "int64"):
        setattr(torch, n, dtype(n))
    torch.dtype, torch.Tensor = dtype, type("Tensor", (), {})
    torch.version = types.SimpleNamespace(hip=None, cuda="13.0")
    torch.cuda = types.SimpleNamespace(current_device=lambda: (_ for _ in ()).throw(RuntimeError("no GPU")))
    return torch


def package_stand_ins(sglang_dir: Path) -> None:
    """sglang and sglang.jit_kernel as bare packages (their __init__ would import the server), and the three
    helpers the kernel modules import from elsewhere in sglang."""
    for name, path in (("sglang", sglang_dir), ("sglang.jit_kernel", sglang_dir / "jit_kernel"),
                       ("sglang.srt", sglang_dir / "srt"), ("sglang.srt.utils", sglang_dir / "srt/utils")):
        m = types.ModuleType(name)
        m.__path__ = [str(path)]
        sys.modules[name] = m
    helpers = {"sglang.utils": {"is_in_ci": lambda: False},
               "sglang.kernel_api_logging": {"debug_kernel_api": lambda f: f},
               "sglang.srt.utils.custom_op": {"register_custom_op": lambda *a, **k: (lambda f: f)}}
    for name, attrs in helpers.items():
        m = types.ModuleType(name)
        m.__dict__.update(attrs)
        sys.modules[name] = m


def build(sites: list[Path], out: Path) -> list[dict]:
    for s in sites:
        sys.path.insert(0, str(s))
    sglang_dir = next(s / "sglang" for s in sites if (s / "sglang/jit_kernel").is_dir())
    try:
        import typing_extensions  # noqa: F401 (tvm_ffi imports it; the bundle carries it in common/ or the host has it)
    except ImportError:
        import typing

        sys.modules["typing_extensions"] = typing  # 3.12's typing has what tvm_ffi takes from it (dataclass_transform)
    importlib.import_module("tvm_ffi.cpp")  # first, so that tvm_ffi's optional torch interop does not see the stand-in
    sys.modules["torch"] = torch = torch_stand_in()
    package_stand_ins(sglang_dir)
    os.environ["TVM_FFI_CACHE_DIR"] = str(out)
    utils = importlib.import_module("sglang.jit_kernel.utils")
    done = []
    with utils.override_jit_cuda_arch(9, 0):  # the H200 (sm_90, no 'a' suffix: _init_jit_cuda_arch_once)
        assert utils.is_arch_support_pdl()  # cached from here on, as on the host
        for label, module, fn, args in KERNELS:
            f = getattr(importlib.import_module(f"sglang.jit_kernel.{module}"), fn)
            t0 = time.monotonic()
            f(*[torch.float16 if a == "fp16" else a for a in args])
            done.append({"kernel": label, "compile_s": round(time.monotonic() - t0, 1)})
            print(f"{label}: {done[-1]['compile_s']} s", flush=True)
    return done


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("site", help="folder(s) holding sglang/ and tvm_ffi/, ':'-separated")
    ap.add_argument("out", help="the cache folder to fill (TVM_FFI_CACHE_DIR's layout)")
    ap.add_argument("--cuda-home", default=os.environ.get("CUDA_HOME", "/usr/local/cuda"))
    a = ap.parse_args()
    if sys.version_info[:2] != (3, 12):
        raise SystemExit(f"python 3.12 is needed (tvm_ffi's core.abi3.so uses its C API); this is {sys.version}")
    nvcc = Path(a.cuda_home) / "bin/nvcc"
    if not nvcc.exists():
        raise SystemExit(f"--cuda-home {a.cuda_home}: no bin/nvcc there")
    os.environ["CUDA_HOME"] = a.cuda_home
    out = Path(a.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    done = build([Path(p).resolve() for p in a.site.split(":")], out)
    nvcc_version = os.popen(f"{nvcc} --version").read().strip().splitlines()[-1]
    (out / "BUILT.json").write_text(json.dumps({"arch": "9.0", "nvcc": nvcc_version, "kernels": done}, indent=1))


if __name__ == "__main__":
    main()
