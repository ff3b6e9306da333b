"""PNG charts of the win map (matplotlib, no display): a heatmap of one engine's gap against another over the
grid, and Pareto fronts of per-user speed against total throughput. Each function takes plain data and a path;
engines are drawn in the report's Colours (charts.Colours)."""

from __future__ import annotations

import math
from pathlib import Path

from matplotlib.colors import to_rgb
from matplotlib.patches import Patch

from llmcompare.report.charts import Colours, _finish, _save, panels_grid, plt, wrapped

Crossing = tuple[int, int, int, int]  # (row, col) and its neighbour (row2, col2) where the winner changes

PALE = 0.22  # how much of the winner's colour a cell without a significant difference gets


def _tint(colour: str, share: float) -> tuple[float, float, float]:
    """White mixed with `share` of the colour."""
    return tuple(1 - share * (1 - c) for c in to_rgb(colour))


def _dark(rgb) -> bool:
    return 0.2126 * rgb[0] + 0.7152 * rgb[1] + 0.0722 * rgb[2] < 0.5


def cell_colour(pct: float | None, significant: bool, lim: float, ahead: str, behind: str):
    """The colour of the engine ahead in the cell (first's when pct > 0, second's when < 0), deeper with the size
    of the gap; pale where the difference is not significant; light grey without a cell."""
    if pct is None or not math.isfinite(pct):
        return (0.95, 0.95, 0.95)
    colour = ahead if pct > 0 else behind
    if not significant:
        return _tint(colour, PALE)
    return _tint(colour, 0.35 + 0.65 * min(abs(pct) / lim, 1.0))


def heatmap(path: Path, rows: list[str], cols: list[str], pct: list[list[float | None]], text: list[list[str]],
            crossings: list[Crossing], title: str, significant: list[list[bool]] | None = None,
            names: tuple[str, str] = ("first", "second"), colours: Colours | None = None) -> str:
    """pct[r][c]: the gap of names[0] against names[1] in % (None: no cell); text[r][c]: what is written in the
    cell (gap, interval, word); significant[r][c]: whether the interval excludes 0. A cell takes the colour of
    the engine ahead there, deeper the larger the gap, pale where not significant; a thick black line between two
    cells where the winner changes (both significant, opposite signs)."""
    colours = colours or Colours(names)
    significant = significant or [[True] * len(cols) for _ in rows]
    fig, ax = plt.subplots(figsize=(max(5.0, 2.1 * len(cols) + 2.0), max(2.6, 0.95 * len(rows) + 1.6)),
                           layout="constrained")
    finite = [abs(v) for r in pct for v in r if v is not None and math.isfinite(v)]
    lim = max(finite + [1.0])
    grid = [[cell_colour(pct[r][c], significant[r][c], lim, colours[names[0]], colours[names[1]])
             for c in range(len(cols))] for r in range(len(rows))]
    ax.imshow(grid, aspect="auto")
    for r in range(len(rows)):
        for c in range(len(cols)):
            ax.text(c, r, text[r][c], ha="center", va="center", fontsize=8,
                    color="white" if _dark(grid[r][c]) else "black")
    for r, c, r2, c2 in crossings:
        if r == r2:  # a vertical border between two columns
            x = (c + c2) / 2
            ax.plot([x, x], [r - 0.5, r + 0.5], color="black", linewidth=3)
        else:
            y = (r + r2) / 2
            ax.plot([c - 0.5, c + 0.5], [y, y], color="black", linewidth=3)
    ax.set_xticks(range(len(cols)), cols, fontsize=8)
    ax.set_yticks(range(len(rows)), rows, fontsize=8)
    ax.tick_params(length=0)
    fig.suptitle(wrapped(title, fig, 9), fontsize=9)
    a, b = names
    ax.legend(handles=[Patch(color=_tint(colours[a], 0.8), label=f"{a} ahead"),
                       Patch(color=_tint(colours[b], 0.8), label=f"{b} ahead"),
                       Patch(color=_tint(colours[a], PALE), label="pale: not significant")],
              loc="upper center", bbox_to_anchor=(0.5, -0.08), ncol=3, fontsize=8, frameon=False)
    return _save(fig, path)


Front = dict[str, list[tuple[float, float, str]]]  # engine -> [(total output tok/s, per-user tok/s, point label)]


def pareto(path: Path, panels: dict[str, Front], fronts: dict[str, Front], title: str,
           colours: Colours | None = None) -> str:
    """One panel per workload cell; per engine every point (faint) and its Pareto front (line, labelled)."""
    colours = colours or Colours()
    keys = list(panels)
    fig, axes = panels_grid(len(keys), 2, 5.0, 3.7)
    for ax, key in zip(axes.flat, keys, strict=False):
        for engine, pts in panels[key].items():
            c = colours[engine]
            ax.scatter([p[0] for p in pts], [p[1] for p in pts], color=c, alpha=0.3, s=18)
            front = sorted(fronts[key].get(engine, []))
            ax.plot([p[0] for p in front], [p[1] for p in front], color=c, marker="o", label=engine)
            for x, y, label in front:
                ax.annotate(label.split(" ")[0], (x, y), fontsize=6, xytext=(3, 3), textcoords="offset points")
        ax.set_xlabel("total output tokens/s", fontsize=8)
        ax.set_ylabel("per-user output tok/s (1000 / mean TPOT)", fontsize=8)
        ax.set_title(key or "all points", fontsize=9)
        ax.grid(alpha=0.3)
    _finish(fig, axes, len(keys), title)
    return _save(fig, path)
