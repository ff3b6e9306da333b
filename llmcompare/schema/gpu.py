"""One GPU as nvidia-smi describes it (setup/gpus.py reads it; engines/vllm.py predicts its kernel from it)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Gpu:
    index: int
    name: str
    driver: str
    capability: float  # e.g. 9.0
    memory_total_mib: float
    memory_used_mib: float
    cuda: str | None = None  # the newest CUDA the driver supports (nvidia-smi's header)

    @property
    def sm(self) -> int:
        return round(self.capability * 10)
