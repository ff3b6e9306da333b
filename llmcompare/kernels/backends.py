"""The int4 GEMM backends kernel-bench knows: a plain dict, name -> what it is and which engine carries it.
This module imports no engine and no torch (the parent process reads it); worker.py does the work."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Backend:
    engine: str  # the environment that has it: torch alone, vllm or lmdeploy
    description: str
    quantized: bool = True


BACKENDS: dict[str, Backend] = {
    "cublas": Backend("torch", "cuBLAS fp16 torch.matmul on the dequantized weight: the reference and ceiling",
                      quantized=False),
    "marlin": Backend("vllm", "vLLM Marlin: marlin_gemm on awq_marlin_repack'ed weights"),
    "machete": Backend("vllm", "vLLM Machete (Hopper): machete_prepack_B / machete_mm"),
    "turbomind": Backend("lmdeploy", "lmdeploy TurboMind: lmdeploy.turbomind.linear"),
}
