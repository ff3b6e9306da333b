"""PNG charts for the report (matplotlib, no display). Each function takes plain data, a path and the report's
Colours: one colour per engine (or kernel backend), the same in every chart of a report."""

from __future__ import annotations

import math
import textwrap
from pathlib import Path

import matplotlib
import matplotlib.pyplot as plt  # noqa: E402

matplotlib.use("Agg")

# Okabe & Ito's colour-blind-safe set (black left out: it is the zero line's), then Tol's muted ones
PALETTE = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#882255", "#44AA99", "#999933",
           "#332288", "#AA4499", "#661100")
REFERENCE = "#777777"  # published series


class Colours:
    """A fixed name -> colour mapping for one report: names take PALETTE's colours in the order they are first
    asked for (the report asks for its engines first, in their order, so an engine keeps its colour in every
    chart, and reports of the same engines in the same order share colours)."""

    def __init__(self, names=()):
        self.map: dict[str, str] = {}
        for n in names:
            self[n]

    def __getitem__(self, name: str) -> str:
        if name not in self.map:
            self.map[name] = PALETTE[len(self.map) % len(PALETTE)]
        return self.map[name]

    def derived(self, names: list[str], like: dict[str, str]) -> Colours:
        """Colours for other names (e.g. kernel backends): each that of the name like[name] (the engine that
        runs it), or its own where it has one, as long as that keeps them distinct; else one no engine has."""
        out, used = Colours(), set()
        free = [c for c in PALETTE if c not in self.map.values()] or list(PALETTE)
        for n in sorted(names, key=lambda n: n not in like):
            c = self.map.get(like.get(n, n))
            if c is None or c in used:
                c = next((f for f in free if f not in used), free[len(used) % len(free)])
            out.map[n] = c
            used.add(c)
        return out


Series = dict[str, list[tuple[float, float]]]  # label -> [(x, y)]
Band = dict[str, list[tuple[float, float | None, float | None, float | None]]]  # label -> [(x, y, lo, hi)]


def panels_grid(n: int, max_cols: int, panel_w_in: float, panel_h_in: float):
    """A figure of n panels, at most max_cols per row (inches per panel): (fig, axes[rows][cols]); constrained
    layout, so that a legend can sit outside the panels."""
    cols = max(1, min(max_cols, n))
    rows = max(1, math.ceil(n / cols))
    return plt.subplots(rows, cols, figsize=(panel_w_in * cols, panel_h_in * rows + 0.6), squeeze=False,
                        layout="constrained")


def _cols(n: int) -> int:
    """Panels per row: 2 x 2 for four, else up to three."""
    return 2 if n == 4 else 3


def _save(fig, path: Path) -> str:
    if fig.get_layout_engine() is None:
        fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path.name


def wrapped(title: str, fig, fontsize: float) -> str:
    """The title broken into lines that fit the figure's width (about 120 / fontsize characters an inch)."""
    return textwrap.fill(title, max(20, int(fig.get_figwidth() * 120 / fontsize)))


def _finish(fig, axes, n: int, title: str) -> None:
    """Blank the unused panels; one legend for the figure, below the panels; the title."""
    for ax in list(axes.flat)[n:]:
        ax.axis("off")
    seen: dict[str, object] = {}
    for ax in axes.flat:
        for h, lb in zip(*ax.get_legend_handles_labels(), strict=True):
            seen.setdefault(lb, h)
    if seen:
        fig.legend(list(seen.values()), list(seen), loc="outside lower center", ncol=min(len(seen), 5), fontsize=8,
                   frameon=False)
    fig.suptitle(wrapped(title, fig, 10), fontsize=10)


def _load_axis(ax, xs: list[float]) -> None:
    """A log2 load axis with a tick at each measured load, written as it was set (1, 64, 256)."""
    ax.set_xscale("log", base=2)
    ticks = sorted({x for x in xs if x and x > 0})
    if ticks:
        ax.set_xticks(ticks, [f"{x:g}" for x in ticks])
        ax.minorticks_off()
        ax.set_xlim(ticks[0] / 1.6, ticks[-1] * 1.6)


def _refs(ax, refs: list[dict] | None) -> None:
    """Published references: dotted grey series, or a flat line across the panel for points without x."""
    for ref in refs or []:
        xs = [p for p in ref["points"] if p[0] is not None]
        if xs:
            ax.plot([p[0] for p in xs], [p[1] for p in xs], linestyle=":", marker="s", color=REFERENCE,
                    label=ref["label"])
        for _, y in (p for p in ref["points"] if p[0] is None):
            ax.axhline(y, linestyle=":", color=REFERENCE)
            ax.annotate(ref["label"], xy=(0.01, y), xycoords=("axes fraction", "data"), fontsize=7, color=REFERENCE,
                        va="bottom")


def _errorbar(ax, pts: list[tuple], colour: str, label: str, shift: float) -> None:
    pts = sorted(p for p in pts if p[1] is not None and math.isfinite(p[1]))
    if not pts:
        return
    xs, ys = [p[0] * shift for p in pts], [p[1] for p in pts]
    # an interval need not hold the mean (one run's: around its sub-windows' mean); a bar never goes negative
    lo = [max(0.0, p[1] - p[2]) if len(p) > 2 and p[2] is not None else 0.0 for p in pts]
    hi = [max(0.0, p[3] - p[1]) if len(p) > 3 and p[3] is not None else 0.0 for p in pts]
    ax.errorbar(xs, ys, yerr=[lo, hi], marker="o", markersize=5, linewidth=1.8, elinewidth=1.6, capsize=4,
                capthick=1.6, color=colour, label=label)


def engine_panels(path: Path, panels: dict[str, Band], colours: Colours, xlabel: str, ylabel: str, title: str,
                  logx: bool = True, hline0: bool = False, refs: list[dict] | None = None) -> str:
    """Small multiples: one panel per workload cell (key; "" for a dataset), one line per engine in its colour, its
    95% intervals as error bars (none where lo/hi are None). On a load axis (logx) each engine's points are set a
    little apart, the same way in every panel, so that bars at the same load do not hide each other."""
    keys = list(panels)
    fig, axes = panels_grid(len(keys), _cols(len(keys)), 4.6, 3.3)
    order = {n: i for i, n in enumerate(dict.fromkeys(n for k in keys for n in panels[k]))}
    for ax, key in zip(axes.flat, keys, strict=False):
        for label, pts in panels[key].items():
            shift = 2 ** (0.1 * (order[label] - (len(order) - 1) / 2)) if logx else 1.0
            _errorbar(ax, pts, colours[label], label, shift)
        _refs(ax, refs)
        if hline0:
            ax.axhline(0, color="black", linewidth=0.8)
        if logx:
            _load_axis(ax, [p[0] for pts in panels[key].values() for p in pts])
        ax.set_title(key or "all points", fontsize=9)
        ax.set_xlabel(xlabel, fontsize=8)
        ax.set_ylabel(ylabel, fontsize=8)
        ax.grid(alpha=0.3)
    _finish(fig, axes, len(keys), title)
    return _save(fig, path)


def panels(path: Path, data: dict[str, Series], xlabel: str, ylabel: str, title: str, logy: bool = True,
           hline: float | None = None, colours: Colours | None = None) -> str:
    """One panel per key (e.g. per GEMM shape), one line per series (e.g. backend) in its colour."""
    colours = colours or Colours()
    keys = list(data)
    fig, axes = panels_grid(len(keys), 3, 4.3, 3.2)
    for ax, key in zip(axes.flat, keys, strict=False):
        for label, pts in data[key].items():
            pts = sorted(pts)
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker=".", color=colours[label], label=label)
        if hline is not None:
            ax.axhline(hline, color="black", linewidth=0.6)
        ax.set_xscale("log", base=2)
        if logy:
            ax.set_yscale("log")
        ax.set_title(key, fontsize=9)
        ax.set_xlabel(xlabel, fontsize=8)
        ax.set_ylabel(ylabel, fontsize=8)
        ax.grid(alpha=0.3)
    _finish(fig, axes, len(keys), title)
    return _save(fig, path)


def timelines(path: Path, panels: dict[str, Series], windows: dict[str, tuple[float, float] | None],
              ylabel: str, title: str, colours: Colours | None = None) -> str:
    """Per-second series, one panel per load point, one line per engine in its colour; each engine's steady-state
    window shaded in its colour. A series of a few seconds is drawn with markers (one second: a dot)."""
    colours = colours or Colours()
    keys = list(panels)
    fig, axes = panels_grid(len(keys), 3, 4.3, 2.9)
    for ax, key in zip(axes.flat, keys, strict=False):
        for label, pts in panels[key].items():
            c = colours[label]
            ax.plot([p[0] for p in pts], [p[1] for p in pts], color=c, linewidth=1.2, label=label,
                    marker="o" if len(pts) <= 6 else None, markersize=3)
            w = windows.get(f"{key}|{label}")
            if w:
                ax.axvspan(w[0], w[1], color=c, alpha=0.08)
        ax.set_title(key, fontsize=9)
        ax.set_xlabel("seconds into the point", fontsize=8)
        ax.set_ylabel(ylabel, fontsize=8)
        ax.grid(alpha=0.3)
    _finish(fig, axes, len(keys), title)
    return _save(fig, path)
