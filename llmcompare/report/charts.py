"""PNG charts for the report (matplotlib, no display). Each function takes plain data and a path."""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib
import matplotlib.pyplot as plt  # noqa: E402

matplotlib.use("Agg")


Series = dict[str, list[tuple[float, float]]]  # label -> [(x, y)]


def panels_grid(n: int, max_cols: int, panel_w_in: float, panel_h_in: float):
    """A figure of n panels, at most max_cols per row (inches per panel): (fig, axes[rows][cols])."""
    cols = min(max_cols, n)
    rows = math.ceil(n / cols)
    return plt.subplots(rows, cols, figsize=(panel_w_in * cols, panel_h_in * rows), squeeze=False)


def _save(fig, path: Path) -> str:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path.name


def _finish(fig, ax, path: Path, refs: list[dict] | None, hline0: bool, logx: bool, xlabel: str, ylabel: str,
            title: str) -> str:
    """Published references (dotted series, or a flat line across the chart for points without x), axes, save."""
    for ref in refs or []:
        xs = [p for p in ref["points"] if p[0] is not None]
        if xs:
            ax.plot([p[0] for p in xs], [p[1] for p in xs], linestyle=":", marker="s", label=ref["label"])
        for _, y in (p for p in ref["points"] if p[0] is None):
            ax.axhline(y, linestyle=":", color="gray")
            ax.annotate(ref["label"], xy=(0.01, y), xycoords=("axes fraction", "data"), fontsize=7, color="gray",
                        va="bottom")
    if hline0:
        ax.axhline(0, color="black", linewidth=0.6)
    if logx:
        ax.set_xscale("log", base=2)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    return _save(fig, path)


def lines(path: Path, series: Series, xlabel: str, ylabel: str, title: str, logx: bool = True,
          refs: list[dict] | None = None, dashed: Series | None = None, hline0: bool = False) -> str:
    """One line per series; refs = [{"label", "points": [(x|None, y)]}] drawn as markers (or a flat line
    across the chart for points without x); dashed = series drawn dashed (predictions)."""
    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    for label, pts in series.items():
        pts = sorted(p for p in pts if p[1] is not None and math.isfinite(p[1]))
        if pts:
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=label)
    for label, pts in (dashed or {}).items():
        pts = sorted(p for p in pts if p[1] is not None and math.isfinite(p[1]))
        if pts:
            ax.plot([p[0] for p in pts], [p[1] for p in pts], linestyle="--", marker="x", label=label)
    return _finish(fig, ax, path, refs, hline0, logx, xlabel, ylabel, title)


def percentiles(path: Path, data: dict[str, dict[str, list[tuple[float, float, float]]]], xlabel: str) -> str:
    """data: metric -> engine -> [(x, p50, p99)]; one panel per metric, p50 solid and p99 dashed."""
    metrics = list(data)
    fig, axes = plt.subplots(1, len(metrics), figsize=(4.2 * len(metrics), 3.8), squeeze=False)
    for ax, metric in zip(axes[0], metrics, strict=True):
        for i, (engine, pts) in enumerate(data[metric].items()):
            pts = sorted(pts)
            color = f"C{i}"
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", color=color, label=f"{engine} p50")
            ax.plot([p[0] for p in pts], [p[2] for p in pts], linestyle="--", color=color, label=f"{engine} p99")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel(xlabel)
        ax.set_ylabel(f"{metric} (ms)")
        ax.set_title(metric, fontsize=10)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6)
    return _save(fig, path)


def panels(path: Path, data: dict[str, Series], xlabel: str, ylabel: str, title: str, logy: bool = True,
           hline: float | None = None) -> str:
    """One panel per key (e.g. per GEMM shape), one line per series."""
    keys = list(data)
    fig, axes = panels_grid(len(keys), 3, 4.3, 3.4)
    for ax, key in zip(axes.flat, keys, strict=False):
        for label, pts in data[key].items():
            pts = sorted(pts)
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker=".", label=label)
        if hline is not None:
            ax.axhline(hline, color="black", linewidth=0.6)
        ax.set_xscale("log", base=2)
        if logy:
            ax.set_yscale("log")
        ax.set_title(key, fontsize=9)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6)
    for ax in list(axes.flat)[len(keys):]:
        ax.axis("off")
    fig.suptitle(title, fontsize=10)
    return _save(fig, path)


Band = dict[str, list[tuple[float, float, float | None, float | None]]]  # label -> [(x, y, lo, hi)]


def bands(path: Path, series: Band, xlabel: str, ylabel: str, title: str, logx: bool = True,
          hline0: bool = False, dashed: Series | None = None, refs: list[dict] | None = None) -> str:
    """One line per series with its 95% intervals as error bars (points without an interval: plain markers)."""
    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    for i, (label, pts) in enumerate(series.items()):
        pts = sorted(p for p in pts if p[1] is not None and math.isfinite(p[1]))
        if not pts:
            continue
        xs, ys = [p[0] for p in pts], [p[1] for p in pts]
        lo = [p[1] - p[2] if p[2] is not None else 0.0 for p in pts]
        hi = [p[3] - p[1] if p[3] is not None else 0.0 for p in pts]
        ax.errorbar(xs, ys, yerr=[lo, hi], marker="o", capsize=3, color=f"C{i}", label=label)
    for label, pts in (dashed or {}).items():
        pts = sorted(p for p in pts if p[1] is not None and math.isfinite(p[1]))
        if pts:
            ax.plot([p[0] for p in pts], [p[1] for p in pts], linestyle="--", marker="x", label=label)
    return _finish(fig, ax, path, refs, hline0, logx, xlabel, ylabel, title)


def timelines(path: Path, panels: dict[str, Series], windows: dict[str, tuple[float, float] | None],
              ylabel: str, title: str) -> str:
    """Per-second series, one panel per load point, one line per engine; each engine's steady-state window
    shaded in its colour."""
    keys = list(panels)
    fig, axes = panels_grid(len(keys), 3, 4.3, 3.0)
    for ax, key in zip(axes.flat, keys, strict=False):
        for i, (label, pts) in enumerate(panels[key].items()):
            ax.plot([p[0] for p in pts], [p[1] for p in pts], color=f"C{i}", linewidth=1, label=label)
            w = windows.get(f"{key}|{label}")
            if w:
                ax.axvspan(w[0], w[1], color=f"C{i}", alpha=0.08)
        ax.set_title(key, fontsize=9)
        ax.set_xlabel("seconds into the point")
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6)
    for ax in list(axes.flat)[len(keys):]:
        ax.axis("off")
    fig.suptitle(title, fontsize=10)
    return _save(fig, path)
