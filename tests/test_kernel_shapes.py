import pytest

from llmcompare import scenario
from llmcompare.errors import ScenarioError
from llmcompare.models.shapes import from_config, unique_shapes

QWEN25_7B = {"hidden_size": 3584, "intermediate_size": 18944, "num_attention_heads": 28, "num_key_value_heads": 4,
             "num_hidden_layers": 28}


def test_qwen25_7b_shapes():
    got = {(g.name, g.n, g.k) for g in from_config(QWEN25_7B)}
    # head_dim 128: qkv = (28 + 2 * 4) * 128 = 4608
    assert got == {("qkv", 4608, 3584), ("o", 3584, 3584), ("gate_up", 37888, 3584), ("down", 3584, 18944)}


def test_headline_scenario_shapes_include_the_blog_gemm():
    s = scenario.load("qwen-awq")  # the model need not exist: its make preset gives the config
    assert [(g.n, g.k) for g in unique_shapes(s)] == [(4608, 3584), (3584, 3584), (37888, 3584), (3584, 18944),
                                                      (16384, 16384)]


def test_config_missing_fields():
    with pytest.raises(ScenarioError, match="lacks 'intermediate_size'"):
        from_config({"hidden_size": 8, "num_attention_heads": 1})


def test_lm_head_is_timed_when_asked_and_by_unquantized_backends_only():
    from llmcompare.engines.gemm_backends import runs_on

    s = scenario.load("qwen-awq", {"kernel_bench": {"lm_head": True}})
    head = unique_shapes(s)[-1]
    assert (head.name, head.n, head.k, head.per_layer) == ("lm_head", 152064, 3584, 0)  # Qwen2.5-7B: vocab x hidden
    assert "lm_head" not in [g.name for g in unique_shapes(scenario.load("qwen-awq"))]
    assert runs_on("cublas", "lm_head") and not runs_on("marlin", "lm_head") and not runs_on("turbomind@0.17.0", "lm_head")
    assert runs_on("marlin", "qkv")


QWEN25_32B = {"hidden_size": 5120, "intermediate_size": 27648, "num_attention_heads": 40, "num_key_value_heads": 8,
              "num_hidden_layers": 64}


def test_per_gpu_shapes_split_n_of_column_and_k_of_row_parallel_layers():
    from llmcompare.models.shapes import SPLIT

    full = {g.name: g for g in from_config(QWEN25_32B)}
    for tp in (2, 4, 8):
        for g in from_config(QWEN25_32B, tp, group_size=128):
            f = full[g.name]
            assert (g.n, g.k) == ((f.n // tp, f.k) if SPLIT[g.name] == "n" else (f.n, f.k // tp)), (tp, g)
    # by hand at 2: 20 heads + 2 * 4 KV heads of 128 per GPU; o and down keep N = hidden and halve K
    assert [(g.name, g.n, g.k) for g in from_config(QWEN25_32B, 2, 128)] == [
        ("qkv", 3584, 5120), ("o", 5120, 2560), ("gate_up", 27648, 5120), ("down", 5120, 13824)]


def test_fewer_kv_heads_than_gpus_are_replicated():
    # Qwen2.5-7B at 8 GPUs cannot split 28 heads; a 32-head, 4-KV-head model at 8 keeps one KV head per GPU
    cfg = {**QWEN25_32B, "hidden_size": 4096, "num_attention_heads": 32, "num_key_value_heads": 4}
    qkv = from_config(cfg, 8, 128)[0]
    assert (qkv.n, qkv.k) == ((4 + 2 * 1) * 128, 4096)
    with pytest.raises(ScenarioError, match="num_attention_heads 28 is not divisible by 8; degrees this model "
                                            "allows: 1, 2, 4"):
        from_config(QWEN25_7B, 8, 128)


def test_k_per_gpu_must_hold_whole_awq_groups():
    cfg = {**QWEN25_32B, "intermediate_size": 128 * 3 * 2}  # 768: /2 = 384 = 3 groups, /4 = 192 is not whole groups
    assert from_config(cfg, 2, 128)[3].k == 384
    with pytest.raises(ScenarioError) as e:
        from_config(cfg, 4, 128)
    assert str(e.value) == ("tensor-parallel degree 4: down's K per GPU, 768 / 4 = 192, is not a multiple of the AWQ "
                            "group size 128 (each GPU must hold whole quantization groups); degrees this model "
                            "allows: 1, 2")
    assert from_config(cfg, 4)[3].k == 192  # no group size: only divisibility


def test_kernel_bench_takes_the_scenarios_degree():
    s = scenario.load("qwen-awq", {"tensor_parallel": 2})
    assert [(g.name, g.n, g.k) for g in unique_shapes(s)][:4] == [
        ("qkv", 2304, 3584), ("o", 3584, 1792), ("gate_up", 18944, 3584), ("down", 3584, 9472)]
    s = scenario.load("qwen-awq", {"tensor_parallel": 2, "kernel_bench": {"tensor_parallel": 1}})
    assert unique_shapes(s)[0].n == 4608
