"""Same work, same answer: the comparison's arithmetic (analysis/same_answer.py) on crafted answers, the record in
run.json (old files without it still load), and the scenario's checks.same_answer validation."""

import json
import math
from pathlib import Path

import pytest
import yaml

from llmcompare import scenario
from llmcompare.analysis import same_answer as sa
from llmcompare.errors import ScenarioError
from llmcompare.scenario.rules import check_same_answer
from llmcompare.schema.answer import AnswerProbe
from llmcompare.schema.run import EngineRecord, ServeRun
from llmcompare.schema.scenario import SameAnswerCheck

ROOT = Path(__file__).resolve().parents[1]
TOPS = [{" Paris": -0.10, " paris": -2.6, " The": -3.5, " Lyon": -4.0, " France": -4.4},
        {".": -0.3, ",": -1.5, "\n": -2.0, " and": -3.0, " is": -3.9},
        {" It": -0.5, " The": -1.2, "\n": -1.9, " Paris": -3.1, " I": -3.3}]


def probe(tops=TOPS, tokens=None, **kw) -> AnswerProbe:
    tops = [dict(d) for d in tops]
    toks = [max(d, key=d.get) for d in tops] if tokens is None else tokens
    return AnswerProbe(**{"prompt": "Q", "max_tokens": len(tops), "top_k": 5, "max_kl": 0.05, "tie_margin": 0.1,
                          "prompt_tokens": 9, "text": "".join(toks), "logprobs_returned": True, "tokens": toks,
                          "token_logprobs": [d[t] for d, t in zip(tops, toks, strict=True)], "top_logprobs": tops, **kw})


def shifted(d: dict, by: dict) -> dict:
    return {t: v + by.get(t, 0.0) for t, v in d.items()}


def test_the_same_answer_agrees_with_kl_zero():
    c = sa.compare("b", probe(), probe())
    assert c.verdict == sa.AGREES and c.basis == "logprobs"
    assert (c.compared, c.agreeing, c.first_difference, c.common) == (3, 3, None, 5)
    assert c.kl == pytest.approx(0.0, abs=1e-12) and not c.reasons


def test_a_uniform_shift_of_every_logprob_is_the_same_distribution():
    """Renormalised over the common tokens: a constant added to every logprob (another normaliser) changes nothing."""
    c = sa.compare("b", probe(), probe([shifted(TOPS[0], dict.fromkeys(TOPS[0], -0.7)), *TOPS[1:]]))
    assert c.verdict == sa.AGREES and c.kl == pytest.approx(0.0, abs=1e-12)


def test_kl_is_over_the_intersection_renormalised():
    p = {"a": math.log(0.5), "b": math.log(0.3), "c": math.log(0.1)}
    q = {"a": math.log(0.3), "b": math.log(0.3), "d": math.log(0.2)}
    kl, common = sa.kl_common(p, q)
    # over {a, b}: p = (5/8, 3/8), q = (1/2, 1/2)
    want = 5 / 8 * math.log((5 / 8) / 0.5) + 3 / 8 * math.log((3 / 8) / 0.5)
    assert common == 2 and kl == pytest.approx(want, rel=1e-12)
    assert sa.kl_common(p, {"x": -1.0}) == (None, 0)
    assert sa.kl_common({"a": -1.0, "b": -2.0}, {"a": -1.0, "b": -math.inf}) == (math.inf, 2)
    assert sa.kl_common({"a": -1.0, "b": float("nan")}, {"a": -3.0, "b": -1.0}) == (0.0, 1)  # NaN left out


def test_kl_above_the_tolerance_disagrees_though_the_tokens_agree():
    eng = probe([shifted(TOPS[0], {" paris": +1.8, " The": +1.5}), *TOPS[1:]])  # same top-1, other distribution
    c = sa.compare("b", probe(), eng)
    assert c.first_difference is None and c.agreeing == 3
    assert c.kl > 0.05 and c.verdict == sa.DISAGREES
    assert any("KL" in r and "above 0.05" in r for r in c.reasons)
    small = probe([shifted(TOPS[0], {" paris": +0.05}), *TOPS[1:]])  # a kernel's rounding: far below the tolerance
    c = sa.compare("b", probe(), small)
    assert c.verdict == sa.AGREES and 0 < c.kl < 1e-3


def test_a_different_top1_token_disagrees():
    tops = [TOPS[0], {",": -0.2, ".": -2.4, "\n": -2.5, " and": -3.0, " is": -3.9}, TOPS[2]]
    c = sa.compare("b", probe(), probe(tops))
    assert c.verdict == sa.DISAGREES and c.basis == "logprobs"
    assert (c.first_difference, c.agreeing, c.near_tie) == (1, 1, False)
    assert c.kl == pytest.approx(0.0, abs=1e-12)  # the first token's distribution is the same: the flip decides
    assert "output token 2 differs: ',' where the reference has '.'" in c.reasons[0]


def test_a_flip_between_two_nearly_tied_tokens_is_a_near_tie_not_a_disagreement():
    ref = probe([TOPS[0], {".": -0.70, ",": -0.75, "\n": -2.5, " and": -3.0, " is": -3.9}, TOPS[2]])
    eng = probe([TOPS[0], {",": -0.70, ".": -0.74, "\n": -2.5, " and": -3.0, " is": -3.9}, TOPS[2]])
    c = sa.compare("b", ref, eng)
    assert c.verdict == sa.AGREES and c.near_tie and (c.first_difference, c.agreeing) == (1, 1)
    assert "a near tie" in c.reasons[0]
    far = probe([TOPS[0], {",": -0.20, ".": -2.0, "\n": -2.5, " and": -3.0, " is": -3.9}, TOPS[2]])
    assert sa.compare("b", ref, far).verdict == sa.DISAGREES  # the engine does not see a tie: 1.8 nats apart


def test_no_common_token_disagrees():
    other = [{f"<fake-{i}>": -0.1 - i for i in range(5)}] * 3
    c = sa.compare("b", probe(), probe(other))
    assert c.verdict == sa.DISAGREES and c.kl is None and c.common == 0 and c.first_difference == 0
    assert any("no token in common" in r for r in c.reasons)


def test_missing_logprobs_compare_the_texts_and_a_failed_probe_is_not_checked():
    bare = AnswerProbe(prompt="Q", max_tokens=3, top_k=5, prompt_tokens=9, text=" Paris. It")
    c = sa.compare("b", probe(), bare)
    assert c.verdict == sa.AGREES and c.basis == "text" and "this engine returned no logprobs" in c.reasons[0]
    bare.text = " Lyon"
    c = sa.compare("b", probe(), bare)
    assert c.verdict == sa.DISAGREES and c.basis == "text" and "different" in c.reasons[0]
    failed = AnswerProbe(prompt="Q", error="timed out after 120 s")
    assert sa.compare("b", probe(), failed).verdict == sa.NOT_CHECKED
    assert sa.compare("b", probe(), None).verdict == sa.NOT_CHECKED
    assert sa.compare("b", failed, probe()).reasons == ["the reference engine has no answer to compare with"]
    assert sa.compare("b", probe(), probe(prompt="other")).verdict == sa.NOT_CHECKED


def test_one_engine_without_logprobs_a_tie_on_the_other_side_is_a_near_tie():
    """The H100 capacity run: TurboMind returns no logprobs; vLLM's first start picked 'valueOf' where TurboMind
    (and vLLM's second start) had '忍', the two at exactly the same logprob in vLLM's top-5."""
    tops = [{" military": -7.43, " playerName": -7.59}, {"valueOf": -7.693490, "忍": -7.693490, "eme": -7.95},
            {"X": -7.5, "神奇": -7.6}]
    vllm = probe(tops, tokens=[" military", "valueOf", "X"])
    bare = AnswerProbe(prompt="Q", max_tokens=3, top_k=5, prompt_tokens=9, text=" military忍神奇")
    for c in (sa.compare("vllm", bare, vllm), sa.compare("turbomind", vllm, bare)):  # either side the reference
        assert c.verdict == sa.AGREES and c.basis == "text" and c.near_tie
        assert "a near tie on one side: at output token 2" in c.reasons[0] and "0.0000 nats apart" in c.reasons[0]
    tops[1]["忍"] = -7.90  # 0.21 nats below the pick: not a tie, a different answer
    c = sa.compare("vllm", bare, probe(tops, tokens=[" military", "valueOf", "X"]))
    assert c.verdict == sa.DISAGREES and not c.near_tie
    tops[1].pop("忍")  # the other's token not in the top-k at all
    assert sa.compare("vllm", bare, probe(tops, tokens=[" military", "valueOf", "X"])).verdict == sa.DISAGREES


def test_another_prompt_token_count_is_not_the_same_input():
    c = sa.compare("b", probe(), probe(prompt_tokens=10))
    assert c.verdict == sa.DISAGREES and "not the same input" in c.reasons[0]


def test_check_all_names_the_reference_and_uses_its_tolerances():
    eng = probe([shifted(TOPS[0], {" paris": +0.6}), *TOPS[1:]])
    kl = sa.kl_common(TOPS[0], eng.top_logprobs[0])[0]
    assert 0.005 < kl < 0.05
    out = sa.check_all({"a": probe(), "b": eng, "c": None}, "a")
    assert [c.verdict for c in out.values()] == [sa.REFERENCE, sa.AGREES, sa.NOT_CHECKED]
    out = sa.check_all({"a": probe(max_kl=0.005), "b": eng}, "a")
    assert out["b"].verdict == sa.DISAGREES  # the reference's tolerance decides
    out = sa.check_all({"a": AnswerProbe(prompt="Q", error="HTTP 500"), "b": eng}, "a")
    assert out["a"].verdict == out["b"].verdict == sa.NOT_CHECKED and out["a"].reasons[0] == "the reference"


def test_the_record_round_trips_and_old_files_have_none():
    a = probe([{**TOPS[0], " x": -math.inf}, *TOPS[1:]])
    run = ServeRun(engines={"a": EngineRecord(name="a", answer=a), "b": EngineRecord(name="b")})
    back = ServeRun.from_json(json.loads(json.dumps(run.to_json())))
    assert back.engines["a"].answer == a and back.engines["a"].answer.top_logprobs[0][" x"] == -math.inf
    assert back.engines["b"].answer is None
    old = ROOT / "tests/data/h200-small/h200-grid/qwen-awq-h200-20261202-200831/run.json"
    for e in ServeRun.from_json(json.loads(old.read_text())).engines.values():
        assert e.answer is None


@pytest.mark.parametrize("field,value,says", [
    ("max_tokens", 0, "checks.same_answer.max_tokens: must be in 1..64 output tokens, got 0"),
    ("top_k", 21, "checks.same_answer.top_k: must be in 1..20"),
    ("max_kl", -0.1, "checks.same_answer.max_kl: must be in 0..10 nats"),
    ("max_kl", math.nan, "checks.same_answer.max_kl: must be in 0..10 nats"),
    ("tie_margin", math.inf, "checks.same_answer.tie_margin: must be in 0..10 nats"),
    ("timeout_s", 0.5, "checks.same_answer.timeout_s: must be in 1..3600 s"),
    ("prompt", " ", "checks.same_answer.prompt: must be a non-empty text"),
])
def test_bad_check_values_name_the_field_and_the_valid_range(field, value, says):
    check_same_answer(SameAnswerCheck())
    with pytest.raises(ScenarioError) as e:
        check_same_answer(SameAnswerCheck(**{field: value}))
    assert says in str(e.value)


def test_the_check_is_on_by_default_and_read_from_the_scenario_file(tmp_path):
    f = tmp_path / "s.yaml"
    base = {"model": {"path": "/m"}, "engines": [{"kind": "openai", "base_url": "http://127.0.0.1:1"}],
            "load": {"concurrency": [1]}}
    f.write_text(yaml.safe_dump(base))
    c = scenario.load(str(f)).checks.same_answer
    assert (c.enabled, c.max_tokens, c.top_k, c.max_kl, c.tie_margin) == (True, 8, 5, 0.05, 0.1)
    assert scenario.load(str(f), {"checks": {"same_answer": {"enabled": False}}}).checks.same_answer.enabled is False
    f.write_text(yaml.safe_dump({**base, "checks": {"same_answer": {"top_k": 50}}}))
    with pytest.raises(ScenarioError, match=r"s.yaml: checks.same_answer.top_k: must be in 1..20 .*got 50"):
        scenario.load(str(f))
    f.write_text(yaml.safe_dump({**base, "checks": {"same_answer": {"topk": 5}}}))
    with pytest.raises(ScenarioError, match="checks.same_answer: unknown key 'topk'; valid keys: enabled, prompt"):
        scenario.load(str(f))
