"""The llama3-8b preset: Llama-3-8B's config and layer shapes, and a small Llama-architecture AWQ checkpoint
with the Llama-3-sized tokenizer (not Llama-3's own) that transformers loads."""

import json

from llmcompare.models import checkpoint
from llmcompare.models.shapes import from_config, lm_head


def test_llama3_8b_preset_config_and_layer_shapes():
    cfg = checkpoint.config_json(checkpoint.PRESETS["llama3-8b"], "awq", "float16", 128)
    assert cfg["architectures"] == ["LlamaForCausalLM"] and cfg["model_type"] == "llama"
    assert {k: cfg[k] for k in ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                                "num_key_value_heads", "vocab_size", "rope_theta", "tie_word_embeddings",
                                "max_position_embeddings", "head_dim", "attention_bias")} == {
        "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32,
        "num_key_value_heads": 8, "vocab_size": 128256, "rope_theta": 500000.0, "tie_word_embeddings": False,
        "max_position_embeddings": 8192, "head_dim": 128, "attention_bias": False}
    assert "arch" not in cfg and "sliding_window" not in cfg
    assert cfg["quantization_config"]["quant_method"] == "awq"
    # per layer N x K: qkv (32 + 2 * 8) heads of 128, o, gate_up 2 * 14336, down
    assert [(g.name, g.n, g.k) for g in from_config(cfg)] == [
        ("qkv", 6144, 4096), ("o", 4096, 4096), ("gate_up", 28672, 4096), ("down", 4096, 14336)]
    assert [(g.n, g.k) for g in from_config(cfg, tp=2, group_size=128)] == [(3072, 4096), (4096, 2048),
                                                                             (14336, 4096), (4096, 7168)]
    assert (lm_head(cfg).n, lm_head(cfg).k) == (128256, 4096)


def test_small_llama_awq_checkpoint_loads_with_transformers(tmp_path):
    from transformers import AutoConfig, AutoTokenizer

    shape = checkpoint.Shape(256, 512, 1, 4, 2, vocab_size=128256, max_position_embeddings=8192, arch="llama",
                             rope_theta=500000.0)
    out = checkpoint.make_model(tmp_path / "m", preset="llama-small", quant="awq", shape=shape)
    cfg = AutoConfig.from_pretrained(str(out))
    assert cfg.model_type == "llama" and cfg.num_key_value_heads == 2 and cfg.vocab_size == 128256
    rope = getattr(cfg, "rope_parameters", None) or {"rope_theta": getattr(cfg, "rope_theta", None)}
    assert rope["rope_theta"] == 500000.0  # transformers 5 keeps it in rope_parameters
    h = checkpoint.read_safetensors_header(out / "model.safetensors")
    assert h["model.embed_tokens.weight"]["shape"] == [128256, 256] and h["lm_head.weight"]["shape"] == [128256, 256]
    assert h["model.layers.0.mlp.down_proj.qweight"]["shape"] == [512, 32]
    assert not any(k.endswith(".bias") for k in h)  # Llama has no q/k/v biases
    tok = AutoTokenizer.from_pretrained(str(out))
    assert len(tok) == 128256  # every id fits the embedding
    assert max(tok.encode("Hello world, the sea is wide and ünïcödé 你好", add_special_tokens=False)) < 128000
    assert tok.convert_tokens_to_ids("<|begin_of_text|>") == 128000 and tok.convert_tokens_to_ids("<|eot_id|>") == 128009
    gen = json.loads((out / "generation_config.json").read_text())
    assert gen["bos_token_id"] == 128000 and gen["eos_token_id"] == [128001, 128009]
