"""The backends' int4 GEMMs, as vLLM 0.26 and lmdeploy 0.17/0.18 call them. Runs inside an engine's environment
(imported by worker.py only; needs torch, and vLLM's or lmdeploy's native library).

Every backend is given the same AutoAWQ tensors for y[M, N] = x[M, K] @ W[K, N]:
  qweight int32 [K, N/8] (AWQ order), qzeros int32 [K/g, N/8], scales fp16 [K/g, N], and their unpacked
  q int32 [K, N], z int32 [K/g, N]; W = (q - z[k // g]) * s[k // g].
Engines are located with importlib.util.find_spec (which runs no package __init__) so that neither vLLM's nor
lmdeploy's serving stack is imported: only the native kernel library and the thin Python around it.
"""

from __future__ import annotations

import importlib.util
import os
import sys

import torch

from llmcompare.engines.gemm_backends import dists

# ---- lmdeploy: TurboMind -----------------------------------------------------------------------------------
# lmdeploy 0.18's torch-facing linear API or 0.17's _turbomind classes, whichever imports: see turbomind.py
from llmcompare.kernels.in_engine.turbomind import TurboMind  # noqa: E402, F401  (llmcompare/engines/gemm_backends.py names it impls:TurboMind)


def _package_dir(name: str) -> str:
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise ImportError(f"{name} is not installed in this environment ({sys.executable})")
    return list(spec.submodule_search_locations)[0]


# ---- vLLM: Marlin and Machete ------------------------------------------------------------------------------
_VLLM = None


def _vllm():
    """(scalar_types module, version); loads vLLM's kernel library into torch.ops._C."""
    global _VLLM
    if _VLLM is None:
        d = _package_dir("vllm")
        for lib in ("_C_stable_libtorch.abi3.so", "_C.abi3.so"):
            if os.path.exists(os.path.join(d, lib)):
                torch.ops.load_library(os.path.join(d, lib))
                break
        else:
            raise ImportError(f"no vLLM kernel library in {d}")
        spec = importlib.util.spec_from_file_location("_llmc_vllm_scalar_type", os.path.join(d, "scalar_type.py"))
        st = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(st)
        _VLLM = st
    return _VLLM


def _scale_perms():
    # vllm/model_executor/layers/quantization/utils/marlin_utils.py: get_scale_perms
    perm = [i + 8 * j for i in range(8) for j in range(8)]
    single = [2 * i + j for i in range(4) for j in (0, 1, 8, 9, 16, 17, 24, 25)]
    return perm, single


def _pack_cols(q: torch.Tensor) -> torch.Tensor:
    """[R, C] 4-bit values -> [R, C/8] int32, nibble i <- column 8c + i (vLLM pack_cols)."""
    r, c = q.shape
    q = q.to(torch.int32).view(r, c // 8, 8)
    out = torch.zeros((r, c // 8), dtype=torch.int32, device=q.device)
    for i in range(8):
        out |= q[:, :, i] << (4 * i)
    return out


class Marlin:
    """vLLM Marlin: awq_marlin_repack + marlin_permute_scales + awq_to_marlin_zero_points, then marlin_gemm
    (fp32 reduce, no atomic add: vLLM's defaults)."""

    name = "marlin"

    def __init__(self):
        st = _vllm()
        self.uint4_id = st.scalar_types.uint4.id
        dev = torch.device("cuda")
        sms = torch.cuda.get_device_properties(dev).multi_processor_count
        self.workspace = torch.zeros(sms, dtype=torch.int, device=dev)
        self.empty = torch.empty(0, dtype=torch.int, device=dev)

    def prepare(self, t: dict) -> dict:
        k, n = t["k"], t["n"]
        q = torch.ops._C.awq_marlin_repack(t["qweight"], k, n, 4, False)
        perm, _ = _scale_perms()
        s = t["scales"].reshape(-1, 64)[:, perm].reshape(-1, n).contiguous()
        z = t["z"].reshape(-1, 64)[:, perm]
        z = z.reshape(-1, 8)[:, [0, 2, 4, 6, 1, 3, 5, 7]].reshape(-1, n).contiguous()
        return {"q": q, "s": s, "z": _pack_cols(z), "k": k, "n": n}

    def setup(self, x: torch.Tensor, w: dict) -> None:
        pass

    def __call__(self, x: torch.Tensor, w: dict, out: torch.Tensor | None = None) -> torch.Tensor:
        return torch.ops._C.marlin_gemm(x, out, w["q"], None, w["s"], None, None, w["z"], self.empty, self.empty,
                                        self.workspace, self.uint4_id, x.shape[0], w["n"], w["k"],
                                        True, False, True, False)


class Machete:
    """vLLM Machete (sm90): weights in the standard layout (packed along K), machete_prepack_B; zero points
    pre-scaled to -s*z, as vLLM's MacheteLinearKernel does for AWQ."""

    name = "machete"

    def __init__(self):
        if torch.cuda.get_device_capability() != (9, 0):
            raise RuntimeError("Machete needs compute capability 9.0 (Hopper)")
        self.uint4_id = _vllm().scalar_types.uint4.id

    def prepare(self, t: dict) -> dict:
        k, n = t["k"], t["n"]
        q = t["q"].view(k // 8, 8, n)
        packed = torch.zeros((k // 8, n), dtype=torch.int32, device=q.device)
        for i in range(8):
            packed |= q[:, i, :] << (4 * i)
        b = torch.ops._C.machete_prepack_B(packed.t().contiguous().t(), torch.float16, self.uint4_id, torch.float16)
        s = t["scales"].contiguous()
        zs = (-1.0 * s * t["z"].to(s.dtype)).contiguous()
        return {"b": b, "s": s, "zs": zs, "g": t["g"]}

    def setup(self, x: torch.Tensor, w: dict) -> None:
        pass

    def __call__(self, x: torch.Tensor, w: dict, out: torch.Tensor | None = None) -> torch.Tensor:
        return torch.ops._C.machete_mm(x, w["b"], self.uint4_id, None, w["s"], w["zs"], w["g"], None, None, None)


# ---- cuBLAS fp16 reference ----------------------------------------------------------------------------------
class Cublas:
    """torch.nn.functional.linear on the dequantized fp16 weight stored [N, K], as an fp16 engine runs it."""

    name = "cublas"

    def prepare(self, t: dict) -> dict:
        return {"w": t["w16"].t().contiguous()}

    def setup(self, x: torch.Tensor, w: dict) -> None:
        pass

    def __call__(self, x: torch.Tensor, w: dict, out: torch.Tensor | None = None) -> torch.Tensor:
        if out is not None:
            return torch.matmul(x, w["w"].t(), out=out)
        return torch.nn.functional.linear(x, w["w"])


def versions() -> dict:
    import importlib.metadata as md

    out = {"torch": torch.__version__, "cuda": torch.version.cuda, "python": sys.version.split()[0]}
    for dist in dists():
        try:
            out[dist] = md.version(dist)
        except md.PackageNotFoundError:
            out[dist] = None
    return out
