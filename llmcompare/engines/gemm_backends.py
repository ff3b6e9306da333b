"""The int4 GEMM backends: a plain dict, name -> everything llmcompare knows about one backend.

Imports nothing heavy (no torch, no engine): the parent process, the scenario validator, the attribution and
the worker all read it. The implementation is named lazily ("module:Class"), and imported only by the worker
in the engine's own environment.

A backend may run from several environments at once: `turbomind@0.17.0` and `turbomind@0.18.0` are the same
backend (`turbomind`) from two engine environments, each with its own `kernel_bench.python` entry.
"""

from __future__ import annotations

from dataclasses import dataclass

from llmcompare.schema.kernel_run import LM_HEAD


def int4_awq_bytes(n: int, k: int, g: int) -> int:
    """AWQ int4 weight [K, N] with per-group fp16 scales and int4 zero points (group g along K)."""
    return n * k // 2 + 2 * n * (k // g) + n * (k // g) // 2


def fp16_bytes(n: int, k: int, g: int) -> int:
    return 2 * n * k


@dataclass(frozen=True)
class Backend:
    engine: str  # the engine kind whose environment carries it ("torch": any environment with torch)
    description: str
    impl: str  # "module:Class", imported by the worker only
    weight_format: str  # what the weight is in memory when the kernel reads it
    weight_bytes: object  # (n, k, group) -> bytes the kernel must read for the weight
    log_names: tuple[str, ...] = ()  # names an engine's log prints when it picks this backend
    quantized: bool = True
    dists: tuple[str, ...] = ()  # distributions whose versions the worker reports beside torch's


BACKENDS: dict[str, Backend] = {
    "cublas": Backend("torch", "cuBLAS fp16 torch.nn.functional.linear on the dequantized weight: the reference "
                      "and ceiling", "llmcompare.kernels.in_engine.impls:Cublas", "fp16 [N, K]", fp16_bytes, quantized=False),
    "marlin": Backend("vllm", "vLLM Marlin: marlin_gemm on awq_marlin_repack'ed weights",
                      "llmcompare.kernels.in_engine.impls:Marlin", "int4 Marlin tiles + fp16 group scales/zeros",
                      int4_awq_bytes, ("MarlinLinearKernel",), dists=("vllm",)),
    "machete": Backend("vllm", "vLLM Machete (Hopper): machete_prepack_B / machete_mm",
                       "llmcompare.kernels.in_engine.impls:Machete", "int4 Machete prepacked + fp16 group scales/zeros",
                       int4_awq_bytes, ("MacheteLinearKernel",), dists=("vllm",)),
    "turbomind": Backend("lmdeploy", "lmdeploy TurboMind: lmdeploy.turbomind linear",
                         "llmcompare.kernels.in_engine.impls:TurboMind", "int4 TurboMind packed + fp16 group scales/zeros",
                         int4_awq_bytes, dists=("lmdeploy",)),
    # SGLang 0.5.15's AWQ path on CUDA (engines/sglang.py): its own JIT Marlin, `awq_marlin` in its log
    "sglang-marlin": Backend("sglang", "SGLang Marlin (JIT, tvm-ffi): gptq_marlin_gemm on awq_marlin_repack'ed "
                             "weights", "llmcompare.kernels.in_engine.sglang_marlin:SglangMarlin",
                             "int4 Marlin tiles + fp16 group scales/zeros", int4_awq_bytes, ("awq_marlin",),
                             dists=("sglang", "sglang-kernel", "apache-tvm-ffi")),
}


class UnknownBackend(ValueError):
    pass


def base_name(name: str) -> str:
    """`turbomind@0.17.0` -> `turbomind`."""
    return name.split("@", 1)[0]


def backend(name: str) -> Backend:
    """The registry entry of a backend name, versioned (`name@label`) or not; unknown names list the valid ones."""
    try:
        return BACKENDS[base_name(name)]
    except KeyError:
        raise UnknownBackend(f"unknown backend {name!r}; valid: {', '.join(BACKENDS)} "
                             "(optionally with @LABEL, e.g. turbomind@0.17.0, to run it from another environment)") from None


def from_log_name(kernel: str) -> str | None:
    """The backend an engine's log line names (e.g. vLLM's `Using MacheteLinearKernel for ...`)."""
    return next((b for b, info in BACKENDS.items() if kernel in info.log_names), None)



def dists() -> list[str]:
    """Every distribution a backend reports the version of (the worker's env record), once each, in order."""
    return list(dict.fromkeys(d for b in BACKENDS.values() for d in b.dists))


def runs_on(name: str, shape: str) -> bool:
    """Whether backend `name` times a shape: lm_head is fp16 in every engine, so the int4 backends skip it."""
    return shape != LM_HEAD or not backend(name).quantized


def weight_bytes(name: str, n: int, k: int, g: int) -> int:
    return backend(name).weight_bytes(n, k, g)


def point_bytes(name: str, n: int, k: int, m: int, g: int) -> int:
    """Fewest bytes one call moves: the weight in the backend's format, x [M, K] and y [M, N] in fp16, once."""
    return weight_bytes(name, n, k, g) + 2 * m * k + 2 * m * n
