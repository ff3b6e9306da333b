"""The prefix cache: each engine's flags for it (registry.ENGINES[kind].prefix_cache_flags, picked by an engine's
`prefix_cache: as-shipped | on | off`) and the hit rate it reports per load point.

Hit rate = prefix-cache hits / queries, in tokens, over one measured point: the engine's Prometheus counters
read just before and just after the point (warm-up excluded). vLLM (0.26, 0.32: vllm/v1/metrics/loggers.py)
exports `vllm:prefix_cache_queries` and `vllm:prefix_cache_hits` ("number of queried tokens" / "number of cached
tokens"), as counters `..._total`. lmdeploy's /metrics (with --enable-metrics) has no such counter that we know
of: its points record "not reported". SGLang 0.5.15 (with --enable-metrics; srt/observability/metrics_collector.py
`observe_one_finished_request`) adds each finished request's prompt tokens to `sglang:prompt_tokens_total` and
its cached prompt tokens to `sglang:cached_tokens_total` (one series per cache_source: device, host): read as
queries and hits. They count when a request finishes, not when it is scheduled; every measured request has
finished by the second reading, so over a point the two agree.
"""

from __future__ import annotations

import re

from llmcompare.errors import ScenarioError
from llmcompare.schema.prefix_cache import PrefixCache

MODES = ("as-shipped", "on", "off")


_COUNTER = re.compile(r"^[a-z_]+:prefix_cache_(queries|hits)(?:_total)?(\{[^}]*\})?\s+([-+0-9.eE]+)")
_SGLANG = re.compile(r"^sglang:(prompt|cached)_tokens_total(\{[^}]*\})?\s+([-+0-9.eE]+)")
_SGLANG_KEY = {"prompt": "queries", "cached": "hits"}


def parse(text: str) -> dict[str, float]:
    """{"queries": tokens, "hits": tokens} summed over label sets (engines, models); {} when absent. Excludes
    vllm:external_prefix_cache_* (a KV connector's cache): the pattern wants the name right after the colon. A line
    with bytes that were not UTF-8 (U+FFFD: see read) or a value that is not a number is skipped."""
    out: dict[str, float] = {}
    sglang = False
    for line in text.splitlines():
        if not ("prefix_cache_" in line or line.startswith("sglang:")) or line.startswith("#") or "\ufffd" in line:
            continue
        if m := _COUNTER.match(line):
            key = m.group(1)
        elif m := _SGLANG.match(line):
            key, sglang = _SGLANG_KEY[m.group(1)], True
        else:
            continue
        try:
            out[key] = out.get(key, 0.0) + float(m.group(3))
        except ValueError:  # the pattern lets "1e" or "+-" through
            continue
    if sglang and "queries" in out:  # SGLang's cached counter has no series until a first hit
        out.setdefault("hits", 0.0)
    return out


async def read(session, url: str) -> dict[str, float] | str:
    """The counters now, or why they could not be read."""
    import aiohttp

    try:
        async with session.get(url, timeout=aiohttp.ClientTimeout(total=5)) as r:
            if r.status != 200:
                return f"{url}: HTTP {r.status}"
            # Prometheus' text format is UTF-8: other bytes become U+FFFD and their lines are skipped
            return parse((await r.read()).decode("utf-8", errors="replace"))
    except (aiohttp.ClientError, TimeoutError) as e:
        return f"{url}: {type(e).__name__}: {e}"


def delta(before: dict[str, float] | str, after: dict[str, float] | str) -> PrefixCache:
    for x in (before, after):
        if isinstance(x, str):
            return PrefixCache(note=f"not reported: /metrics unreadable ({x})")
    if not {"queries", "hits"} <= before.keys() & after.keys():
        return PrefixCache(note="not reported: the engine's /metrics has no prefix-cache counters")
    q, h = after["queries"] - before["queries"], after["hits"] - before["hits"]
    return PrefixCache(reported=True, queries_tokens=q, hits_tokens=h, hit_rate=h / q if q > 0 else None,
                       note="" if q > 0 else "no prompt token was looked up in the cache")


def flags(kind_name: str, table: dict[str, list[str]], mode: str) -> list[str]:
    """The server flags for `mode` (as-shipped: none)."""
    return [] if mode == "as-shipped" else list(table[mode])


def check(where: str, kind_name: str, table: dict[str, list[str]], mode: str, args: list[str]) -> None:
    """An engine's prefix_cache: a known mode, one its kind can set, and not also set by its own args."""
    if mode not in MODES:
        raise ScenarioError(f"{where}.prefix_cache: {mode!r} is not valid; valid: {', '.join(MODES)}")
    if mode == "as-shipped":
        return
    if not table:
        raise ScenarioError(f"{where}.prefix_cache: kind {kind_name} has no prefix-cache flag llmcompare knows; "
                            "use as-shipped")
    known = {f for fs in table.values() for f in fs}
    given = [a for a in args if a.split("=", 1)[0] in known]
    if given:
        raise ScenarioError(f"{where}.args: passes {given[0]}, and prefix_cache: {mode} sets the prefix cache too; "
                            f"drop {given[0]} from args (prefix_cache {mode} passes "
                            f"{' '.join(table[mode]) or f'nothing: {mode} is the engine default'})")
