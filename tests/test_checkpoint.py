import json

import numpy as np
import pytest

from llmcompare.models import awq, checkpoint


def test_awq_pack_unpack_round_trip_and_known_order():
    rng = np.random.default_rng(1)
    v = rng.integers(0, 16, size=(5, 24), dtype=np.uint8)
    assert (awq.unpack(awq.pack(v)) == v).all()
    # columns 0..7 = 0,1,...,7: nibble i holds column ORDER[i] = 0,2,4,6,1,3,5,7
    word = awq.pack(np.arange(8, dtype=np.uint8)[None, :]).view(np.uint32)[0, 0]
    assert word == 0x75316420


def test_dequantize_matches_the_formula():
    rng = np.random.default_rng(2)
    k, n, g = 256, 16, 128
    qw, qz, sc = awq.random_awq(k, n, g, rng)
    w = awq.dequantize(qw, qz, sc, g)
    q, z = awq.unpack(qw).astype(np.float32), awq.unpack(qz).astype(np.float32)
    assert w[130, 5] == pytest.approx((q[130, 5] - z[1, 5]) * float(sc[1, 5]))
    assert 0.01 < w.std() < 0.04  # scaled like a real layer
    assert set(np.unique(z)) <= {7.0, 8.0}


def test_random_awq_rejects_bad_shapes():
    with pytest.raises(ValueError, match="multiple of group_size"):
        awq.random_awq(100, 16, 128, np.random.default_rng(0))


def test_bf16_rounding():
    x = np.array([1.0, 1.00390625, -2.5, 3.1415927], dtype=np.float32)
    bits = checkpoint.to_bf16_bits(x)
    back = (bits.astype(np.uint32) << 16).view(np.float32)
    assert back[0] == 1.0 and back[2] == -2.5 and abs(back[3] - 3.140625) < 1e-6


def test_make_awq_model_layout(tmp_path):
    shape = checkpoint.Shape(256, 512, 1, 4, 2, vocab_size=1024, tie_word_embeddings=False)
    out = checkpoint.make_model(tmp_path / "m", quant="awq", shape=shape)
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["quantization_config"] == {"quant_method": "awq", "bits": 4, "group_size": 128,
                                          "zero_point": True, "version": "gemm"}
    h = checkpoint.read_safetensors_header(out / "model.safetensors")
    assert h["model.layers.0.mlp.down_proj.qweight"] == {**h["model.layers.0.mlp.down_proj.qweight"],
                                                         "dtype": "I32", "shape": [512, 32]}
    assert h["model.layers.0.mlp.down_proj.scales"]["shape"] == [4, 256]
    assert h["model.layers.0.mlp.down_proj.scales"]["dtype"] == "F16"
    assert h["model.layers.0.self_attn.k_proj.qzeros"]["shape"] == [2, 16]
    assert "lm_head.weight" in h and "model.layers.0.self_attn.q_proj.bias" in h
    assert not (out / "model.safetensors.partial").exists()


def test_real_qwen_tokenizer(tmp_path):
    from transformers import AutoTokenizer

    checkpoint.make_model(tmp_path / "m", shape=checkpoint.Shape(64, 128, 1, 1, 1, vocab_size=151936))
    tok = AutoTokenizer.from_pretrained(str(tmp_path / "m"))
    assert len(tok) == 151665  # 151,643 BPE ranks + 22 Qwen2.5 special tokens
    assert tok.encode("Hello world", add_special_tokens=False) == [9707, 1879]  # Qwen2.5's ids
    assert tok.convert_tokens_to_ids("<|im_end|>") == 151645


def test_unknown_preset_lists_valid(tmp_path):
    with pytest.raises(ValueError, match="unknown model preset 'huge'; valid: tiny, qwen2.5-0.5b, qwen2.5-7b, qwen2.5-32b, llama3-8b"):
        checkpoint.make_model(tmp_path / "x", preset="huge")


def test_qwen25_32b_preset_config_and_shapes():
    # config only: the checkpoint itself is ~19 GB
    from llmcompare.models.shapes import from_config

    cfg = checkpoint.config_json(checkpoint.PRESETS["qwen2.5-32b"], "awq", "float16", 128)
    assert {k: cfg[k] for k in ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                                "num_key_value_heads", "vocab_size", "tie_word_embeddings")} == {
        "hidden_size": 5120, "intermediate_size": 27648, "num_hidden_layers": 64, "num_attention_heads": 40,
        "num_key_value_heads": 8, "vocab_size": 152064, "tie_word_embeddings": False}
    assert [(g.name, g.n, g.k) for g in from_config(cfg)] == [
        ("qkv", 7168, 5120), ("o", 5120, 5120), ("gate_up", 55296, 5120), ("down", 5120, 27648)]
    lin = checkpoint.linear_shapes(checkpoint.PRESETS["qwen2.5-32b"])
    assert lin["self_attn.k_proj"] == (1024, 5120) and lin["mlp.down_proj"] == (5120, 27648)


# ---- where make-model writes (issue 27 item 8) ----------------------------------------------------------------
def _make_model(cli, out, *args):
    import subprocess

    return subprocess.run([*cli, "make-model", str(out), *args], capture_output=True, text=True, timeout=300)


def test_make_model_refuses_a_directory_that_is_not_its_own_checkpoint_of_the_preset(tmp_path, cli):
    other = tmp_path / "other"
    other.mkdir()
    (other / "config.json").write_text('{"theirs": true}')
    (other / "model-00001-of-00002.safetensors").write_bytes(b"x")
    p = _make_model(cli, other)
    assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr
    assert f"error: make-model: {other} is not empty and is not a complete make-model checkpoint" in p.stderr
    assert (other / "config.json").read_text() == '{"theirs": true}' and not (other / "model.safetensors").exists()
    assert sorted(x.name for x in other.iterdir()) == ["config.json", "model-00001-of-00002.safetensors"]

    mine = tmp_path / "mine"
    assert _make_model(cli, mine).returncode == 0
    weights = mine / "model.safetensors"
    stamp = weights.stat().st_mtime_ns
    assert _make_model(cli, mine).returncode == 0 and weights.stat().st_mtime_ns == stamp  # the same: kept
    assert _make_model(cli, mine, "--seed", "1").returncode == 0  # its own checkpoint, same preset: made again
    assert weights.stat().st_mtime_ns != stamp
    p = _make_model(cli, mine, "--preset", "qwen2.5-0.5b")
    assert p.returncode == 2 and f"{mine} holds a make-model checkpoint of preset 'tiny', not 'qwen2.5-0.5b'" in p.stderr
    (mine / "model.safetensors").unlink()  # half made: not complete
    assert _make_model(cli, mine).returncode == 2


def test_make_model_under_a_file_or_on_a_read_only_path_is_a_clear_error(tmp_path, cli):
    f = tmp_path / "f"
    f.write_text("")
    p = _make_model(cli, f / "m")
    assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr
    assert f"error: make-model: {f / 'm'}: {f} is not a directory" in p.stderr
    p = _make_model(cli, f)
    assert p.returncode == 2 and f"error: make-model: {f} is a file" in p.stderr
    p = _make_model(cli, "/sys/llmcompare-test/m")  # sysfs: not writable, root or not
    assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr
    assert "error: make-model: cannot write the checkpoint to /sys/llmcompare-test/m" in p.stderr
