"""Published references: series a scenario carries (with source, GPU, model, versions, date), overlaid on the
measured charts, and a statement of where the reproduction agrees and where it does not."""

from __future__ import annotations

import math

GAP_TOLERANCE_PP = 10.0  # "agrees": the measured gap is within this many percentage points of the published one


def _point(p: dict) -> str:
    return ("any x" if p["x"] is None else f"{p['x']:g}") + f": {p['y']:g}"


def _nearest(series: list[tuple[float, float]], x: float | None) -> list[tuple[float, float]]:
    if x is None:
        return series
    return [min(series, key=lambda p: abs(math.log(p[0]) - math.log(x)))] if series else []


def references_section(doc, refs: list[dict], gaps: dict[str, list[tuple[float, float]]], kruns: list,
                       baseline: str | None = None) -> None:
    if not refs:
        return
    doc.h(2, "Published references")
    doc.table(["reference", "metric", "engine vs baseline", "points (x: y)", "GPU", "model", "versions", "date", "source"],
              [[r["label"], r["metric"], f"{r['engine']} vs {r.get('baseline') or '–'}",
                ", ".join(_point(p) for p in r["points"]),
                r["gpu"] or "not stated", r["model"] or "–", r["versions"] or "–", r["date"] or "–", r["source"]]
               for r in refs])
    for r in refs:
        if r["metric"] == "gap_pct":
            measured = next((v for k, v in gaps.items() if k == r["engine"] or k.endswith("/" + r["engine"])), None)
            if not measured:
                doc.p(f"{r['label']}: no measured gap for {r['engine']} in these runs.")
                continue
            for p in r["points"]:
                near = _nearest(sorted(measured), p["x"])
                lo, hi = min(v for _, v in near), max(v for _, v in near)
                within = [v for _, v in near if abs(v - p["y"]) <= GAP_TOLERANCE_PP]
                where = "across the sweep" if p["x"] is None else f"at x = {near[0][0]:g}"
                verdict = ("agrees" if len(within) == len(near) else
                           "agrees at some points only" if within else "does not agree")
                against = ("" if not r.get("baseline") or r["baseline"] == baseline else
                           f" (note: published against {r['baseline']}, measured here against {baseline})")
                doc.p(f"{r['label']}: published {p['y']:+g}%; measured {where}: {lo:+.1f}% to {hi:+.1f}% "
                      f"-> {verdict} (tolerance ±{GAP_TOLERANCE_PP:g} pp){against}.")
        elif r["metric"] == "gemm_s":
            for run in kruns:
                pts = {(q.backend, q.shape, q.m): q for q in run.points if q.status == "ok"}
                for p in r["points"]:
                    x = int(p["x"]) if p["x"] else None
                    q = pts.get((r["engine"], f"{x}x{x}", x)) if x else None
                    if q:
                        ours = q.graph_us * 1e-6 * 1000
                        doc.p(f"{r['label']}: published {p['y']:g} s for 1000 calls of {x}^3 ({r['gpu'] or 'GPU not stated'}); "
                              f"measured {ours:.1f} s ({(run.workers[0].get('gpu') or {}).get('name')}).")
