"""Kernel classes: what a GPU kernel (or, on CPU, an op) of a served engine's trace is, from its name.

A registry of (class, regular expressions), tried in order, first match wins; names are matched case-insensitively.
Patterns come from the names the engines' kernels carry (sources of vLLM 0.26, lmdeploy 0.18 and SGLang 0.5.15,
and cuBLAS / CUTLASS conventions):
  int4_gemm   TurboMind's `turbomind::gemm::...` / `gemm_kernel<...>` (with `uint4_t` operands, or no types in the
              name; with `half`/`bfloat16` operands only it is TurboMind's fp16 GEMM: `gemm`), vLLM's Machete (`machete...`), Marlin
              (`Marlin<...>`, `marlin...`; SGLang's JIT `device::marlin::Marlin<...>`), AWQ's `awq_gemm...`/
              `gemm_forward_4bit...`, and SGLang's `device::awq::dequantize_weights` (its --quantization awq path
              dequantizes each int4 weight before a cuBLAS matmul: part of that linear's int4 cost)
  gemm        every other matrix multiply: cuBLAS (`sm90_xmma_gemm...`, `nvjet...`, `cublasLt...`, `ampere_..gemm`),
              CUTLASS (`cutlass...gemm`, `Kernel2<...gemm`), lm_head and fp16 projections; on CPU `aten::mm`/`addmm`
              and vLLM CPU's `_C::onednn_mm`
  attention   flash/paged/decode attention: `flash`, `fmha`, `attention`, `paged`, `mha`, `xqa`, `decode_kernel`,
              FlashInfer's `BatchDecode`/`BatchPrefill`, and the KV-cache writes (`reshape_and_cache...`, TurboMind's
              `ProcessKV...`, `flattenKV...`, SGLang's `store_kvcache`)
  comm        NCCL and custom all-reduce: `nccl`, `allreduce`, `all_reduce`, `cross_device_reduce`
  sampling    sampling and logits processing: `sampl`, `topk`, `top_k`, `top_p`, `argmax`, `softmax`, `multinomial`,
              `gumbel`
  norm_act    norms, activations, rotary, element-wise and reductions: `rms`, `norm`, `silu`, `act_and_mul`,
              `rotary`, `rope`, `elementwise`, `vectorized`, `reduce`, `add_bias`, `fused_add`; FlashInfer's
              `flashinfer::norm::...` and `flashinfer::activation::...` (before attention's `flash`)
  copy        memory moves: `memcpy`, `memset`, `copy`, `cat`, `index`, `gather`, `scatter`, `fill`, `embedding`
Inductor's fused Triton kernels (`triton_poi_fused_...`, `triton_red_...`, `triton_per_...`) are named after every
op of the graph region they compute, custom ops whose outputs they read included (vLLM 0.26's
`triton_red_fused_fused_add_rms_norm_machete_mm_2` is a residual add + RMSNorm reading a Machete GEMM's output,
seen in the H200 traces of 2026-12-03): never a GEMM, they are classed by the other patterns without the GEMM ones.
Anything else is `other`. The lm_head is a `gemm` (fp16 in every engine): it is what ends each decode step.
"""

from __future__ import annotations

import re

CLASSES: dict[str, tuple[str, ...]] = {
    "int4_gemm": (r"turbomind::gemm", r"\bgemm_kernel", r"machete", r"marlin", r"awq_gemm", r"gemm_forward_4bit",
                  r"gptq_gemm", r"w4a16", r"awq::dequantize_weights"),
    "comm": (r"nccl", r"allreduce", r"all_reduce", r"cross_device_reduce", r"all_gather", r"reduce_scatter"),
    "attention": (r"flash", r"fmha", r"attention", r"attn", r"paged", r"\bmha", r"xqa", r"decode_kernel",
                  r"batchdecode", r"batchprefill", r"reshape_and_cache", r"processkv", r"flattenkv", r"store_kvcache"),
    "gemm": (r"gemm", r"nvjet", r"xmma", r"cublas", r"cutlass", r"aten::mm\b", r"aten::addmm", r"aten::bmm",
             r"aten::matmul", r"aten::linear", r"sgemm", r"hgemm", r"_mm_", r"onednn_mm"),
    "sampling": (r"sampl", r"topk", r"top_k", r"top_p", r"argmax", r"softmax", r"multinomial", r"gumbel",
                 r"exponential"),
    "norm_act": (r"rms", r"norm", r"silu", r"gelu", r"act_and_mul", r"rotary", r"rope", r"elementwise",
                 r"vectorized", r"reduce", r"add_bias", r"fused_add", r"aten::add", r"aten::mul"),
    "copy": (r"memcpy", r"memset", r"copy", r"\bcat\b", r"aten::cat", r"index", r"gather", r"scatter", r"fill",
             r"embedding"),
}


OTHER = "other"


ORDER = (*CLASSES, OTHER)  # how reports list the classes


# TurboMind runs its fp16 GEMMs (the lm_head) through the same turbomind::gemm kernels as its int4 ones: a name
# that carries its operand types and names no uint4 but half/bfloat16 is a `gemm`; without types, an int4 one
_TM_FP16 = re.compile(r"^(?!.*uint4)(?=.*(turbomind::gemm|gemm_kernel)).*(\bhalf\b|bfloat16|__half)", re.IGNORECASE)


# TurboMind 0.18's sm90 int4 GEMMs run a small `prepare_tma_descs_sm90_mixed<__half, ...>` kernel before each call
# (TMA descriptors for that call's operands; seen in the H200 traces of 2026-12-03): part of the int4 GEMM's cost,
# though its name carries only half
_TM_INT4_SETUP = re.compile(r"turbomind::gemm::prepare_tma_descs", re.IGNORECASE)


# FlashInfer's norm and activation kernels carry its name, which the attention patterns' `flash` would take
# (SGLang 0.5.15 on an H100, session 27: `flashinfer::norm::FusedAddRMSNormKernel<8u, __half>` and `RMSNormKernel`,
# 0.17 ms a decode step, were counted as attention until this rule)
_FLASHINFER_NORM_ACT = re.compile(r"flashinfer::(norm|activation)::", re.IGNORECASE)


_COMPILED = [("int4_gemm", _TM_INT4_SETUP), ("gemm", _TM_FP16), ("norm_act", _FLASHINFER_NORM_ACT)] + [(c, re.compile("|".join(p), re.IGNORECASE)) for c, p in CLASSES.items()]


_INDUCTOR_FUSED = re.compile(r"^triton_(poi|red|per)_", re.IGNORECASE)


_NOT_GEMM = [(c, rx) for c, rx in _COMPILED if c not in ("int4_gemm", "gemm")]


def classify(name: str) -> str:
    """The class of a kernel or op name (see the module's docstring), `other` when no pattern matches."""
    for cls, rx in (_NOT_GEMM if _INDUCTOR_FUSED.match(name) else _COMPILED):
        if rx.search(name):
            return cls
    return OTHER


def check_class(where: str, name: str) -> str:
    """A class name given by a user (e.g. a step anchor), or an error listing the valid ones."""
    if name not in ORDER:
        raise ValueError(f"{where}: unknown kernel class {name!r}; valid: {', '.join(ORDER)}")
    return name
