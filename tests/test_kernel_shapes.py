import pytest

from llmcompare import scenario
from llmcompare.kernels.shapes import from_config, unique_shapes
from llmcompare.scenario import ScenarioError

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
    from llmcompare.backends import runs_on

    s = scenario.load("qwen-awq", {"kernel_bench": {"lm_head": True}})
    head = unique_shapes(s)[-1]
    assert (head.name, head.n, head.k, head.per_layer) == ("lm_head", 152064, 3584, 0)  # Qwen2.5-7B: vocab x hidden
    assert "lm_head" not in [g.name for g in unique_shapes(scenario.load("qwen-awq"))]
    assert runs_on("cublas", "lm_head") and not runs_on("marlin", "lm_head") and not runs_on("turbomind@0.17.0", "lm_head")
    assert runs_on("marlin", "qkv")
