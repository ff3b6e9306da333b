"""The win map: heatmaps of the gap over the grid with crossover lines, and Pareto fronts, rendered from the
H200 grid runs (TurboMind, vLLM Machete and vLLM Marlin, 3 repeats per point: the run.json files of reports/h200-grid,
copied to tests/data/h200-small/h200-grid) and from crafted verdict rows for the crossover rules."""

import statistics
from pathlib import Path

import pytest

from llmcompare.analysis import verdict
from llmcompare.report import win_map
from llmcompare.report.build import build_report
from llmcompare.schema.files import load_run
from llmcompare.schema.run import LoadKey

ROOT = Path(__file__).resolve().parents[1]
GRID = ROOT / "tests/data/h200-small/h200-grid"
RUNS = [GRID / "qwen-awq-h200-20261202-200831", GRID / "qwen-awq-h200-20261202-212514",
        GRID / "qwen-awq-h200-20261202-213623"]


@pytest.fixture(scope="module")
def grid_report(tmp_path_factory):
    out = tmp_path_factory.mktemp("map")
    build_report([str(r) for r in RUNS], str(out), figures="whole", cross_machine=True)  # runs of two machines
    return out


def test_heatmaps_pareto_and_crossover_of_the_h200_grid(grid_report):
    names = {p.name for p in grid_report.iterdir()}
    assert {"map_turbomind_vs_vllm.png", "map_vllm_vs_vllm-marlin.png", "map_turbomind_vs_vllm-marlin.png",
            "pareto.png"} <= names
    md = (grid_report / "report.md").read_text()
    html = (grid_report / "report.html").read_text()
    assert 'src="map_vllm_vs_vllm-marlin.png"' in html and 'src="pareto.png"' in html
    # Marlin is ahead at c=1 (one request: dequantizing GEMV), Machete from c=64 on: a crossover in the files.
    # c=16 has no verdict: one of Marlin's repeats there was untrusted at its first attempt (its retry never counts)
    line = next(ln for ln in md.splitlines() if ln.startswith("vllm against vllm-marlin:"))
    assert "the winner changes between c=1 and c=64 at in=1024 out=256" in line
    marlin = load_run(RUNS[2]).engines["vllm-marlin"]
    assert verdict.left_out(marlin)[LoadKey(concurrency=16, input_len=1024, output_len=256)].startswith(
        "repeat 1 attempt 1: untrusted")
    assert "| vllm-marlin | c=16 in=1024 out=256 | repeat 1 attempt 1: untrusted" in md
    assert "no crossover" in next(ln for ln in md.splitlines() if ln.startswith("turbomind against vllm:"))


def test_crossover_figures_are_the_verdicts(grid_report):
    """The gap in the crossover sentence is verdict.compare's on the same files, not another computation."""
    vllm, marlin = (load_run(r).engines[n] for r, n in ((RUNS[1], "vllm"), (RUNS[2], "vllm-marlin")))
    rows = {r.key.label: r for r in verdict.compare(vllm, marlin, figures="whole", cross_machine=True)}
    md = (grid_report / "report.md").read_text()
    c1, c64 = rows["c=1 in=1024 out=256"], rows["c=64 in=1024 out=256"]
    assert c1.gap.word == "slower" and c64.gap.word == "faster" and "c=16 in=1024 out=256" not in rows
    assert f"slower {c1.gap.text()} -> faster {c64.gap.text()}" in md


def test_pareto_front_is_the_mean_of_the_repeats(grid_report):
    rec = load_run(RUNS[1]).engines["vllm"]
    pts = win_map.pareto_points(rec)["in=512 out=256"]
    c16 = next(p for p in pts if p[2] == "c=16")
    ups = verdict.usable_points(rec)[LoadKey(concurrency=16, input_len=512, output_len=256)]
    assert c16[0] == pytest.approx(statistics.fmean(p.metrics.output_throughput for p in ups))
    assert c16[1] == pytest.approx(1000 / statistics.fmean(p.metrics.stat("mean_tpot_ms") for p in ups))
    md = (grid_report / "report.md").read_text()
    assert "| in=512 out=256 | vllm | c=1: " in md


def test_pareto_front_drops_dominated_points():
    pts = [(100.0, 50.0, "c=1"), (300.0, 40.0, "c=4"), (250.0, 30.0, "c=8"), (500.0, 10.0, "c=16")]
    assert [p[2] for p in win_map.pareto_front(pts)] == ["c=1", "c=4", "c=16"]


def _row(c: int, in_len: int, pct: float, lo: float | None, hi: float | None) -> verdict.Row:
    word = ("no interval" if lo is None else "no significant difference" if lo <= 0 <= hi
            else "faster" if lo > 0 else "slower")
    e = verdict.Estimate(1.0, None, None, 1, [1.0], "", "whole point")
    return verdict.Row(LoadKey(concurrency=c, input_len=in_len, output_len=128), e, e,
                       verdict.Gap(pct, lo, hi, word, ""))


def test_crossovers_need_significance_on_both_sides(tmp_path):
    rows = [_row(1, 512, 10, 5, 15), _row(8, 512, -3, -6, 1), _row(64, 512, -20, -25, -15),  # n.s. in between
            _row(1, 2048, -8, -10, -6), _row(8, 2048, 4, 2, 6), _row(64, 2048, -2, -4, -1)]
    wm = win_map.win_map("A", "B", rows)
    assert wm.rows == ["in=512 out=128", "in=2048 out=128"] and wm.cols == ["c=1", "c=8", "c=64"]
    sig, loose = win_map.crossovers(wm)
    where = sorted((x.cell, x.next_cell) for x in sig)
    # row 2048: c=1 -> c=8 and c=8 -> c=64; column c=1: 512 -> 2048; column c=8: 512 is n.s.
    assert where == [((0, 0), (1, 0)), ((1, 0), (1, 1)), ((1, 1), (1, 2))]
    assert [(x.cell, x.next_cell) for x in loose] == [((0, 0), (0, 1)), ((0, 1), (1, 1))]
    text = win_map.crossover_sentence(wm, sig, loose)
    assert "between c=1 and c=8 at in=2048 out=128 (A slower -8.0% [-10.0, -6.0] -> faster +4.0% [+2.0, +6.0])" in text
    assert "between in=512 out=128 and in=2048 out=128 at c=1" in text
    assert "Not significant: the estimates change sign between c=1 and c=8 at in=512 out=128" in text
    assert win_map.heatmap_file(tmp_path, wm, sig) == "map_A_vs_B.png"
    assert (tmp_path / "map_A_vs_B.png").stat().st_size > 1000


def test_no_crossover_says_who_wins():
    wm = win_map.win_map("A", "B", [_row(1, 512, 10, 5, 15), _row(8, 512, 1, -1, 3)])
    sig, loose = win_map.crossovers(wm)
    assert sig == [] and loose == []
    assert "no crossover" in win_map.crossover_sentence(wm, sig, loose)
    assert "A is faster than B wherever the difference is significant" in win_map.crossover_sentence(wm, sig, loose)



def test_a_workload_without_lengths_is_named_by_its_dataset(tmp_path):
    """ShareGPT-like points have no grid lengths: the map's rows and the Pareto table name the dataset
    (reports/h200-converge's ShareGPT-like run), not a placeholder."""
    run = ROOT / "reports/h200-converge/converge-h200-20261204-202135"
    build_report([str(run)], str(tmp_path))
    md = (tmp_path / "report.md").read_text()
    assert "| synthetic-sharegpt | vllm | c=256:" in md and "(dataset)" not in md
