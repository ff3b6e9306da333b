"""shared-prefix's prefix_len and num_prefixes as grid axes: the plan and its load keys, result files from
before the axes (copies in tests/data of H200 runs under reports/h200-grid and reports/h200-map, and a shared-prefix
run as older code wrote it), a resume that adds prefix values, the time estimate, and the report's win map, Pareto
panels and per-point prefix-cache column. No server."""

import copy
import json
import shutil
from pathlib import Path

import pytest

from llmcompare.analysis import verdict
from llmcompare.errors import ScenarioError
from llmcompare.report import win_map
from llmcompare.report.build import build_report
from llmcompare.scenario.loader import validate
from llmcompare.schema.build import build
from llmcompare.schema.files import load_run
from llmcompare.schema.run import LoadKey, ServeRun
from llmcompare.schema.scenario import Scenario
from llmcompare.serve import campaign, measure

DATA = Path(__file__).resolve().parent / "data"  # the copies: tests/data/README.md
# reports/h200-grid/qwen-awq-h200-20261202-212514: vLLM, in=[1024, 512] x c=[1, 16, 64, 256] x 3 repeats
VLLM = DATA / "h200-grid-vllm"
TURBOMIND = DATA / "h200-grid-turbomind"  # reports/h200-grid/qwen-awq-h200-20261202-200831: TurboMind, the same grid
# run.json files as the code before the prefix axes wrote them (serve-bench/3): the two grid runs (one engine each,
# retried attempts), a map run with profiled passes and a resume (reports/h200-map/qwen-map-h200-20261203-070613),
# and a kernel-bench run as one sits beside serve runs
OLD_RUNS = [VLLM, TURBOMIND, DATA / "h200-map-profiles", DATA / "h200-versions-kernel-bench"]


def shared_prefix(prefix_len, num_prefixes=4, input_len=256, output_len=128, **load) -> Scenario:
    return validate(build(Scenario, {
        "model": {"path": "/m"}, "engines": [{"name": "vllm", "kind": "vllm"}],
        "workload": {"dataset": "shared-prefix", "prefix_len": prefix_len, "num_prefixes": num_prefixes,
                     "input_len": input_len, "output_len": output_len, "num_prompts": 4},
        "load": load or {"concurrency": [1, 64]}}))


def test_a_list_sweeps_and_every_cell_is_a_load_key():
    s = shared_prefix([512, 1024], [1, 4])
    labels = [(p.index, p.key.label) for p in measure.run_plan(s)]
    assert labels == [(0, "c=1 in=256 out=128 prefix=512x1"), (1, "c=64 in=256 out=128 prefix=512x1"),
                      (2, "c=1 in=256 out=128 prefix=512x4"), (3, "c=64 in=256 out=128 prefix=512x4"),
                      (4, "c=1 in=256 out=128 prefix=1024x1"), (5, "c=64 in=256 out=128 prefix=1024x1"),
                      (6, "c=1 in=256 out=128 prefix=1024x4"), (7, "c=64 in=256 out=128 prefix=1024x4")]
    # a scalar (as before): one cell, its prefix in the label
    assert [p.key.label for p in measure.run_plan(shared_prefix(1024))] == [
        "c=1 in=256 out=128 prefix=1024x4", "c=64 in=256 out=128 prefix=1024x4"]


def test_load_key_identity_sort_and_label():
    a = LoadKey(concurrency=64, input_len=256, output_len=128, prefix_len=1024, num_prefixes=4)
    b = LoadKey(concurrency=64, input_len=256, output_len=128, prefix_len=1024, num_prefixes=1)
    c = LoadKey(concurrency=64, input_len=256, output_len=128, prefix_len=512, num_prefixes=4)
    assert a.label == "c=64 in=256 out=128 prefix=1024x4" and a.workload_label == "in=256 out=128 prefix=1024x4"
    assert len({a, b, c, LoadKey(concurrency=64, input_len=256, output_len=128)}) == 4  # none merged
    assert a == LoadKey(concurrency=64, input_len=256, output_len=128, prefix_len=1024, num_prefixes=4)
    assert sorted([a, b, c], key=verdict.point_order) == [c, b, a]
    plain = LoadKey(concurrency=1, input_len=512, output_len=256)
    assert plain.label == "c=1 in=512 out=256" and plain.workload == (512, 256, 0, 0)
    assert LoadKey(concurrency=1).label == "c=1"  # a file dataset


def test_old_result_files_load_with_the_labels_they_were_written_with():
    """run.json keeps each point's label as the code that wrote it said it: the keys read now say the same."""
    for run_dir in [d / "run.json" for d in OLD_RUNS]:
        written = json.loads(run_dir.read_text())
        run = load_run(run_dir.parent)
        if not isinstance(run, ServeRun):  # a kernel-bench run beside the serve runs: no load points
            continue
        for name, e in run.engines.items():
            stored = [p["label"] for p in written["engines"][name]["points"]]
            assert stored and [p.label for p in e.points] == stored, run_dir
            assert all(p.prefix_len is None and p.num_prefixes is None for p in e.points)
            old_profiles = written["engines"][name].get("profiles", [])
            assert [p.label for p in e.profiles] == [p["label"] for p in old_profiles]


def old_shared_prefix_run(tmp_path: Path, src: Path = VLLM, prefix_len: int = 1024) -> Path:
    """A shared-prefix run as the code before the prefix axes wrote it: the scenario's prefix_len and
    num_prefixes single values, the points without them (the h200-grid run's figures, relabelled)."""
    d = json.loads((src / "run.json").read_text())
    s = shared_prefix(prefix_len, 4, [1024, 512], 256, concurrency=[1, 16, 64, 256], repeats=3)
    d["scenario"] = s.to_dict()
    assert all("prefix_len" not in p for e in d["engines"].values() for p in e["points"])
    out = tmp_path / src.name
    out.mkdir()
    (out / "run.json").write_text(json.dumps(d))
    return out


def test_an_old_shared_prefix_run_takes_its_prefix_from_the_scenario(tmp_path):
    run = load_run(old_shared_prefix_run(tmp_path))
    pts = run.engines["vllm"].points
    assert {(p.prefix_len, p.num_prefixes) for p in pts} == {(1024, 4)}
    assert pts[0].label == "c=1 in=1024 out=256 prefix=1024x4"
    # the random runs are left as they were (above); so is the dict handed in
    d = json.loads((tmp_path / VLLM.name / "run.json").read_text())
    ServeRun.from_json(d)
    assert "prefix_len" not in d["engines"]["vllm"]["points"][0]


def test_a_resume_may_add_prefix_values_and_keeps_the_indices(tmp_path):
    saved = load_run(old_shared_prefix_run(tmp_path))
    d = copy.deepcopy(saved.scenario)
    d["workload"]["prefix_len"], d["workload"]["num_prefixes"] = [1024, 2048], [4, 8]
    s = validate(build(Scenario, d))
    campaign.resume_check(s, saved, "run")  # adding values is accepted
    plan = campaign.stable_plan(measure.run_plan(s), saved)
    idx = {p.key.label: p.index for p in plan}
    assert idx["c=1 in=1024 out=256 prefix=1024x4"] == 0 and idx["c=256 in=512 out=256 prefix=1024x4"] == 7
    assert len(plan) == 32 and sorted(idx.values()) == list(range(32))
    todo = campaign.cells_to_do(s, plan, ["vllm"], saved)["vllm"]
    assert len(todo) == 24 * 3 and all(i >= 8 for i, _ in todo)  # the cells on file are done
    d["workload"]["prefix_len"] = [2048]
    with pytest.raises(ScenarioError, match=r"workload\.prefix_len: \[1024\] on file but not in the scenario"):
        campaign.resume_check(validate(build(Scenario, d)), saved, "run")


def test_the_rough_estimate_counts_the_prefix_as_prompt_tokens():
    s = shared_prefix([1000, 9000], 1, concurrency=[10])
    short, long_ = measure.run_plan(s)
    # one request: prompt tokens x c at 10,000 tok/s + 128 x 30 ms; 4 prompts at c=10: one wave
    assert campaign._rough_s(short, s) == pytest.approx((1000 + 256) * 10 / 10000 + 128 * 0.030)
    assert campaign._rough_s(long_, s) == pytest.approx((9000 + 256) * 10 / 10000 + 128 * 0.030)


def two_prefix_run(tmp_path: Path, src: Path, hit: dict[int, float]) -> Path:
    """The h200-grid run as a shared-prefix grid: its in=1024 cell becomes in=256 + prefix 768 x 4, its in=512
    cell in=256 + prefix 256 x 4 (the same in and out: the cells differ only in the prefix); the prefix-cache
    hit rate per prefix length from `hit`."""
    d = json.loads((src / "run.json").read_text())
    d["scenario"] = shared_prefix([768, 256], 4, 256, 256, concurrency=[1, 16, 64, 256], repeats=3).to_dict()
    for e in d["engines"].values():
        for p in e["points"]:
            p["prefix_len"], p["num_prefixes"], p["input_len"] = p["input_len"] - 256, 4, 256
            rate = hit[p["prefix_len"]]
            p["prefix_cache"] = {"reported": True, "queries_tokens": 1000.0, "hits_tokens": 1000.0 * rate,
                                 "hit_rate": rate}
    out = tmp_path / src.name
    out.mkdir()
    (out / "run.json").write_text(json.dumps(d))
    for f in [*src.glob("*.series.jsonl"), *src.glob("*.requests.jsonl*")]:  # per-second charts, request lines
        shutil.copy(f, out)
    return out


@pytest.fixture(scope="module")
def prefix_report(tmp_path_factory):
    t = tmp_path_factory.mktemp("prefix")
    runs = [two_prefix_run(t, VLLM, {768: 0.75, 256: 0.5}),
            two_prefix_run(t, TURBOMIND, {768: 0.25, 256: 0.125})]
    out = t / "report"
    build_report([str(r) for r in runs], str(out), figures="whole", cross_machine=True)
    return out, [load_run(r) for r in runs]


def test_the_map_keeps_cells_that_differ_only_in_the_prefix_apart(prefix_report):
    out, (vllm, tm) = prefix_report
    rows = verdict.compare(tm.engines["turbomind"], vllm.engines["vllm"], figures="whole", cross_machine=True)
    wm = win_map.win_map("turbomind", "vllm", rows)
    assert wm.rows == ["in=256 out=256 prefix=256x4", "in=256 out=256 prefix=768x4"]
    # every cell with a verdict is in the map; the rest are the points left out whole (an untrusted first attempt)
    gone = set(verdict.left_out(tm.engines["turbomind"])) | set(verdict.left_out(vllm.engines["vllm"]))
    assert len(wm.cells) == len(rows) == 8 - len(gone) and len(gone) == 2
    assert {r.key for r in rows}.isdisjoint(gone)
    for (r, c), row in wm.cells.items():  # each cell holds the row of its own prefix
        assert row.key.workload_label == wm.rows[r] and row.key.load_label == wm.cols[c]
    panels = win_map.pareto_points(vllm.engines["vllm"])
    usable = verdict.usable_points(vllm.engines["vllm"])
    assert sorted(panels) == wm.rows
    assert all(len(v) == sum(k.workload_label == row for k in usable) for row, v in panels.items())
    md = (out / "report.md").read_text()
    assert "| in=256 out=256 prefix=768x4 | vllm | c=1: " in md
    assert "| in=256 out=256 prefix=256x4 | vllm | c=1: " in md
    assert {"map_vllm_vs_turbomind.png", "pareto.png"} <= {p.name for p in out.iterdir()}


def test_the_prefix_cache_hit_rate_stays_per_cell(prefix_report):
    out, _ = prefix_report
    md = (out / "report.md").read_text()
    lines = md.splitlines()
    i = next(i for i, ln in enumerate(lines) if ln.startswith("| engine | point | repeat |"))
    head = [c.strip() for c in lines[i].strip("|").split("|")]
    col = head.index("prefix cache hit %")
    seen = {}
    for ln in lines[i + 2:]:
        if not ln.startswith("|"):
            break
        cells = [c.strip() for c in ln.strip("|").split("|")]
        seen.setdefault((cells[0], cells[1].rsplit("prefix=", 1)[1]), set()).add(cells[col])
    assert seen[("vllm", "768x4")] == {"75.0"} and seen[("vllm", "256x4")] == {"50.0"}
    assert seen[("turbomind", "768x4")] == {"25.0"} and seen[("turbomind", "256x4")] == {"12.5"}


def test_a_capacity_search_wants_one_prefix_cell():
    def with_capacity(prefix_len) -> Scenario:
        d = {**shared_prefix(prefix_len).to_dict(), "load": {"capacity": {}}, "slo": {"ttft_ms": 100}}
        return validate(build(Scenario, d))

    with pytest.raises(ScenarioError, match=r"load\.capacity: searches one workload cell; workload gives 2 .*prefix_len"):
        with_capacity([512, 1024])
    s = with_capacity(512)
    assert s.workload.cells() == [(256, 128, 512, 4)]
