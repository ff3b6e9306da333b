"""One load point's prefix-cache use, as the engine's own counters report it (engines/prefix_cache.py reads them)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class PrefixCache:
    """One point's prefix-cache use as the engine reports it."""

    reported: bool = False  # False: the engine exports no prefix-cache counters (hit rate "not reported")
    queries_tokens: float | None = None  # prompt tokens looked up in the cache during the point
    hits_tokens: float | None = None  # of which found there
    hit_rate: float | None = None  # hits / queries; None when not reported or nothing was queried
    note: str = ""
