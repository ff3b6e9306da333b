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

At tensor-parallel degree t each GPU runs its share (Megatron-style, as vLLM and TurboMind shard): the
column-parallel qkv and gate_up split N (heads, KV heads and intermediate features) over the GPUs, the
row-parallel o and down split K, and each of o and down ends in an all-reduce of hidden x M (collectives.py).
With fewer KV heads than GPUs each GPU keeps a copy of one (vLLM's replication).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from llmcompare.errors import ScenarioError
from llmcompare.models.checkpoint import PRESETS
from llmcompare.schema.kernel_run import LM_HEAD
from llmcompare.schema.scenario import Scenario


@dataclass(frozen=True)
class GemmShape:
    name: str  # qkv, o, gate_up, down, or "NxK" for an extra shape
    n: int  # output features
    k: int  # input features
    per_layer: int = 1  # how many times a decoder layer runs it (0 for extra shapes)


SPLIT = {"qkv": "n", "o": "k", "gate_up": "n", "down": "k"}  # the dimension tensor parallelism divides


TP_DEGREES = (1, 2, 4, 8)  # what an error lists as valid: the degrees a single host offers


def _dims(cfg: dict) -> tuple[int, int, int, int, int]:
    """(hidden, intermediate, heads, kv_heads, head_dim) of a Llama/Qwen2-style config."""
    try:
        h, inter = cfg["hidden_size"], cfg["intermediate_size"]
        heads = cfg["num_attention_heads"]
        kv = cfg.get("num_key_value_heads", heads)
    except KeyError as e:
        raise ScenarioError(f"model config.json lacks {e.args[0]!r}; kernel-bench needs a Llama/Qwen2-style config") from None
    return h, inter, heads, kv, cfg.get("head_dim") or h // heads


def tp_problem(cfg: dict, tp: int, group_size: int | None = None) -> str | None:
    """Why the model cannot be sharded over `tp` GPUs (with int4 groups of `group_size` along K), or None."""
    _, inter, heads, kv, hd = _dims(cfg)
    if heads % tp:
        return f"num_attention_heads {heads} is not divisible by {tp}"
    if (kv % tp) if kv >= tp else (tp % kv):
        return f"num_key_value_heads {kv} neither divides by {tp} nor replicates evenly over {tp} GPUs"
    if inter % tp:
        return f"intermediate_size {inter} is not divisible by {tp}"
    for name, k in (("o", heads * hd), ("down", inter)):
        if group_size and (k // tp) % group_size:
            return (f"{name}'s K per GPU, {k} / {tp} = {k // tp}, is not a multiple of the AWQ group size "
                    f"{group_size} (each GPU must hold whole quantization groups)")
    return None


def from_config(cfg: dict, tp: int = 1, group_size: int | None = None) -> list[GemmShape]:
    """The four GEMMs of a decoder layer on one GPU of `tp` (1: the whole layer); an error when the model
    cannot be sharded so, listing the degrees it can."""
    h, inter, heads, kv, hd = _dims(cfg)
    if tp > 1 and (why := tp_problem(cfg, tp, group_size)):
        valid = [t for t in TP_DEGREES if t == 1 or not tp_problem(cfg, t, group_size)]
        raise ScenarioError(f"tensor-parallel degree {tp}: {why}; degrees this model allows: "
                            f"{', '.join(map(str, valid))}")
    heads_gpu, kv_gpu = heads // tp, max(1, kv // tp)
    return [
        GemmShape("qkv", (heads_gpu + 2 * kv_gpu) * hd, h),
        GemmShape("o", h, heads_gpu * hd),
        GemmShape("gate_up", 2 * inter // tp, h),
        GemmShape("down", h, inter // tp),
    ]


def lm_head(cfg: dict) -> GemmShape:
    """vocab x hidden, per forward pass, not per layer (per_layer 0)."""
    return GemmShape(LM_HEAD, cfg["vocab_size"], cfg["hidden_size"], per_layer=0)


def model_config(s: Scenario) -> dict:
    """config.json of the scenario's model; for a model not made yet, the config its make preset would write."""
    path = Path(s.model.path)  # resolved (expand.py)
    if (path / "config.json").exists():
        return json.loads((path / "config.json").read_text())
    if s.model.make is not None:
        from dataclasses import asdict

        return asdict(PRESETS[s.model.make.preset])
    raise ScenarioError(f"model.path: {path} has no config.json (and model.make is not set)")


def unique_shapes(s: Scenario) -> list[GemmShape]:
    """The model's shapes on one GPU at kernel_bench.tensor_parallel, then the extra shapes (as given)."""
    cfg = model_config(s)
    out: list[GemmShape] = []
    seen: set[tuple[int, int]] = set()
    for g in from_config(cfg, s.kernel_bench.tensor_parallel or 1, s.kernel_bench.group_size):
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


def hidden_size(s: Scenario) -> int:
    """The width of what a tensor-parallel layer all-reduces (M x hidden)."""
    return int(model_config(s)["hidden_size"])
