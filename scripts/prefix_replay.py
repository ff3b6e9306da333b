#!/usr/bin/env python3
"""Why did vLLM log 22-43% prefix-cache hits in profiled passes whose prompts were random (issue 26)? A replay: the
prompts a saved serve-bench run sent to one vLLM server are rebuilt from the run's seed and stream ids by the
package's own prompt generator, put through a model of vLLM's prefix cache, and the hit rate the model predicts is
printed beside every rate the server logged. A cause that reproduces the logged rates, and an alternative that does
not, are told apart by running it with each stream rule.

The model of vLLM's v1 prefix cache and its logger (read in vLLM 0.32's source, the CPU build here:
v1/core/kv_cache_manager.py, v1/metrics/stats.py CachingMetrics; 0.26's not read):
- a prompt's full blocks of `block_size` tokens are hashed as a chain; a request hits the longest run of leading
  blocks already cached, at most (prompt tokens - 1) // block_size blocks (the last prompt token is always
  computed); hits and queries count tokens;
- every full block a request fills (prompt, and output tokens here unique) stays cached after it finishes until it
  is evicted, least recently used first, once `kv_tokens` are held (the log's "GPU KV cache size: N tokens");
- the logged "Prefix cache hit rate" is hits / queries over the most recent 1000 requests;
- a server start (the log's "Starting vLLM server") empties the cache and the window.
Requests are replayed in the order of their first token (about when vLLM first scheduled them and looked their
prefix up; a point's warm-ups just before its start), and the window at each log line holds the requests
scheduled by then.

Stream rules for profiled passes: `old`, the rule before commit 819ce1c (2026-12-03 18:54 UTC): the pass for point p
took serve/measure.stream_id(p, repeat=load.repeats, attempt=1), which is point p+1's first repeat when the plan
has one; `new`, the pass's own negative stream (serve/measure.profile_stream). `auto` picks by the run's created_at.

  python scripts/prefix_replay.py RUN_DIR ENGINE [--pass-stream auto|old|new] [--tokenizer qwen|llama3-like|DIR]
                                  [--block-size 16] [--kv-tokens N]
"""

from __future__ import annotations

import argparse
import collections
import datetime as dt
import lzma
import re
import tempfile
import types
from pathlib import Path

from llmcompare.schema import request_lines
from llmcompare.schema.codec import record
from llmcompare.schema.files import load_run
from llmcompare.schema.run import ServeRun
from llmcompare.schema.scenario import Workload
from llmcompare.serve.measure import profile_stream, stream_id
from llmcompare.workload.prompts import Prompts, load_tokenizer

FIX_COMMIT_UTC = dt.datetime(2026, 12, 3, 18, 54, 40, tzinfo=dt.timezone.utc)  # 819ce1c: passes got own streams
WINDOW_REQUESTS = 1000  # vLLM's CachingMetrics(max_recent_requests=1000)
_LOG_TIME = re.compile(r" (\d\d)-(\d\d) (\d\d):(\d\d):(\d\d) ")
_HIT = re.compile(r"Prefix cache hit rate: ([0-9.]+)%")


def _utc(iso: str) -> dt.datetime:
    return dt.datetime.fromisoformat(iso).astimezone(dt.timezone.utc)


def _text(path: Path) -> str:
    for p in (path, path.with_name(path.name + ".xz")):
        if p.is_file():
            return lzma.open(p, "rt").read() if p.suffix == ".xz" else p.read_text()
    raise SystemExit(f"{path}: not on file (nor .xz)")


def server_log(run_dir: Path, engine: str, year: int) -> tuple[list, list, int | None]:
    """(log lines with a hit rate: (time, %), server start times, KV cache tokens) from <engine>.server.log."""
    hits, starts, kv = [], [], None
    for line in _text(run_dir / f"{engine}.server.log").splitlines():
        m = _LOG_TIME.search(line)
        when = dt.datetime(year, *map(int, m.groups()), tzinfo=dt.timezone.utc) if m else None
        if (h := _HIT.search(line)) and when:
            hits.append((when, float(h[1])))
        elif "Starting vLLM server" in line and when:
            starts.append(when)
        elif kv is None and (k := re.search(r"GPU KV cache size: ([0-9,]+) tokens", line)):
            kv = int(k[1].replace(",", ""))
    return hits, starts, kv


def _scheduled_s(dispatch_s: float, ttft_ms: float | None) -> float:
    """When vLLM counted the request's prefix lookup: at its first scheduling, which its first token follows by
    about one step (a 1024-token prompt fits one 8192-token step); a wave of 256 such prompts is scheduled over
    ~10 s, so the dispatch time alone would put the lookups too early. The dispatch time where no token came."""
    return dispatch_s + (ttft_ms / 1000.0 if ttft_ms is not None else 0.0)


def sent_requests(run: ServeRun, engine: str, rule: str) -> list[tuple[dt.datetime, int, int, int, int, str]]:
    """Every request the run sent to the engine, by time: (time, stream, index in stream, prompt tokens, output
    tokens asked for, phase)."""
    s = types.SimpleNamespace(load=types.SimpleNamespace(**{k: run.scenario["load"][k]
                                                           for k in ("repeats", "max_attempts")}))
    warm_n = run.scenario["load"].get("warmup_requests", 0)
    e, lines = run.engines[engine], request_lines.records(run.dir, engine)
    out = []
    for p in e.points:
        pt, t0 = types.SimpleNamespace(index=p.index), _utc(p.started_at)
        sid = stream_id(pt, p.repeat, p.attempt, True, s)
        out += [(t0 - dt.timedelta(seconds=0.5), sid, i, p.input_len, p.output_len, f"warm-up {p.label}")
                for i in range(warm_n)]
        sid = stream_id(pt, p.repeat, p.attempt, False, s)
        out += [(t0 + dt.timedelta(seconds=_scheduled_s(r.dispatch_s, r.ttft_ms)), sid, r.index, r.prompt_len,
                 r.output_len, f"point {p.label} r{p.repeat}") for r in lines.get((p.index, p.repeat, p.attempt), [])]
    passes = request_lines.pass_records(run.dir, engine)
    for prof in e.profiles:
        pt, t0 = types.SimpleNamespace(index=prof.index), _utc(prof.started_at)
        sid = stream_id(pt, s.load.repeats, 1, False, s) if rule == "old" else profile_stream(pt)
        out += [(t0 + dt.timedelta(seconds=_scheduled_s(r.dispatch_s, r.ttft_ms)), sid, r.index, r.prompt_len,
                 r.output_len, f"pass {prof.label}") for r in passes.get(prof.index, [])]
    return sorted(out, key=lambda x: x[0])


class PrefixCache:
    """vLLM's block cache as the module docstring models it: chained block hashes, LRU eviction by blocks."""

    def __init__(self, kv_tokens: int, block_size: int):
        self.blocks: collections.OrderedDict = collections.OrderedDict()
        self.capacity, self.bs, self._unique = kv_tokens // block_size, block_size, 0

    def request(self, tokens: list[int], output_len: int) -> int:
        """Serves one request; returns its hit tokens."""
        bs, keys, h = self.bs, [], None
        for j in range(len(tokens) // bs):
            h = hash((h, tuple(tokens[j * bs:(j + 1) * bs])))
            keys.append(h)
        hit = 0
        for k in keys[:(len(tokens) - 1) // bs]:
            if k not in self.blocks:
                break
            hit += 1
        for k in keys:
            self.blocks[k] = None
            self.blocks.move_to_end(k)
        for _ in range((len(tokens) + output_len) // bs - len(keys)):  # blocks holding output tokens
            self._unique += 1
            self.blocks[("out", self._unique)] = None
        while len(self.blocks) > self.capacity:
            self.blocks.popitem(last=False)
        return hit * bs


def replay(run_dir: Path, engine: str, rule: str, tokenizer_dir: str, block_size: int, kv_tokens: int | None = None):
    run = load_run(run_dir)
    if engine not in run.engines:
        raise SystemExit(f"{run_dir}: no engine {engine!r}; valid: {', '.join(run.engines)}")
    if (dataset := run.scenario["workload"].get("dataset")) != "random":
        raise SystemExit(f"{run_dir}: workload.dataset is {dataset!r}; the replay rebuilds prompts of 'random' only")
    logged, starts, kv = server_log(run_dir, engine, _utc(run.created_at).year)
    kv = kv_tokens or kv
    if kv is None:
        raise SystemExit(f"{run_dir}/{engine}.server.log: no 'GPU KV cache size' line (is {engine} a vLLM server?)")
    prompts = Prompts(record(Workload, run.scenario["workload"]), load_tokenizer(tokenizer_dir))
    sent = sent_requests(run, engine, rule)
    need: dict[tuple[int, int], int] = {}
    for _, sid, i, L, _, _ in sent:
        need[sid, L] = max(need.get((sid, L), 0), i + 1)
    # each stream's prompts once, as the server tokenizes them (Qwen adds no special tokens)
    made = {(sid, L): [prompts.tok(x.prompt, add_special_tokens=False)["input_ids"]
                       for x in prompts.random(n, sid, L, 1)] for (sid, L), n in need.items()}
    cache, served, later_starts = PrefixCache(kv, block_size), [], list(starts[1:])
    for when, sid, i, L, out_len, phase in sent:
        while later_starts and when >= later_starts[0]:  # a new server process: empty cache and window
            later_starts.pop(0)
            cache, served = PrefixCache(kv, block_size), served + [None]
        served.append((when, L, cache.request(made[sid, L][i], out_len), phase))
    return logged, served, kv


def window_rate(served: list, until: dt.datetime) -> tuple[float, int]:
    """Hits / queries (%) over the last WINDOW_REQUESTS requests dispatched by `until` since the last start."""
    upto = [x for x in served if x is None or x[0] <= until]
    last_start = max((k for k, x in enumerate(upto) if x is None), default=-1)
    win = upto[last_start + 1:][-WINDOW_REQUESTS:]
    q = sum(x[1] for x in win)
    return (100.0 * sum(x[2] for x in win) / q if q else 0.0), len(win)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run_dir", type=Path)
    ap.add_argument("engine")
    ap.add_argument("--pass-stream", choices=("auto", "old", "new"), default="auto")
    ap.add_argument("--tokenizer", default="qwen", help="the run's tokenizer: 'qwen' (the Qwen2.5 tokenizer, built "
                    "offline as make-model does), 'llama3-like' (make-model's for --preset llama3-8b), or a directory")
    ap.add_argument("--block-size", type=int, default=16, help="vLLM's KV block size (16 on CUDA by default)")
    ap.add_argument("--kv-tokens", type=int, help="the cache's size in tokens instead of the log's (e.g. 10**9: "
                    "what the hits would have been with no eviction)")
    a = ap.parse_args(argv)
    rule = a.pass_stream
    if rule == "auto":
        rule = "old" if _utc(load_run(a.run_dir).created_at) < FIX_COMMIT_UTC else "new"
    with tempfile.TemporaryDirectory() as tmp:
        tok = a.tokenizer
        if tok in ("qwen", "llama3-like"):
            from llmcompare.models import tokenizer

            (tokenizer.write_qwen_tokenizer if tok == "qwen" else tokenizer.write_llama3_like_tokenizer)(tmp)
            tok = tmp
        logged, served, kv = replay(a.run_dir, a.engine, rule, tok, a.block_size, a.kv_tokens)
    reqs = [x for x in served if x is not None]
    print(f"{a.run_dir} {a.engine}: {len(reqs)} requests replayed, pass stream rule '{rule}', KV cache {kv:,} "
          f"tokens, blocks of {a.block_size}")
    print("| log time (UTC) | logged hit rate | predicted | requests in the window |\n| --- | ---: | ---: | ---: |")
    for when, pct in logged:
        pred, n = window_rate(served, when)
        print(f"| {when:%H:%M:%S} | {pct:.1f}% | {pred:.1f}% | {n} |")
    phases: dict[str, list[int]] = {}
    for _, L, hit, phase in reqs:
        ph = phases.setdefault(phase, [0, 0, 0])
        ph[0], ph[1], ph[2] = ph[0] + 1, ph[1] + L, ph[2] + hit
    print("\n| phase | requests | prompt tokens | predicted hit tokens |\n| --- | ---: | ---: | ---: |")
    for phase, (n, q, h) in phases.items():
        if h or phase.startswith("pass"):
            print(f"| {phase} | {n} | {q:,} | {h:,} ({100.0 * h / q:.1f}%) |")


if __name__ == "__main__":
    main()
