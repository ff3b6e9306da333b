"""Whether two engine records were measured on one machine (schema/machine.py): the serving path's speed differs
between machines of the same kind (up to ~15% between two H200 machines at c=256, reports/h200-instrument), more
than the gaps' intervals, so a verdict between machines is refused unless asked for, and then says so."""

from __future__ import annotations

import re

from llmcompare.schema.run import EngineRecord, PointResult

UUID = re.compile(r"([0-9a-fA-F]{8})(?:-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12}")


def difference(a: EngineRecord, b: EngineRecord) -> str | None:
    """None when a and b were measured on one machine; else why that is not shown, naming both machines."""
    ma, mb = a.machine, b.machine
    if ma is None or mb is None:
        missing = " and ".join(r.name or "?" for r, m in ((a, ma), (b, mb)) if m is None)
        return f"machine not recorded for {missing}"
    if ma.key and ma.key == mb.key:
        return None
    if not ma.key or not mb.key:
        return f"not shown to be one machine ({a.name}: {ma.describe()}; {b.name}: {mb.describe()})"
    return f"measured on different machines ({a.name}: {ma.describe()}; {b.name}: {mb.describe()})"


def _keys(rec: EngineRecord, points: list[PointResult]) -> set[str]:
    """The machine keys of an engine's points at one cell: each point's own, else (files before session 33) its
    record's; "" where not known."""
    rk = rec.machine.key if rec.machine else ""
    return {rk if p.machine_key is None else p.machine_key for p in points}


def _short(key: str) -> str:
    """A key with each UUID (GPU or boot id) cut to its first 8 hex digits: 'gpus GPU-34f47e86…'."""
    return UUID.sub(r"\1…", key) or "not known"


def cell_difference(cand: EngineRecord, cp: list[PointResult], base: EngineRecord,
                    bp: list[PointResult]) -> str | None:
    """None when every point of one cell, both engines' (cp, bp: the points a verdict would use), was measured on
    one machine; else why not. Files whose points carry no machine key are judged by their records (difference),
    as before session 33; a run resumed on another machine is then judged cell by cell."""
    if all(p.machine_key is None for p in cp + bp):
        return difference(cand, base)
    ck, bk = _keys(cand, cp), _keys(base, bp)
    if len(ck | bk) == 1 and "" not in ck:
        return None
    lead = "not shown to be one machine" if "" in ck | bk else "measured on different machines"
    return (f"{lead} ({cand.name}: {', '.join(map(_short, sorted(ck)))}; {base.name}: "
            f"{', '.join(map(_short, sorted(bk)))})")
