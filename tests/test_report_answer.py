"""The report's layout: the answer first (sentences made from the verdict rows), the win map, the details, the
method texts last; one colour per engine in every chart. On the H200 grid copies (tests/data/h200-small/h200-grid:
TurboMind, vLLM Machete, vLLM Marlin, 3 repeats) and on crafted rows."""

import re
from pathlib import Path

import pytest
from matplotlib.colors import to_hex

from llmcompare.analysis import verdict
from llmcompare.report import answer, charts, map_charts
from llmcompare.report.build import build_report
from llmcompare.schema.files import load_run
from llmcompare.schema.run import LoadKey

ROOT = Path(__file__).resolve().parents[1]
GRID = ROOT / "tests/data/h200-small/h200-grid"
RUNS = [GRID / "qwen-awq-h200-20261202-200831", GRID / "qwen-awq-h200-20261202-212514",
        GRID / "qwen-awq-h200-20261202-213623"]


@pytest.fixture(scope="module")
def grid(tmp_path_factory):
    out = build_report([str(r) for r in RUNS], str(tmp_path_factory.mktemp("grid")), baseline="vllm", figures="whole",
                       cross_machine=True)  # two runs: two H200 machines
    return out, (out / "report.md").read_text(), (out / "report.html").read_text()


def h2s(md: str) -> list[str]:
    return [ln[3:] for ln in md.splitlines() if ln.startswith("## ")]


def test_the_answer_then_the_win_map_then_details_and_the_method_last(grid):
    _, md, html = grid
    heads = h2s(md)
    assert heads[0].startswith("The answer") and heads[1].startswith("Win map")
    assert heads[2].startswith("Verdict") and heads[-2:] == ["Provenance", "Method"]
    method = md.split("\n## Method\n", 1)[1]
    for phrase in ("Welch-Satterthwaite degrees of freedom",):  # the verdict's method: in Method, nowhere before
        assert phrase in method and phrase not in md.split("\n## Method\n", 1)[0]
    # the HTML opens with the answer box, then links to every section, then the first heatmap
    assert html.index("class='answer'") < html.index("<nav>") < html.index('src="map_turbomind_vs_vllm.png"')
    assert all(f"href='#{re.sub(r'[^a-z0-9]+', '-', h.lower()).strip('-')}'" in html for h in heads)


def _answer(md: str) -> list[str]:
    block = md.split("## The answer", 1)[1].split("\n## ", 1)[0]
    return [ln[2:] for ln in block.splitlines() if ln.startswith("- ")]


def test_the_answer_counts_and_spans_are_the_verdict_rows(grid):
    """Each candidate's sentence: how many cells it wins and loses, and the smallest and largest gap there, as
    verdict.compare gives them on the same files."""
    _, md, _ = grid
    recs = {n: e for r in RUNS for n, e in load_run(r).engines.items()}
    said = _answer(md)
    for cand in ("turbomind", "vllm-marlin"):
        rows = verdict.compare(recs[cand], recs["vllm"], figures="whole", cross_machine=True)
        line = next(s for s in said if s.startswith(f"{cand} (0.") and " against vllm (0.26.0)" in s)
        assert f"(output throughput, {len(rows)} cells)" in line
        for word in ("faster", "slower"):
            pcts = [r.gap.pct for r in rows if r.gap.word == word]
            if pcts:
                lo, hi = min(pcts, key=abs), max(pcts, key=abs)
                want = f"{word} at {len(pcts)} by {lo:+.1f}%" + (f" to {hi:+.1f}%" if lo != hi else "")
                assert want in line, (want, line)
            else:
                assert f"{word} at none" in line
    # turbomind is slower than vllm at every cell with an interval on these files
    assert next(s for s in said if s.startswith("turbomind")).count("faster at none") == 1
    assert any(s.startswith("Fastest of the 3 engines at each of 6 cells") for s in said)
    sure = next(s for s in said if s.startswith("How sure:"))
    assert "16 whole points" in sure and "left out whole" in sure and "vllm 2 of 8; vllm-marlin 2 of 4" in sure


def _key(c: int, in_len: int) -> LoadKey:
    return LoadKey(concurrency=c, input_len=in_len, output_len=256)


def test_where_names_a_set_of_cells_shortly():
    grid = [_key(c, n) for n in (128, 1024) for c in (1, 64, 256)]
    assert answer.where({_key(1, 128), _key(1, 1024)}, grid) == "c=1 at every workload"
    assert answer.where({_key(64, 1024), _key(256, 1024)}, grid) == "c=64 and c=256 at in=1024 out=256"
    assert answer.where({_key(c, 1024) for c in (1, 64, 256)}, grid) == "in=1024 out=256 at every load"
    assert answer.where({_key(1, 128), _key(1, 1024), _key(64, 1024)}, grid) == \
        "c=1 at every workload; c=64 at in=1024 out=256"
    one = [_key(c, 128) for c in (1, 64)]
    assert answer.where({_key(1, 128)}, one) == "c=1 at in=128 out=256"
    assert answer.span([-14.1, -46.1, -30.0]) == "-14.1% to -46.1%" and answer.span([3.0]) == "+3.0%"
    assert answer.span([12.5, -38.4, -29.9]) == "-38.4% to +12.5%"


def test_an_engine_keeps_its_colour_in_every_panel(monkeypatch, tmp_path):
    figs = []
    monkeypatch.setattr(charts, "_save", lambda fig, path: figs.append(fig) or path.name)
    colours = charts.Colours(["turbomind", "vllm", "vllm-marlin"])
    assert len(set(colours.map.values())) == 3
    panels = {wl: {e: [(1, 10.0 + i, 9.0 + i, 11.0 + i), (64, 20.0 + i, 19.0 + i, 21.0 + i)] for i, e in enumerate(order)}
              for wl, order in (("in=128", ["vllm-marlin", "turbomind", "vllm"]), ("in=1024", ["turbomind", "vllm"]))}
    charts.engine_panels(tmp_path / "t.png", panels, colours, "concurrency", "tok/s", "t")
    axes = [ax for ax in figs[0].axes if ax.lines]
    assert len(axes) == 2  # a panel per workload cell
    for ax in axes:
        for line in ax.lines:
            if not line.get_label().startswith("_"):
                assert to_hex(line.get_color()) == colours[line.get_label()].lower()
    # kernel backends take the colour of the engine that runs them, and stay distinct from each other
    back = colours.derived(["cublas", "marlin", "machete", "turbomind"], {"machete": "vllm", "marlin": "vllm-marlin"})
    assert back["machete"] == colours["vllm"] and back["marlin"] == colours["vllm-marlin"]
    assert back["turbomind"] == colours["turbomind"] and len(set(back.map.values())) == 4


def test_a_heatmap_cell_takes_the_colour_of_the_engine_ahead():
    a, b = "#0072B2", "#D55E00"
    ahead, behind = map_charts.cell_colour(20.0, True, 40.0, a, b), map_charts.cell_colour(-20.0, True, 40.0, a, b)
    assert ahead == map_charts._tint(a, 0.35 + 0.65 * 0.5) and behind == map_charts._tint(b, 0.35 + 0.65 * 0.5)
    assert map_charts.cell_colour(-20.0, False, 40.0, a, b) == map_charts._tint(b, map_charts.PALE)  # not significant


def test_no_fastest_of_all_where_an_engine_has_no_usable_figure():
    from test_verdict import engine

    from llmcompare.report.answer import leader_sentence

    a = engine("a", [[100.0, 101.0, 99.0], [400.0, 401.0, 399.0]])
    b = engine("b", [[50.0, 51.0, 49.0], [200.0, 201.0, 199.0]])
    c = engine("c", [[20.0, 21.0, 19.0], [100.0, 101.0, 99.0]])
    for p in c.points:
        if p.index == 1:
            p.status = "failed"  # c has nothing usable at c=8: a leads b there, but not "all the others"
    s = leader_sentence({n: n for n in "abc"}, {"a": a, "b": b, "c": c}, "whole")
    assert s.startswith("Fastest of the 3 engines at each of 2 cells") and "a at 1, by" in s and "(c=1)" in s
    assert "not every engine has a usable figure at 1 (c=8): no fastest of all there" in s
