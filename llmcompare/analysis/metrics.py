"""Serving metrics, defined as vLLM's `bench serve` defines them (vllm/benchmarks/serve.py, calculate_metrics),
plus what a fair comparison of engines that stream differently needs. Each definition is stated once, here;
docs/metrics.md repeats them for readers.

Per request (successful requests only; times from the moment the request is sent):
  TTFT  time to first token: arrival of the first streamed chunk that carries a choice.
  E2EL  end-to-end latency: arrival of the last chunk that carries a choice.
  TPOT  time per output token after the first: (E2EL - TTFT) / (output_tokens - 1), for output_tokens > 1.
  ITL   inter-token latency: the gaps between consecutive chunks that carry tokens. A chunk may carry several
        tokens (lmdeploy under load), so ITL is read beside tokens per chunk; an end chunk without a token
        (lmdeploy's) is not a gap. `itl_all_chunks` is vLLM bench serve's ITL: every chunk with a choice.
Per load point (duration = from the first request sent to the last one finished):
  request_throughput      completed requests / duration                         [req/s]
  output_throughput       output tokens of completed requests / duration        [tok/s]
  total_token_throughput  (input + output tokens of completed requests) / duration  [tok/s]
  request_goodput         completed requests meeting every SLO set / duration   [req/s]
  mean_tokens_per_chunk   output tokens / chunks carrying tokens, over completed requests
Token counts are the server's `usage`; where it is missing the output is re-tokenized with the scenario's
tokenizer (and the prompt length taken from the client's count), and the result says so.
Statistics: mean, median, std (population) and the configured percentiles (numpy's linear interpolation).
The steady-state window of a closed-loop point (analysis/steady.py) has its own figures beside these.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from llmcompare.schema.request import RequestRecord
from llmcompare.schema.run import Metrics
from llmcompare.schema.scenario import Slo

LATENCIES = ("ttft", "tpot", "itl", "itl_all_chunks", "e2el")


def tpot_ms(r: RequestRecord) -> float | None:
    if not r.success or r.output_tokens is None or r.output_tokens <= 1:
        return None
    return (r.e2el_ms - r.ttft_ms) / (r.output_tokens - 1)


def stats(name: str, values: Sequence[float], percentiles: Sequence[float]) -> dict[str, float]:
    a = np.asarray(values, dtype=np.float64) if len(values) else np.zeros(1)  # vLLM reports 0 for none
    out = {f"mean_{name}_ms": float(a.mean()), f"median_{name}_ms": float(np.median(a)),
           f"std_{name}_ms": float(a.std())}
    for p in percentiles:
        out[f"p{p:g}_{name}_ms"] = float(np.percentile(a, p))
    return out


def latency_stats(ok: Sequence[RequestRecord], percentiles: Sequence[float]) -> dict[str, float]:
    out: dict[str, float] = {}
    out |= stats("ttft", [r.ttft_ms for r in ok], percentiles)
    out |= stats("tpot", [t for r in ok if (t := tpot_ms(r)) is not None], percentiles)
    out |= stats("itl", [g for r in ok for g in r.itl_ms()], percentiles)
    out |= stats("itl_all_chunks", [g for r in ok for g in r.itl_all_chunks_ms()], percentiles)
    out |= stats("e2el", [r.e2el_ms for r in ok], percentiles)
    return out


def fill_token_counts(records: Sequence[RequestRecord], count_tokens: Callable[[str], int] | None) -> dict:
    """Where usage lacks completion tokens, re-tokenize the text. Returns where the counts came from."""
    sources = {"usage": 0, "retokenized": 0}
    for r in records:
        if not r.success:
            continue
        if r.output_tokens is None and count_tokens is not None:
            r.output_tokens = count_tokens(r.text)
            r.output_tokens_source = "retokenized"
        if r.output_tokens_source in sources:
            sources[r.output_tokens_source] += 1
    return sources


def compute(records: Sequence[RequestRecord], duration_s: float, percentiles: Sequence[float],
            slo: Slo | None = None) -> Metrics:
    """The point's figures over its requests; cut-off requests (the engine died under them) are left out."""
    records = [r for r in records if not r.cut_off]
    ok = [r for r in records if r.success]
    out_tokens = [r.output_tokens or 0 for r in ok]
    in_tokens = [r.prompt_tokens if r.prompt_tokens is not None else r.prompt_len for r in ok]
    chunks = sum(len(r.token_chunk_ms) for r in ok)
    dur = max(duration_s, 1e-9)
    m = Metrics(
        completed=len(ok), failed=len(records) - len(ok), duration_s=duration_s,
        total_input_tokens=int(sum(in_tokens)), total_output_tokens=int(sum(out_tokens)),
        request_throughput=len(ok) / dur, output_throughput=sum(out_tokens) / dur,
        total_token_throughput=(sum(in_tokens) + sum(out_tokens)) / dur,
        input_tokens_from_usage=sum(r.prompt_tokens is not None for r in ok),
        output_tokens_from_usage=sum(r.output_tokens_source == "usage" for r in ok),
        output_tokens_retokenized=sum(r.output_tokens_source == "retokenized" for r in ok),
        mean_tokens_per_chunk=sum(out_tokens) / chunks if chunks else None,
    )
    m.stats = latency_stats(ok, percentiles) | stats("queue", [r.queue_ms for r in records], percentiles)
    if slo is not None and any(v is not None for v in (slo.ttft_ms, slo.tpot_ms, slo.e2el_ms)):
        def good(r: RequestRecord) -> bool:
            t = tpot_ms(r) or 0.0  # vLLM counts TPOT 0 for single-token outputs
            return ((slo.ttft_ms is None or r.ttft_ms <= slo.ttft_ms)
                    and (slo.tpot_ms is None or t <= slo.tpot_ms)
                    and (slo.e2el_ms is None or r.e2el_ms <= slo.e2el_ms))
        m.good_requests = sum(good(r) for r in ok)
        m.request_goodput = m.good_requests / dur
    for r in records:
        if not r.success:
            key = (r.error or "unknown")[:120]
            m.errors[key] = m.errors.get(key, 0) + 1
    return m
