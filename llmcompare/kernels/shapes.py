"""The quantized linear shapes of a model, from its config.json: what each decode step and prefill multiplies.

Engines fuse q/k/v into one GEMM and gate/up into another (vLLM's QKVParallelLinear and MergedColumnParallelLinear,
TurboMind's fused qkv and w1w3), so a Qwen2/Llama-style layer runs four int4 GEMMs, y[M, N] = x[M, K] @ W[K, N]:
  qkv      N = (heads + 2 * kv_heads) * head_dim   K = hidden
  o        N = hidden                              K = heads * head_dim
  gate_up  N = 2 * intermediate                    K = hidden
  down     N = hidden                              K = intermediate
and, outside the layers, lm_head (N = vocab, K = hidden): fp16 in every engine (AWQ leaves it unquantized), run
once per forward pass on the rows that are sampled (decode: M = batch); kernel_bench.lm_head times it, on the
unquantized backends only (cuBLAS).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from ..backends import LM_HEAD
from ..checkpoint import PRESETS
from ..scenario import Scenario, ScenarioError, expand


@dataclass(frozen=True)
class GemmShape:
    name: str  # qkv, o, gate_up, down, or "NxK" for an extra shape
    n: int  # output features
    k: int  # input features
    per_layer: int = 1  # how many times a decoder layer runs it (0 for extra shapes)


def from_config(cfg: dict) -> list[GemmShape]:
    try:
        h, inter = cfg["hidden_size"], cfg["intermediate_size"]
        heads = cfg["num_attention_heads"]
        kv = cfg.get("num_key_value_heads", heads)
    except KeyError as e:
        raise ScenarioError(f"model config.json lacks {e.args[0]!r}; kernel-bench needs a Llama/Qwen2-style config") from None
    hd = cfg.get("head_dim") or h // heads
    return [
        GemmShape("qkv", (heads + 2 * kv) * hd, h),
        GemmShape("o", h, heads * hd),
        GemmShape("gate_up", 2 * inter, h),
        GemmShape("down", h, inter),
    ]


def lm_head(cfg: dict) -> GemmShape:
    """vocab x hidden, per forward pass, not per layer (per_layer 0)."""
    return GemmShape(LM_HEAD, cfg["vocab_size"], cfg["hidden_size"], per_layer=0)


def model_config(s: Scenario) -> dict:
    """config.json of the scenario's model; for a model not made yet, the config its make preset would write."""
    path = Path(expand(s.model.path))
    if (path / "config.json").exists():
        return json.loads((path / "config.json").read_text())
    if s.model.make is not None:
        from dataclasses import asdict

        return asdict(PRESETS[s.model.make.preset])
    raise ScenarioError(f"model.path: {path} has no config.json (and model.make is not set)")


def unique_shapes(s: Scenario) -> list[GemmShape]:
    cfg = model_config(s)
    out: list[GemmShape] = []
    seen: set[tuple[int, int]] = set()
    for g in from_config(cfg):
        if (g.n, g.k) not in seen:
            seen.add((g.n, g.k))
            out.append(g)
    for n, k in s.kernel_bench.extra_shapes:
        if (n, k) not in seen:
            seen.add((n, k))
            out.append(GemmShape(f"{n}x{k}", n, k, per_layer=0))
    if s.kernel_bench.lm_head:
        out.append(lm_head(cfg))
    g = s.kernel_bench.group_size
    for sh in out:
        if sh.k % g or sh.n % 64:
            raise ScenarioError(f"shape {sh.name} (N={sh.n}, K={sh.k}): int4 kernels need K % {g} == 0 and N % 64 == 0")
    return out


def layers(s: Scenario) -> int:
    return int(model_config(s).get("num_hidden_layers", 0))
