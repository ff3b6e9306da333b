import json

import pytest

from llmcompare.errors import ScenarioError
from llmcompare.schema.scenario import Workload
from llmcompare.workload.prompts import Prompts, load_tokenizer


@pytest.fixture(scope="module")
def tok(tiny_model):
    return load_tokenizer(tiny_model)


def test_random_prompts_have_exact_token_length_and_differ_by_stream(tok):
    p = Prompts(Workload(input_len=200, output_len=7), tok)
    a, b = p.sample(5, stream=0), p.sample(5, stream=1)
    for spec in a + b:
        assert len(tok(spec.prompt, add_special_tokens=False)["input_ids"]) == 200
        assert spec.prompt_len == 200 and spec.output_len == 7
    assert not {s.prompt for s in a} & {s.prompt for s in b}  # no prompt shared between load points
    assert [s.prompt for s in p.sample(5, stream=0)] == [s.prompt for s in a]  # seeded


def test_jsonl_prompts(tok, tmp_path):
    f = tmp_path / "p.jsonl"
    f.write_text(json.dumps({"prompt": "Hello world", "output_len": 3}) + "\n" + json.dumps({"prompt": "Hi"}) + "\n")
    specs = Prompts(Workload(dataset="jsonl", path=str(f), output_len=9), tok).sample(2, 0)
    assert sorted((s.prompt_len, s.output_len) for s in specs) == [(1, 9), (2, 3)]


def test_sharegpt_prompts_take_the_reply_length(tok, tmp_path):
    conv = {"conversations": [{"from": "human", "value": "Tell me about the sea and the sky please"},
                              {"from": "gpt", "value": "The sea is wide and the sky is high above it"}]}
    f = tmp_path / "sg.json"
    f.write_text(json.dumps([conv, {"conversations": [conv["conversations"][0]]}]))
    (spec,) = Prompts(Workload(dataset="sharegpt", path=str(f)), tok).sample(1, 0)
    assert spec.output_len == len(tok(conv["conversations"][1]["value"], add_special_tokens=False)["input_ids"])


def test_unreadable_dataset(tok, tmp_path):
    with pytest.raises(ScenarioError, match="workload.path: .* is not a readable file"):
        Prompts(Workload(dataset="jsonl", path=str(tmp_path / "none.jsonl")), tok).sample(1, 0)
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "x"}\n')
    with pytest.raises(ScenarioError, match=r"bad.jsonl:1: expected"):
        Prompts(Workload(dataset="jsonl", path=str(bad)), tok).sample(1, 0)
