"""Prompts: what each request asks for. The same list goes to every engine.

`random` prompts have an exact token length: they are built from vocabulary entries of the form " word"
(a space and lowercase letters) that the tokenizer encodes back to that one token, so a prompt of n such
entries is n tokens (checked after building). Each load point and its warm-up get their own prompts, so
that an engine's prefix cache never sees a prompt twice.
"""

from __future__ import annotations

import functools
import json
import os
import random
import re
import weakref
from functools import cached_property
from pathlib import Path

from llmcompare.errors import ScenarioError
from llmcompare.schema.request import RequestSpec
from llmcompare.schema.scenario import GENERATED, Cell, Workload
from llmcompare.workload import hf, synthetic


def load_tokenizer(path: str):
    """The tokenizer at `path` (a directory or a hub id in the local cache); loaded once per process and path
    (preflight loads it, the run reuses it)."""
    p = path
    f = Path(p) / "tokenizer.json"
    return _load_tokenizer(p, f.stat().st_mtime_ns if f.is_file() else None)


@functools.lru_cache(maxsize=4)
def _load_tokenizer(path: str, _mtime_ns: int | None):
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")  # no "PyTorch was not found" advisory
    from transformers import AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    try:
        return AutoTokenizer.from_pretrained(path)
    except (OSError, ValueError) as e:
        raise ScenarioError(f"model.tokenizer: cannot load a tokenizer from {path!r}: {e}") from None


# work that depends on the tokenizer alone (its plain-word tokens, a dataset's token counts), done once per
# tokenizer however many Prompts use it (preflight's and the run's)
_PER_TOKENIZER: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _memo(tok, key, make):
    done = _PER_TOKENIZER.setdefault(tok, {})
    if key not in done:
        done[key] = make()
    return done[key]


_RECORDS: dict[tuple, list] = {}


def read_records(cfg: Workload) -> tuple[list[tuple[str, str | None, int | None]], tuple]:
    """Every record of a sharegpt or jsonl dataset, checked without a tokenizer: (prompt, reply, None) for
    sharegpt, (prompt, None, output_len or None) for jsonl. An error names the file and the line (jsonl) or
    the entry (sharegpt); (prompt, reply or None, None) for hf (hf.py). Also returns the cache key
    (dataset, path, mtime, size)."""
    if cfg.dataset == "hf":

        return hf.read(cfg)
    path = Path(cfg.path or "")  # resolved (expand.py)
    try:
        if not path.is_file():
            raise OSError("no such file" if not path.exists() else "not a file")
        st = path.stat()
        key = (cfg.dataset, str(path.resolve()), st.st_mtime_ns, st.st_size)
        if key in _RECORDS:
            return _RECORDS[key], key
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise ScenarioError(f"workload.path: {cfg.path!r} is not a readable file ({e})") from None
    records = _sharegpt(text, path) if cfg.dataset == "sharegpt" else _jsonl(text, path)
    _RECORDS.clear()  # one dataset at a time
    _RECORDS[key] = records
    return records, key


def _jsonl(text: str, path: Path) -> list[tuple[str, None, int | None]]:
    out = []
    want = 'expected {"prompt": a non-empty string, "output_len"?: an integer > 0}'
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except ValueError as e:
            raise ScenarioError(f"workload.path: {path}:{lineno}: not valid JSON ({getattr(e, 'msg', e)}, column "
                                f"{getattr(e, 'colno', '?')}): {line[:80]!r}; {want}") from None
        o = rec.get("output_len") if isinstance(rec, dict) else None
        if (not isinstance(rec, dict) or not isinstance(rec.get("prompt"), str) or not rec["prompt"]
                or not (o is None or (isinstance(o, int) and not isinstance(o, bool) and o > 0))):
            raise ScenarioError(f"workload.path: {path}:{lineno}: {want}, got {line[:80]!r}")
        out.append((rec["prompt"], None, o))
    if not out:
        raise ScenarioError(f"workload.path: {path} holds no jsonl prompts (no non-blank line)")
    return out


def _sharegpt(text: str, path: Path) -> list[tuple[str, str, None]]:
    try:
        data = json.loads(text)
    except ValueError as e:
        raise ScenarioError(f"workload.path: {path}: not valid JSON: {e}") from None
    if not isinstance(data, list):
        raise ScenarioError(f"workload.path: {path}: expected a ShareGPT list of conversations, got "
                            f"{type(data).__name__}")
    out = []
    for i, conv in enumerate(data):
        turns = (conv.get("conversations") or conv.get("conversation") or []) if isinstance(conv, dict) else None
        if not isinstance(turns, list):
            raise ScenarioError(f"workload.path: {path}: entry {i}: expected {{\"conversations\": [{{\"value\": "
                                f"str}}, ...]}}, got {str(conv)[:80]!r}")
        if len(turns) < 2:
            continue
        if not all(isinstance(t, dict) and isinstance(t.get("value"), str) for t in turns[:2]):
            raise ScenarioError(f"workload.path: {path}: entry {i}: its first two turns need a string "
                                f"\"value\", got {str(turns[:2])[:80]!r}")
        out.append((turns[0]["value"], turns[1]["value"], None))
    return out


class Prompts:
    def __init__(self, cfg: Workload, tokenizer):
        self.cfg, self.tok = cfg, tokenizer

    @cached_property
    def _words(self) -> list[int]:
        return _memo(self.tok, "words", self._find_words)

    def _find_words(self) -> list[int]:
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

    def exact(self, rng: random.Random, n_tokens: int, head: list[int] = ()) -> str:
        """A prompt of exactly len(head) + n_tokens tokens: `head` (word ids) then n_tokens words drawn from rng;
        drawn again (up to 10 times) where the decoded text does not re-encode to that many tokens."""
        want = len(head) + n_tokens
        for _attempt in range(10):
            prompt = self.tok.decode(list(head) + [rng.choice(self._words) for _ in range(n_tokens)])
            if self.count_tokens(prompt) == want:
                return prompt
        raise RuntimeError(f"could not build a prompt of exactly {want} tokens")

    def random(self, n: int, stream: int, input_len: int | None = None,
               output_len: int | None = None) -> list[RequestSpec]:
        """Prompt i of a stream depends on (seed, stream, i, length) alone, so every engine gets the same first n
        prompts of a stream, however many more it needs. Lengths: a grid cell's, default the axes' first."""
        L, out_len = input_len or self.cfg.input_lens[0], output_len or self.cfg.output_lens[0]
        return [RequestSpec(self.exact(random.Random(f"{self.cfg.seed}/{stream}/{i}"), L), L, out_len)
                for i in range(n)]

    def prefixes(self, prefix_len: int | None = None, num_prefixes: int | None = None) -> list[list[int]]:
        """shared-prefix: num_prefixes word sequences of prefix_len tokens (a grid cell's, default the axes'
        first), the same in every stream (as a system prompt is the same in every request), seeded by (seed, k,
        prefix_len): prefix k of a length is the same in every cell that has it, whatever its num_prefixes."""
        c = self.cfg
        plen, count = prefix_len or c.prefix_lens[0], num_prefixes or c.prefix_counts[0]
        return [[random.Random(f"{c.seed}/prefix/{k}/{plen}").choice(self._words) for _ in range(plen)]
                for k in range(count)]

    def shared_prefix(self, n: int, stream: int, cell: Cell = Cell(None, None)) -> list[RequestSpec]:
        """Request i: prefix i % num_prefixes, then input_len tokens of its own (as `random` draws them): exactly
        prefix_len + input_len tokens, of the grid cell (default the axes' first). Only the prefixes repeat;
        every suffix is new."""
        L, out_len = cell.input_len or self.cfg.input_lens[0], cell.output_len or self.cfg.output_lens[0]
        heads = self.prefixes(cell.prefix_len, cell.num_prefixes)
        return [RequestSpec(self.exact(random.Random(f"{self.cfg.seed}/{stream}/{i}"), L, heads[i % len(heads)]),
                            len(heads[0]) + L, out_len) for i in range(n)]

    def synthetic_sharegpt(self, n: int, stream: int) -> list[RequestSpec]:
        """Lengths drawn as workload/synthetic.py describes (ShareGPT's published means), prompts of exactly that many
        words; request i of a stream depends on (seed, stream, i) alone."""
        c, out = self.cfg, []
        for i in range(n):
            rng = random.Random(f"{c.seed}/{stream}/{i}")
            pair = synthetic.sharegpt_lengths(rng, c.sigma_input, c.sigma_output, c.max_total_len)
            out.append(RequestSpec(self.exact(rng, pair.input_len), pair.input_len, pair.output_len))
        return out

    def longest(self) -> int:
        """The most tokens (prompt + output) one request of this workload may need."""
        c = self.cfg
        if c.dataset == "random":
            return max(c.input_lens) + max(c.output_lens)
        if c.dataset == "shared-prefix":
            return max(c.prefix_lens) + max(c.input_lens) + max(c.output_lens)
        if c.dataset == "synthetic-sharegpt":
            return min(synthetic.MAX_TOTAL, c.max_total_len)
        return max(p.prompt_len + p.output_len for p in self._file_items)

    @cached_property
    def _file_items(self) -> list[RequestSpec]:
        records, key = read_records(self.cfg)
        return _memo(self.tok, ("items", key, self.cfg.output_lens[0]), lambda: self._tokenized(records, key[1]))

    def _tokenized(self, records: list[tuple[str, str | None, int | None]], path: str) -> list[RequestSpec]:
        items: list[RequestSpec] = []
        for prompt, reply, output_len in records:
            p = self.count_tokens(prompt)
            if reply is None:  # jsonl
                items.append(RequestSpec(prompt, p, output_len or self.cfg.output_lens[0]))
                continue
            # vLLM's sharegpt sampling: first human turn is the prompt, the reply's length is the output
            # length; pairs with either side under 4 tokens, a prompt over 1024 or a total over 2048 are skipped
            o = self.count_tokens(reply)
            if not (p < 4 or o < 4 or p > 1024 or p + o > 2048):
                items.append(RequestSpec(prompt, p, o))
        if not items:
            raise ScenarioError(f"workload.path: {path} holds no usable {self.cfg.dataset} prompts")
        return items

    def sample(self, n: int, stream: int, block: tuple[int, int] | None = None,
               lengths: tuple[int | None, ...] = (None, None)) -> list[RequestSpec]:
        """n prompts for one stream (a load point's repeat, attempt or warm-up); random and shared-prefix ones of
        `lengths` (the point's grid cell: input, output[, prefix_len, num_prefixes], a scenario.Cell). File
        datasets take them from `block` = (start, size) of the shuffled file, so that no prompt is sent twice in
        a run (an engine's prefix cache would see it again); see file_blocks."""
        cell = Cell(*lengths)
        if self.cfg.dataset == "random":
            return self.random(n, stream, cell.input_len, cell.output_len)
        if self.cfg.dataset == "shared-prefix":
            return self.shared_prefix(n, stream, cell)
        if self.cfg.dataset == "synthetic-sharegpt":
            return self.synthetic_sharegpt(n, stream)
        items = list(self._file_items)
        random.Random(self.cfg.seed).shuffle(items)
        start, size = block if block else (0, len(items))
        if n > size:
            raise ScenarioError(f"workload.path: {self.cfg.path} has too few prompts: a load point needs {n} and "
                                f"its share of the file is {size}; use a larger file or fewer requests")
        return [items[(start + i) % len(items)] for i in range(n)]  # wraps only when reuse is allowed

    @property
    def from_file(self) -> bool:
        return self.cfg.dataset not in GENERATED

    def file_size(self) -> int:
        return len(self._file_items)
