"""Prompts: what each request asks for. The same list goes to every engine.

`random` prompts have an exact token length: they are built from vocabulary entries of the form " word"
(a space and lowercase letters) that the tokenizer encodes back to that one token, so a prompt of n such
entries is n tokens (checked after building). Each load point and its warm-up get their own prompts, so
that an engine's prefix cache never sees a prompt twice.
"""

from __future__ import annotations

import json
import os
import random
import re
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from .scenario import ScenarioError, Workload, expand


@dataclass
class RequestSpec:
    prompt: str
    prompt_len: int  # tokens, by the scenario's tokenizer
    output_len: int  # tokens asked for (max_tokens); with ignore_eos the engine produces exactly this many


def load_tokenizer(path: str):
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")  # no "PyTorch was not found" advisory
    from transformers import AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    try:
        return AutoTokenizer.from_pretrained(expand(path))
    except (OSError, ValueError) as e:
        raise ScenarioError(f"model.tokenizer: cannot load a tokenizer from {path!r}: {e}") from None


class Prompts:
    def __init__(self, cfg: Workload, tokenizer):
        self.cfg, self.tok = cfg, tokenizer

    @cached_property
    def _words(self) -> list[int]:
        """Token ids of single-token " word" entries that re-encode to themselves."""
        pat = re.compile(r"^ [a-z]{3,10}$")
        vocab = self.tok.get_vocab()
        ids = sorted(vocab.values())
        texts = self.tok.batch_decode([[i] for i in ids])
        cand = [(i, t) for i, t in zip(ids, texts, strict=True) if pat.match(t)]
        enc = self.tok([t for _, t in cand], add_special_tokens=False)["input_ids"]
        words = [i for (i, _), e in zip(cand, enc, strict=True) if e == [i]]
        if len(words) < 100:
            raise ScenarioError(f"tokenizer has too few plain-word tokens ({len(words)}) for random prompts")
        return words

    def count_tokens(self, text: str) -> int:
        return len(self.tok(text, add_special_tokens=False)["input_ids"])

    def random(self, n: int, seed: int) -> list[RequestSpec]:
        rng = random.Random(seed)
        words, L = self._words, self.cfg.input_len
        out = []
        for _ in range(n):
            for _attempt in range(10):
                prompt = self.tok.decode([rng.choice(words) for _ in range(L)])
                if self.count_tokens(prompt) == L:
                    break
            else:
                raise RuntimeError(f"could not build a prompt of exactly {L} tokens")
            out.append(RequestSpec(prompt, L, self.cfg.output_len))
        return out

    @cached_property
    def _file_items(self) -> list[RequestSpec]:
        path = Path(expand(self.cfg.path or ""))
        if not path.is_file():
            raise ScenarioError(f"workload.path: {self.cfg.path!r} is not a readable file")
        items: list[RequestSpec] = []
        try:
            if self.cfg.dataset == "sharegpt":
                # vLLM's sharegpt sampling: first human turn is the prompt, the reply's length is the output
                # length; pairs with either side under 4 tokens, a prompt over 1024 or a total over 2048 are skipped
                for conv in json.loads(path.read_text()):
                    turns = conv.get("conversations") or conv.get("conversation") or []
                    if len(turns) < 2:
                        continue
                    prompt, reply = turns[0]["value"], turns[1]["value"]
                    p, o = self.count_tokens(prompt), self.count_tokens(reply)
                    if p < 4 or o < 4 or p > 1024 or p + o > 2048:
                        continue
                    items.append(RequestSpec(prompt, p, o))
            else:
                for lineno, line in enumerate(path.read_text().splitlines(), 1):
                    if not line.strip():
                        continue
                    rec = json.loads(line)
                    if not isinstance(rec, dict) or not isinstance(rec.get("prompt"), str):
                        raise ScenarioError(f"workload.path: {path}:{lineno}: expected {{\"prompt\": str, "
                                            f"\"output_len\"?: int}}, got {line[:80]!r}")
                    o = rec.get("output_len", self.cfg.output_len)
                    items.append(RequestSpec(rec["prompt"], self.count_tokens(rec["prompt"]), int(o)))
        except (ValueError, KeyError, TypeError) as e:
            raise ScenarioError(f"workload.path: cannot read {self.cfg.dataset} data from {path}: {e}") from None
        if not items:
            raise ScenarioError(f"workload.path: {path} holds no usable {self.cfg.dataset} prompts")
        return items

    def sample(self, n: int, stream: int) -> list[RequestSpec]:
        """n prompts for one load point; `stream` (0, 1, ...) keeps points' prompts apart."""
        seed = self.cfg.seed * 1_000_003 + stream
        if self.cfg.dataset == "random":
            return self.random(n, seed)
        items = list(self._file_items)
        random.Random(self.cfg.seed).shuffle(items)
        start = (stream * n) % len(items)
        return [items[(start + i) % len(items)] for i in range(n)]
