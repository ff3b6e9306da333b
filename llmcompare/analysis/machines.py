"""Whether two engine records were measured on one machine (schema/machine.py): the serving path's speed differs
between machines of the same kind (up to ~15% between two H200 machines at c=256, reports/h200-instrument), more
than the gaps' intervals, so a verdict between machines is refused unless asked for, and then says so."""

from __future__ import annotations

from llmcompare.schema.run import EngineRecord


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
