"""Samples an engine's Prometheus /metrics during a load point: requests running and waiting, KV-cache use.
The attribution in the report reads the batch sizes the engine actually ran from these series."""

from __future__ import annotations

import asyncio
import re
import time

import aiohttp

# vLLM: vllm:num_requests_running, vllm:num_requests_waiting, vllm:kv_cache_usage_perc (older: gpu_cache_usage_perc)
# lmdeploy (--enable-metrics): lmdeploy:num_requests_running, lmdeploy:num_requests_waiting, ...
# and both engines' token counters, vllm:/lmdeploy: generation_tokens_total, prompt_tokens_total (analysis/agreement.py)
# SGLang 0.5.15 (--enable-metrics; srt/observability/metrics_collector.py): sglang:num_running_reqs,
# sglang:num_queue_reqs, sglang:token_usage (KV tokens in use / the pool, a fraction as vLLM's), and the same two
# token counters; its names are read as vLLM's (RENAME)
# and three of vLLM's per-request histograms, their _sum and _count only (analysis/agreement.py: the time to first
# token split into the engine's part and the rest): vllm:time_to_first_token_seconds, vllm:request_queue_time_seconds,
# vllm:request_prefill_time_seconds (vLLM 0.26-0.32, v1/metrics/loggers.py)
WANTED = re.compile(r"^[a-z_]+:(num_requests_running|num_requests_waiting|kv_cache_usage_perc|gpu_cache_usage_perc"
                    r"|generation_tokens_total|prompt_tokens_total|num_running_reqs|num_queue_reqs|token_usage"
                    r"|(time_to_first_token|request_queue_time|request_prefill_time)_seconds_(sum|count))$")
RENAME = {"gpu_cache_usage_perc": "kv_cache_usage_perc", "num_running_reqs": "num_requests_running",
          "num_queue_reqs": "num_requests_waiting", "token_usage": "kv_cache_usage_perc"}


_LINE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+([-+0-9.eEinfNa]+)")


def parse_prometheus(text: str) -> dict[str, float]:
    """Wanted gauges, summed over label sets, keyed by the name without its engine prefix. A line with bytes
    that were not UTF-8 (decoded as U+FFFD: see decode_page) is skipped."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        # cheap substring tests first: a /metrics page holds thousands of histogram lines we do not want
        if line.startswith("#") or not ("num_requests_" in line or "cache_usage_perc" in line or "_reqs" in line
                                        or "tokens_total" in line or "token_usage" in line or "seconds_sum" in line
                                        or "seconds_count" in line) or "\ufffd" in line:
            continue
        m = _LINE.match(line)
        if not m or not WANTED.match(m.group(1)):
            continue
        key = m.group(1).split(":", 1)[1]
        key = RENAME.get(key, key)
        try:
            out[key] = out.get(key, 0.0) + float(m.group(3))
        except ValueError:
            continue
    return out


def decode_page(body: bytes) -> str:
    """A /metrics page as text: Prometheus' text format is UTF-8; bytes that are not become U+FFFD, and the
    parsers skip the lines that hold one (engines/prefix_cache.py reads the same way)."""
    return body.decode("utf-8", errors="replace")


class MetricsSampler:
    """Async context manager: samples `url` every interval_s into .samples = [(t_s, {name: value})], t_s from t0 on
    the perf_counter clock; unix_s(t_s) is the sample's wall-clock time."""

    def __init__(self, session: aiohttp.ClientSession, url: str, interval_s: float, t0: float):
        self.session, self.url, self.interval_s, self.t0 = session, url, interval_s, t0
        # Unix time of the perf_counter clock's zero, so a sample's wall-clock time is this + t0 + t_s: the clock
        # nvidia-smi stamps its telemetry with (analysis/gpu_idle.py matches the two on it)
        self.unix_offset_s = time.time() - time.perf_counter()
        self.samples: list[tuple[float, dict[str, float]]] = []
        self.error: str | None = None
        self._task: asyncio.Task | None = None

    async def _run(self) -> None:
        while True:
            try:
                async with self.session.get(self.url, timeout=aiohttp.ClientTimeout(total=2)) as r:
                    if r.status == 200:
                        # parsed on the loop (a worker thread would fight the loop for the GIL on every chunk
                        # read, which stalled a 2-core machine for 100s of ms); parse_prometheus is kept cheap
                        vals = parse_prometheus(decode_page(await r.read()))
                        if vals:
                            self.samples.append((time.perf_counter() - self.t0, vals))
                    else:
                        self.error = f"HTTP {r.status}"
            except (aiohttp.ClientError, asyncio.TimeoutError) as e:
                self.error = f"{type(e).__name__}: {e}"
            await asyncio.sleep(self.interval_s)

    def unix_s(self, t_s: float) -> float:
        return self.unix_offset_s + self.t0 + t_s

    async def __aenter__(self) -> MetricsSampler:
        if self.interval_s > 0:
            self._task = asyncio.create_task(self._run())
        return self

    async def __aexit__(self, *exc) -> None:
        if self._task:
            self._task.cancel()
            try:
                await self._task
            except (asyncio.CancelledError, Exception):
                pass

    def summary(self) -> dict[str, float]:
        """Time-averaged value of each gauge over the samples (the batch the engine ran, on average); the token
        counters are compared with the client's in analysis/agreement.py instead."""
        keys = {k for _, v in self.samples for k in v if not k.endswith(("_total", "_sum", "_count"))}
        return {f"mean_{k}": sum(v.get(k, 0.0) for _, v in self.samples) / len(self.samples)
                for k in sorted(keys)} if self.samples else {}
