#!/usr/bin/env python3
"""What the measurement costs: does sampling the engine's Prometheus /metrics (every load.metrics_interval_s)
change its throughput?

One server start; the scenario's load points measured with sampling on and off, interleaved (on/off in the first
pair, off/on in the next, ...), PAIRS times each, with different prompts per arm (so a prefix cache cannot favour
the second). Written as one serve-bench run directory whose two engine records, `<engine>+metrics` and
`<engine>-metrics`, share that one server; `llmcompare report RUN --baseline <engine>-metrics` then states the
cost as a gap with its 95% interval (across the pairs).

  python scripts/metrics_overhead.py SCENARIO ENGINE [--pairs 3] [--set KEY=VALUE...] [--output-dir D]
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from llmcompare import scenario  # noqa: E402
from llmcompare.schema import scenario as scenario_schema  # noqa: E402
from llmcompare.schema.files import RunFile, new_run_dir  # noqa: E402
from llmcompare.schema.run import ServeRun, now  # noqa: E402
from llmcompare.serve import measure, runner  # noqa: E402
from llmcompare.setup.host import host_info  # noqa: E402
from llmcompare.setup.model import prepare_model  # noqa: E402
from llmcompare.workload.prompts import Prompts, load_tokenizer  # noqa: E402


def arms(s: scenario_schema.Scenario, e: scenario_schema.Engine) -> list[tuple[scenario_schema.Scenario, scenario_schema.Engine]]:
    """(scenario, engine) of the sampling-on arm and the sampling-off arm; the off arm gets other prompts."""
    on, off = copy.deepcopy(s), copy.deepcopy(s)
    off.load.metrics_interval_s = 0.0
    off.workload.seed = s.workload.seed + 1
    return [(on, dataclasses.replace(e, name=f"{e.name}+metrics")), (off, dataclasses.replace(e, name=f"{e.name}-metrics"))]


def main(argv: list[str] | None = None) -> Path:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("scenario")
    ap.add_argument("engine")
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE")
    ap.add_argument("--output-dir")
    a = ap.parse_args(argv)
    over = scenario.parse_set(a.set)
    if a.output_dir:
        over["output_dir"] = a.output_dir
    s = scenario.load(a.scenario, over)
    if not s.load.metrics_interval_s:
        raise SystemExit("error: load.metrics_interval_s is 0: nothing to compare (set it to the period to cost)")
    e = s.engine(a.engine)
    s.load.repeats = a.pairs
    model_path = prepare_model(s)
    tok = load_tokenizer(s.model.tokenizer or model_path)
    run = ServeRun(created_at=now(), argv=sys.argv, host=host_info(), scenario=s.to_dict())
    rf = RunFile(new_run_dir(s.output_dir, f"{s.name}-metrics-overhead"), run)
    print(f"run directory: {rf.dir}", file=sys.stderr)
    pair = arms(s, e)
    try:
        with runner.launched(s, rf, e, model_path) as (srv, name, facts):
            for r in range(a.pairs):
                for s_arm, e_arm in pair if r % 2 == 0 else pair[::-1]:
                    _share(rf, rf.run.engines[e.name], e_arm.name)
                    measure.bench(s_arm, rf, e_arm, srv.base_url, name, Prompts(s_arm.workload, tok), {}, [r],
                                  abort=srv.death, log_len=facts.max_model_len)
        for _, e_arm in pair:  # the arms are the results; the server's own record lives on in theirs
            _share(rf, rf.run.engines[e.name], e_arm.name).status = "complete"
            rf.save()
        del rf.run.engines[e.name]
        rf.finish("complete")
    except BaseException as ex:
        rf.finish("interrupted" if isinstance(ex, KeyboardInterrupt) else "failed", str(ex) or type(ex).__name__)
        raise
    print(rf.dir)
    return rf.dir


def _share(rf: RunFile, server, arm: str):
    """The arm's record takes what both arms share from the one server's record (saved); returns it."""
    rec = rf.record(arm)
    for k in ("kind", "command", "env", "version", "base_url", "log", "pid", "ready_s", "starts", "served_model",
              "kernels", "log_notes", "machine"):
        setattr(rec, k, getattr(server, k))
    rf.save()
    return rec


if __name__ == "__main__":
    main()
