"""Checks run before anything is made or started: a scenario that would fail later (after minutes of a server's
start-up on a GPU) fails here, as bad input, and leaves nothing on disk.

`preflight(scenario, engine_names)` checks, for the engines that will run: their names, every ${VAR} of the
fields that are expanded, the output directory, each engine's program (and that its python has the engine),
the model path (or how it is to be made), the tokenizer, and the dataset, parsed in full. It starts no server
and writes nothing; it raises ScenarioError naming the field, the value and what is valid. The tokenizer and the
dataset it loads are kept for the run to reuse (workload.load_tokenizer and Prompts cache them).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from llmcompare.engines import launch, registry
from llmcompare.engines.server import port_in_use, served_models
from llmcompare.errors import ScenarioError
from llmcompare.expand import resolve
from llmcompare.models import checkpoint
from llmcompare.schema.build import check_name
from llmcompare.schema.scenario import GENERATED, Engine, Scenario
from llmcompare.setup import hub, model
from llmcompare.workload.prompts import Prompts, load_tokenizer, read_records


def chosen_engines(s: Scenario, engine_names: list[str] | None = None) -> list[tuple[int, Engine]]:
    """(index in the scenario, engine) of the engines a run will use: `engine_names`, or all."""
    if not engine_names:
        return list(enumerate(s.engines))
    for n in engine_names:
        s.engine(n)  # an unknown name is an error listing the valid ones
    return [(i, e) for i, e in enumerate(s.engines) if e.name in engine_names]


def _writable_dir(where: str, value: str, path: Path, what: str) -> None:
    """`path` exists and is a directory this process can create entries in (tried, not guessed: root ignores
    permission bits, a read-only file system does not)."""
    if not path.is_dir():
        raise ScenarioError(f"{where}: {value!r}: {path} is not a directory, so {what} cannot be made there; give a "
                            "directory (it is created if missing)")
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".llmcompare-check-", dir=path))
    except OSError as e:
        raise ScenarioError(f"{where}: {value!r}: cannot write in {path} ({e.strerror}), so {what} cannot be made "
                            "there; give a writable directory") from None


def _nearest_existing(p: Path) -> Path:
    while not (p.exists() or p.is_symlink()) and p.parent != p:
        p = p.parent
    return p


def check_output_dir(output_dir: str, where: str = "output_dir") -> None:
    """A run directory can be created under `output_dir`: it is a writable directory, or it can be made (its
    nearest existing ancestor is a writable directory). Creates nothing (a probe directory is made and removed)."""
    if not output_dir:
        raise ScenarioError(f"{where}: empty; give the directory run directories go in (e.g. runs)")
    p = Path(output_dir)
    _writable_dir(where, output_dir, _nearest_existing(p), "the run directory")


def _resolve_program(where: str, prog: str, env: dict[str, str]) -> str:
    if "/" in prog:
        path = prog
    else:  # as subprocess does: the PATH of the environment the server gets
        path = shutil.which(prog, path=env.get("PATH", os.defpath))
        if path is None:
            raise ScenarioError(f"{where}: {prog!r} is not on PATH; give its full path")
    if not os.path.isfile(path):
        raise ScenarioError(f"{where}: {prog!r}: {'no such file' if not os.path.exists(path) else 'not a file'}; "
                            "give the engine environment's python (or a command that exists)")
    if not os.access(path, os.X_OK):
        raise ScenarioError(f"{where}: {prog!r} is not executable")
    return path


_HAS_MODULE = "import importlib.util, sys; sys.exit(0 if importlib.util.find_spec(sys.argv[1]) else 3)"


def check_engine(i: int, e: Engine) -> None:
    """The port asked for is free; the program that launches the engine exists and is executable; a python must
    have the engine's package (found, not imported). An already-running server (kind openai) must answer."""
    w = f"engines[{i}]"
    k = registry.kind(e.kind)
    if k.command is None:
        url = (e.base_url or "").rstrip("/")
        if not url.startswith(("http://", "https://")):
            raise ScenarioError(f"{w}.base_url: {e.base_url!r} is not an http:// or https:// URL")
        if not served_models(url):
            raise ScenarioError(f"{w}.base_url: no OpenAI-compatible server answers {url}/v1/models; start it "
                                "first (an engine of kind openai is a server that is already running)")
        return
    if e.port is not None and port_in_use(e.host, e.port):
        raise ScenarioError(f"{w}.port: {e.port} on {e.host} is already in use; free it, or leave the engine's port "
                            "unset to get a free one")
    prog = launch.server_command(e, "MODEL", 1)[3 if e.nice else 0]  # past the `nice -n N` prefix
    field = f"{w}.command[0]" if e.command else f"{w}.venv" if e.venv else f"{w}.python" if e.python else \
        f"{w} (no python, command or venv: the {prog!r} console script)"
    env = {**os.environ, **e.env}
    path = _resolve_program(field, prog, env)
    if (e.python or e.venv) and not e.command and k.module:
        try:
            p = subprocess.run([path, "-c", _HAS_MODULE, k.module], env=env, capture_output=True, text=True,
                               timeout=120)
        except (OSError, subprocess.TimeoutExpired) as ex:
            raise ScenarioError(f"{field}: cannot run {path}: {ex}") from None
        if p.returncode == 3:
            raise ScenarioError(f"{field}: {path} has no {k.module} package (with the engine's env); give the python "
                                f"of an environment where {k.module} is installed")
        if p.returncode != 0:
            raise ScenarioError(f"{field}: {path} does not run: {(p.stderr or p.stdout).strip()[-300:]}")


def check_model(s: Scenario) -> str | None:
    """The model path exists, or model.make can build it there. Returns the tokenizer location to check now
    (None: it is made with the model, or resolved through the hub later)."""
    path, tok, where = s.model.path, s.model.tokenizer or None, model.source(s.model)
    if where != "local":
        if where == "hub":
            return tok if tok and not hub.is_hub_id(tok) else None  # the run resolves hub ids
        if where == "missing":
            raise ScenarioError(f"model.path: {path} does not exist (and model.make is not set to build it)")
        if s.model.make.preset not in checkpoint.PRESETS:
            raise ScenarioError(f"model.make.preset: unknown preset {s.model.make.preset!r}; valid: "
                                f"{', '.join(checkpoint.PRESETS)}")
        _writable_dir("model.path", s.model.path, _nearest_existing(Path(path)), "the model")
        return tok if tok and not hub.is_hub_id(tok) else None
    return path if tok is None else (None if hub.is_hub_id(tok) else tok)


def check_workload(s: Scenario, tokenizer_path: str | None) -> None:
    """The dataset is parsed in full (every line or entry); with a tokenizer, the prompts are built as the run
    will build them (token counts, ShareGPT's length filter, random prompts' vocabulary)."""
    if s.workload.dataset not in GENERATED:
        read_records(s.workload)
    if tokenizer_path is None:
        return
    prompts = Prompts(s.workload, load_tokenizer(tokenizer_path))
    if s.workload.dataset in GENERATED:
        prompts.sample(1, 0)
    else:
        prompts.file_size()


def preflight(s: Scenario, engine_names: list[str] | None = None) -> None:
    """Everything a serve-bench run of `s` (its engines `engine_names`, default all) needs, checked before a model
    is made, a run directory is created or a server is started; raises ScenarioError."""
    chosen = chosen_engines(s, engine_names)
    s = resolve(s, engine_names)  # every ${VAR} of the fields that are expanded: an unset one names its field
    chosen = [(i, s.engines[i]) for i, _ in chosen]
    if s.name:
        check_name("name", s.name)
    for i, e in chosen:
        check_name(f"engines[{i}].name", e.name)
    check_output_dir(s.output_dir)
    tokenizer = check_model(s)
    for i, e in chosen:
        check_engine(i, e)
    check_workload(s, tokenizer)
