"""What scripts/gpu/bundle.py carries of each engine version: not the host image's packages, not EXCLUDE (less what
KEEP gives an engine back), and its site folder less DROP's paths; and the CUDA toolkit SGLang's JIT kernels use
on the host (CUDA_HOME_SH, written into env.sh)."""

from __future__ import annotations

import re


def norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


# Not imported when these servers run an AWQ Qwen2 model on one Hopper GPU (VLLM_USE_FLASHINFER_SAMPLER=0):
EXCLUDE = {
    # (apache-tvm-ffi is kept: xgrammar imports tvm_ffi, and vLLM's request path imports xgrammar)
    "flashinfer-python", "tilelang", "torch-c-dlpack-ext", "z3-solver", "tokenspeed-mla",
    "tokenspeed-triton", "nvidia-cutlass-dsl", "nvidia-cutlass-dsl-libs-base", "nvidia-cutlass-dsl-libs-cu12",
    "nvidia-cutlass-dsl-libs-cu13", "nvidia-cutlass-dsl-libs-core", "nvidia-cudnn-frontend", "quack-kernels",
    "cuda-tile", "humming-kernels", "cuda-python", "pynvvideocodec", "torchcodec", "fastsafetensors", "sentry-sdk",
    "fastapi-cloud-cli", "rignore", "ray", "rdkit", "flash-linear-attention", "fla-core",
    # CUDA's compiler as wheels (13.4.92 for SGLang 0.5.15's flashinfer[cu13]): the JIT compilers these engines use
    # (apache-tvm-ffi's cpp/extension.py, flashinfer/jit/cpp_ext.py) run $CUDA_HOME/bin/nvcc and never look in a
    # site folder, and these wheels hold no cuda_runtime.h (nvidia-cuda-runtime's) nor lib64/libcudart.so: the
    # host's own nvcc 13.0 is used instead (CUDA_HOME_SH)
    "nvidia-cuda-cccl", "nvidia-cuda-nvcc", "nvidia-cuda-nvdisasm", "nvidia-cuda-crt", "nvidia-nvvm",
    "nvidia-cuda-tileiras",
    # TurboMind's CUDA 12 libraries: the runtime alone is carried, cuBLAS is forwarded by the shim
    "nvidia-cublas-cu12", "nvidia-cuda-runtime-cu12", "nvidia-curand-cu12", "nvidia-nccl-cu12",
    "nvidia-cuda-nvrtc-cu12",
    "flashinfer-cubin",  # 427 MB; SGLang on Hopper: FA3 attention, torch.argmax for greedy requests (sampler.py)
}
# What one engine needs of EXCLUDE (SGLang 0.5.15, from its source; not yet run on the H200): flashinfer.sampling is
# imported at module level on CUDA (srt/layers/sampler.py)
KEEP = {
    "sglang": {"flashinfer-python"},
}
# What one engine pins at a version other than the host image's, carried in its own site folder (first on its
# PYTHONPATH) although the host has the package. SGLang 0.5.15 pins transformers==5.12.1; with the host's 5.17.0 its
# server does not start: `AutoConfig.register("qwen3_asr", ...)` (srt/configs/qwen3_asr.py) raises "'qwen3_asr' is
# already used by a Transformers config" (H100, session 26). transformers 5.12.1 wants tokenizers<=0.23.0; the
# host has 0.23.2.
OVER_HOST = {
    "sglang": {"transformers", "tokenizers"},
}
DROP = {  # paths in an engine's site folder that are not needed to serve or to time kernels
    "vllm": ["vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so", "vllm/third_party/deep_gemm", "vllm/third_party/fmha_sm100",
             "bin/vllm-rs*"],
    # xgrammar's static library and headers for building against TurboMind (0.17: lib/, 0.18: turbomind/)
    "lmdeploy": ["lmdeploy/lib/lib64", "lmdeploy/lib/include", "lmdeploy/turbomind/lib64", "lmdeploy/turbomind/include"],
    # sglang-kernel 0.4.4 (615 MB wheel): load_utils.py loads sm90/ on compute capability 9.0; flashmla is MLA only.
    # flash_ops.abi3.so (273 MiB of the xz archive, 1.68 GB unpacked) is FA3, SGLang's default attention on Hopper:
    # kept, but for --sglang-without-fa3 (then --attention-backend triton)
    "sglang": ["sgl_kernel/sm100", "sgl_kernel/flashmla_ops.abi3.so"],
}
WITHOUT_FA3 = ["sgl_kernel/flash_ops.abi3.so"]


def keep(reqs: list[tuple[str, str]], host: set[str], engine: str = "") -> list[tuple[str, str]]:
    """What of an engine's requirements is carried: not the host's (but what OVER_HOST gives it back), not EXCLUDE
    (but what KEEP gives it back)."""
    out = EXCLUDE - KEEP.get(engine, set())
    own = OVER_HOST.get(engine, set())
    return [(n, v) for n, v in reqs
            if (norm(n) not in host or norm(n) in own) and norm(n) not in out and "+host" not in v]


def drop_table(without_fa3: bool = False) -> dict[str, list[str]]:
    """DROP, plus sgl_kernel's FA3 library for --sglang-without-fa3."""
    return {**DROP, "sglang": DROP["sglang"] + WITHOUT_FA3} if without_fa3 else DROP


# env.sh, for SGLang's JIT kernels (and flashinfer's): a CUDA_HOME that holds bin/nvcc, include/cuda_runtime.h and
# lib64/libcudart.so, since tvm-ffi runs $CUDA_HOME/bin/nvcc and links -L$CUDA_HOME/lib64 -lcudart. Unset, tvm-ffi
# takes the folder above `which nvcc`'s bin/, which is wrong where nvcc is a wrapper (/usr/local/bin/nvcc on this
# project's CPU machine: the link then fails), else /usr/local/cuda. A CUDA_HOME already set is kept.
CUDA_HOME_SH = r"""if [ -z "${CUDA_HOME:-}" ]; then
  for d in "$(dirname "$(dirname "$(command -v nvcc || echo /none/bin/nvcc)")")" /usr/local/cuda /usr/local/cuda-13*; do
    if [ -x "$d/bin/nvcc" ] && [ -f "$d/include/cuda_runtime.h" ] && [ -e "$d/lib64/libcudart.so" ]; then
      export CUDA_HOME=$d; break
    fi
  done
  [ -n "${CUDA_HOME:-}" ] || echo "env.sh: no CUDA toolkit with nvcc, cuda_runtime.h and lib64/libcudart.so; set CUDA_HOME for SGLang's JIT kernels" >&2
fi
"""
# env.sh, with SGLang: its JIT modules are kept in $TVM_FFI_CACHE_DIR (sglang/jit_kernel/utils.py load_jit); the
# bundle's folder, so that what bundle.py --jit-cache carried is found there and what the host compiles joins it
# (background.sh's `wait` brings that folder back for the next bundle). One already set is kept.
JIT_CACHE_SH = 'export TVM_FFI_CACHE_DIR=${TVM_FFI_CACHE_DIR:-$LLMC_ROOT/jit/tvm-ffi}\n'

