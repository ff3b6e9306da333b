"""SGLang 0.5.15's int4 GEMM for AWQ on CUDA, as its AWQMarlinLinearKernel runs it. Runs inside SGLang's environment
(imported by worker.py only; needs torch, sglang, sglang-kernel's scalar types and apache-tvm-ffi with nvcc).

Read from the sglang 0.5.15 wheel (2026-12-04), srt/hardware_backend/gpu/quantization/awq_kernels.py,
AWQMarlinLinearKernel.process_weights_after_loading and apply:
  qweight <- sglang.jit_kernel.awq_marlin_repack.awq_marlin_repack(qweight, size_k, size_n, num_bits=4)
  scales  <- marlin_permute_scales(scales, size_k, size_n, group_size)
  qzeros  <- awq_to_marlin_zero_points(qzeros, size_k=num_groups, size_n, num_bits=4)
  workspace = marlin_make_workspace(device): zeros(SM count) int32; g_idx and its sort indices: empty int32
then srt/layers/quantization/marlin_utils.py apply_awq_marlin_linear:
  gptq_marlin_gemm(x, None, qweight, scales, None, qzeros, g_idx, g_idx_sort_indices, workspace,
                   scalar_types.uint4, size_m, size_n, size_k, use_atomic_add, use_fp32_reduce=True,
                   is_zp_float=False)
with gptq_marlin_gemm from sglang.jit_kernel.gptq_marlin: a Marlin kernel (`device::marlin::Marlin<...>`,
jit_kernel/csrc/gemm/marlin/) compiled by tvm-ffi at its first call (nvcc; cached under $TVM_FFI_CACHE_DIR, default
~/.cache/tvm-ffi): the worker's correctness call, before any timing, takes that compile.

SGLang's marlin_permute_scales and awq_to_marlin_zero_points compute what vLLM's do (the same get_scale_perms and
the same [0, 2, 4, 6, 1, 3, 5, 7] interleave, read side by side): they are impls._scale_perms/_pack_cols here, not
imported from sglang.srt (whose modules pull in the serving stack). should_use_atomic_add_reduce in 0.5.15 has its
env switch stubbed to on (`if not True:`), so for fp16 on CUDA it is n < 2048 and k >= 2048.
"""

from __future__ import annotations

import importlib
import importlib.util
import os

import torch

from llmcompare.kernels.in_engine.impls import _pack_cols, _package_dir, _scale_perms


def _uint4():
    """sgl_kernel's scalar_types.uint4 (AWQMarlinConfig.TYPE_MAP[4]), read from scalar_type.py without running
    sgl_kernel's package __init__ when the file is there."""
    path = os.path.join(_package_dir("sgl_kernel"), "scalar_type.py")
    if os.path.exists(path):
        spec = importlib.util.spec_from_file_location("_llmc_sgl_scalar_type", path)
        st = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(st)
        return st.scalar_types.uint4
    return importlib.import_module("sgl_kernel.scalar_type").scalar_types.uint4


def use_atomic_add(m: int, n: int, k: int) -> bool:
    """SGLang 0.5.15's should_use_atomic_add_reduce for fp16 on CUDA (see the module docstring)."""
    return n < 2048 and k >= 2048


class SglangMarlin:
    """SGLang's JIT Marlin: awq_marlin_repack + Marlin scale/zero permutation, then gptq_marlin_gemm."""

    name = "sglang-marlin"

    def __init__(self):
        self.repack = importlib.import_module("sglang.jit_kernel.awq_marlin_repack").awq_marlin_repack
        self.gemm = importlib.import_module("sglang.jit_kernel.gptq_marlin").gptq_marlin_gemm
        self.uint4 = _uint4()
        dev = torch.device("cuda")
        sms = torch.cuda.get_device_properties(dev).multi_processor_count
        self.workspace = torch.zeros(sms, dtype=torch.int, device=dev)  # marlin_make_workspace, 1 block per SM
        self.empty = torch.empty(0, dtype=torch.int, device=dev)  # marlin_make_empty_g_idx: no act order

    def prepare(self, t: dict) -> dict:
        k, n = t["k"], t["n"]
        q = self.repack(t["qweight"], size_k=k, size_n=n, num_bits=4)
        perm, _ = _scale_perms()
        s = t["scales"].reshape(-1, 64)[:, perm].reshape(-1, n).contiguous()
        z = t["z"].reshape(-1, 64)[:, perm]  # AWQ's zero points, unpacked and de-interleaved already
        z = z.reshape(-1, 8)[:, [0, 2, 4, 6, 1, 3, 5, 7]].reshape(-1, n).contiguous()
        return {"q": q, "s": s, "z": _pack_cols(z), "k": k, "n": n}

    def setup(self, x: torch.Tensor, w: dict) -> None:
        pass

    def __call__(self, x: torch.Tensor, w: dict, out: torch.Tensor | None = None) -> torch.Tensor:
        m, n, k = x.shape[0], w["n"], w["k"]
        return self.gemm(x, out, w["q"], w["s"], None, w["z"], self.empty, self.empty, self.workspace, self.uint4,
                         size_m=m, size_n=n, size_k=k, is_k_full=True, use_atomic_add=use_atomic_add(m, n, k),
                         use_fp32_reduce=True, is_zp_float=False)
