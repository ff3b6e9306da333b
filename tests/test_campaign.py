"""Campaign bookkeeping on a committed H200 run (tests/data/h200-grid-vllm: the run.json of
reports/h200-grid/qwen-awq-h200-20261202-212514, vLLM, 8 load points x 3 repeats, some untrusted attempts): what a
resume still has to do, which scenario changes it accepts, and the time estimate from the run's measured durations."""

import copy
import json
import math
from pathlib import Path

import pytest

from llmcompare.errors import ScenarioError
from llmcompare.scenario.loader import validate
from llmcompare.schema.build import build
from llmcompare.schema.run import ServeRun
from llmcompare.schema.scenario import Scenario
from llmcompare.serve import campaign, measure

RUN = Path(__file__).resolve().parent / "data/h200-grid-vllm"


def saved() -> ServeRun:
    return ServeRun.from_json(json.loads((RUN / "run.json").read_text()))


def scenario(**change) -> Scenario:
    d = copy.deepcopy(saved().scenario)
    for dotted, v in change.items():
        top, key = dotted.split("__")
        d[top][key] = v
    return validate(build(Scenario, d))


def test_a_finished_run_has_nothing_to_do():
    s, run = scenario(), saved()
    plan = campaign.stable_plan(measure.run_plan(s), run)
    todo = campaign.cells_to_do(s, plan, ["vllm"], run)
    assert todo == {"vllm": {}}
    # untrusted cells (c=64 in=512, repeats 1 and 2: the runner gave up on them) only with --redo untrusted
    redo = campaign.cells_to_do(s, plan, ["vllm"], run, "untrusted")
    assert redo == {"vllm": {(6, 0): 3, (6, 1): 3}}  # new attempts numbered after the two on file
    assert len(campaign.cells_to_do(s, plan, ["vllm"], run, "all")["vllm"]) == 24


def test_interrupted_and_missing_cells_are_to_do():
    run = saved()
    pts = run.engines["vllm"].points
    pts[-1].status, pts[-1].metrics = "interrupted", None  # c=256 in=512 repeat 3, cut by Ctrl-C
    del pts[-2]  # c=64 in=512 repeat 3: never started
    pts[0].status = "running"  # a crash leaves 'running' behind
    s = scenario()
    plan = campaign.stable_plan(measure.run_plan(s), run)
    todo = campaign.cells_to_do(s, plan, ["vllm", "vllm-marlin"], run)
    assert todo["vllm"] == {(0, 0): 2, (6, 2): 1, (7, 2): 2}
    assert len(todo["vllm-marlin"]) == 24  # an engine of the scenario not in the run yet: every cell


def test_added_cells_keep_the_old_indices():
    s, run = scenario(load__concurrency=[1, 16, 32, 64, 256], workload__input_len=[1024, 512, 2048]), saved()
    plan = campaign.stable_plan(measure.run_plan(s), run)
    idx = {p.key.label: p.index for p in plan}
    assert idx["c=1 in=1024 out=256"] == 0 and idx["c=256 in=512 out=256"] == 7  # as on file
    assert sorted(idx[k] for k in idx if "c=32" in k or "in=2048" in k) == list(range(8, 15))
    todo = campaign.cells_to_do(s, plan, ["vllm"], run)["vllm"]
    assert len(todo) == 7 * 3 and all(i >= 8 for i, _ in todo)


@pytest.mark.parametrize("change, named", [
    ({"load__repeats": 5}, "load.repeats: 3 on file, 5 now"),
    ({"workload__num_prompts": 10}, "workload.num_prompts: 4 on file, 10 now"),
    ({"load__concurrency": [1, 16]}, "load.concurrency: [64, 256] on file but not in the scenario"),
])
def test_a_changed_scenario_is_refused_naming_the_field(change, named):
    with pytest.raises(ScenarioError) as e:
        campaign.resume_check(scenario(**change), saved(), str(RUN))
    assert named in str(e.value) and "may only add" in str(e.value)


def test_an_engine_whose_definition_changed_is_refused():
    s = scenario()
    s.engines[3].args = [*s.engines[3].args, "--max-num-seqs", "8"]
    with pytest.raises(ScenarioError, match=r"engines\[vllm\]: changed"):
        campaign.resume_check(s, saved(), str(RUN))


def test_the_estimate_uses_the_runs_measured_durations(capsys):
    run = saved()
    s = scenario(load__concurrency=[1, 16, 32, 64, 256])
    plan = campaign.stable_plan(measure.run_plan(s), run)
    todo = campaign.cells_to_do(s, plan, ["vllm"], run, "untrusted")
    camp = campaign.Campaign(plan, todo)
    prog, line = campaign.estimate(s, camp, run)
    # c=64 in=512 x 2 (measured: mean of its attempts on file), c=32 x 2 cells x 3 repeats (rough guesses)
    assert "8 cells to do" in line and "2 from this run's measured durations, 6 a rough guess" in line
    c64 = [p.metrics.duration_s for p in run.engines["vllm"].points if p.label == "c=64 in=512 out=256"]
    assert prog.guess_s[("vllm", 6, 0)] == (pytest.approx(sum(c64) / len(c64)), True)
    assert prog.startups_s == pytest.approx(run.engines["vllm"].ready_s)  # one start, its ready_s on file
    assert "rough: 30 ms per output token" in line
    # an engine this run has not started yet: its kind's rough start-up (vLLM compiles and captures graphs)
    todo_tm = campaign.cells_to_do(s, plan, ["vllm", "turbomind"], run, "untrusted")
    run.engines.pop("turbomind", None)
    prog2, line2 = campaign.estimate(s, campaign.Campaign(plan, todo_tm), run)
    assert prog2.startups_s == pytest.approx(run.engines["vllm"].ready_s + 30.0)
    assert "(1 a rough guess by engine kind)" in line2
    # as cells finish, the rough guesses are scaled by what the finished rough ones took
    (rough_key,) = [k for k, (g, m) in prog.guess_s.items() if not m][:1]
    g = prog.guess_s[rough_key][0]
    before = prog.left_s()
    prog.cell_done(*rough_key, took_s=2 * g)
    assert prog.left_s() == pytest.approx(2 * (before - g) - sum(g for g, m in prog.guess_s.values() if m))
    assert "progress: 1 of 8 cells done" in capsys.readouterr().err


def test_resume_errors_name_the_flag(tmp_path, capsys):
    from llmcompare import cli

    with pytest.raises(ScenarioError, match=r"--resume .*nothing: .*no run.json here"):
        campaign.saved_run(str(tmp_path / "nothing"), scenario())
    assert cli.main(["serve-bench", "demo", "--redo", "all"]) == 2
    assert "--redo all: it re-measures cells of a run being resumed; give --resume RUN_DIR" in capsys.readouterr().err


def test_a_converging_point_is_estimated_at_its_max_s_whatever_its_request_count():
    """load.converge stops a point at max_s at the latest: 2048 ShareGPT-like prompts at c=8 once gave 34 min a cell
    (every prompt's waves) where each would take at most 30 s plus its drain."""
    s = scenario(workload__dataset="synthetic-sharegpt", workload__input_len=512, workload__output_len=256,
                 workload__num_prompts=2048,
                 workload__prompts_per_concurrency=0, load__concurrency=[8],
                 load__converge={"rel_halfwidth": 0.02, "max_s": 30})
    (p,) = measure.run_plan(s)
    one = 512 * 8 / campaign.ROUGH_PREFILL_TOK_PER_S + 256 * campaign.ROUGH_TPOT_S  # ShareGPT-like: no fixed lengths
    assert campaign._rough_s(p, s) == pytest.approx(30 + one)
    assert math.ceil(p.num_prompts / 8) * one > 30 * 60  # without the rule: over half an hour


def test_the_estimate_counts_the_profiled_passes_at_their_points_time_per_wave():
    """A pass sends pass_requests() requests: the point's own count, or profile.waves x c (session 18's c=512 passes
    were 4 of the points' 10 waves). The passes are in the total, not in the load left."""
    run = saved()
    s = scenario(load__concurrency=[64])
    s.profile.points = [64]
    plan = campaign.stable_plan(measure.run_plan(s), run)
    todo = campaign.cells_to_do(s, plan, ["vllm"], run, "all")
    camp = campaign.Campaign(plan, todo)
    prog, line = campaign.estimate(s, camp, run)
    # 2 cells (in=1024, in=512) x 3 repeats on file, 3-wave points (192 requests at c=64): each pass 4 waves (the
    # floor), 4/3 of its point's measured mean
    (p,) = {q.num_prompts for q in plan if q.key.concurrency == 64}
    assert p == 192
    want = sum(prog.guess_s[("vllm", idx, 0)][0] * 4 / 3 for idx in {i for i, _ in todo["vllm"]})
    assert f"+ profiled passes {campaign._hms(want)} = about {campaign._hms(prog.left_s() + prog.startups_s + want)}" \
        in line
    s.profile.waves = 12  # 12 waves: 4 times the points' length
    assert f"+ profiled passes {campaign._hms(3 * want)}" in campaign.estimate(s, camp, run)[1]
    s.profile.points = []
    assert "profiled passes" not in campaign.estimate(s, camp, run)[1]
