"""PNG charts of the win map (matplotlib, no display): a heatmap of one engine's gap against another over the
grid, and Pareto fronts of per-user speed against total throughput. Each function takes plain data and a path."""

from __future__ import annotations

import math
from pathlib import Path

from llmcompare.report.charts import _save, panels_grid, plt

Crossing = tuple[int, int, int, int]  # (row, col) and its neighbour (row2, col2) where the winner changes


def heatmap(path: Path, rows: list[str], cols: list[str], pct: list[list[float | None]], text: list[list[str]],
            crossings: list[Crossing], title: str) -> str:
    """pct[r][c]: the gap in % (None: no cell); text[r][c]: what is written in the cell (gap, interval, word).
    Green: the first engine ahead, red: behind; a thick black line between two cells where the winner changes
    (both significant, opposite signs)."""
    fig, ax = plt.subplots(figsize=(max(5.0, 2.3 * len(cols) + 1.5), max(2.5, 1.1 * len(rows) + 1.4)))
    finite = [abs(v) for r in pct for v in r if v is not None and math.isfinite(v)]
    lim = max(finite + [1.0])
    grid = [[v if v is not None and math.isfinite(v) else math.nan for v in r] for r in pct]
    im = ax.imshow(grid, cmap="RdYlGn", vmin=-lim, vmax=lim, aspect="auto")
    for r in range(len(rows)):
        for c in range(len(cols)):
            ax.text(c, r, text[r][c], ha="center", va="center", fontsize=7)
    for r, c, r2, c2 in crossings:
        if r == r2:  # a vertical border between two columns
            x = (c + c2) / 2
            ax.plot([x, x], [r - 0.5, r + 0.5], color="black", linewidth=3)
        else:
            y = (r + r2) / 2
            ax.plot([c - 0.5, c + 0.5], [y, y], color="black", linewidth=3)
    ax.set_xticks(range(len(cols)), cols, fontsize=8)
    ax.set_yticks(range(len(rows)), rows, fontsize=8)
    ax.set_title(title, fontsize=9)
    fig.colorbar(im, ax=ax, label="gap (%)")
    return _save(fig, path)


Front = dict[str, list[tuple[float, float, str]]]  # engine -> [(total output tok/s, per-user tok/s, point label)]


def pareto(path: Path, panels: dict[str, Front], fronts: dict[str, Front], title: str) -> str:
    """One panel per workload cell; per engine every point (faint) and its Pareto front (line, labelled)."""
    keys = list(panels)
    fig, axes = panels_grid(len(keys), 2, 5.2, 4.0)
    for ax, key in zip(axes.flat, keys, strict=False):
        for i, (engine, pts) in enumerate(panels[key].items()):
            ax.scatter([p[0] for p in pts], [p[1] for p in pts], color=f"C{i}", alpha=0.3, s=18)
            front = sorted(fronts[key].get(engine, []))
            ax.plot([p[0] for p in front], [p[1] for p in front], color=f"C{i}", marker="o", label=engine)
            for x, y, label in front:
                ax.annotate(label.split(" ")[0], (x, y), fontsize=6, xytext=(3, 3), textcoords="offset points")
        ax.set_xlabel("total output tokens/s")
        ax.set_ylabel("per-user output tokens/s (1000 / mean TPOT)")
        ax.set_title(key or "all points", fontsize=9)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    for ax in list(axes.flat)[len(keys):]:
        ax.axis("off")
    fig.suptitle(title, fontsize=10)
    return _save(fig, path)
