"""Tensor parallelism (issue #16): the degree in scenarios, engine flags, the host's GPU topology, per-GPU GEMM
shapes, the all-reduce worker's plan and output, and the communication term of the attribution."""

import copy
import os

import pytest
import yaml

from llmcompare import engines, host, scenario
from llmcompare.scenario import Engine, ScenarioError

BASE = {
    "model": {"path": "/models/x"},
    "engines": [{"name": "v", "kind": "vllm", "python": "/venv/bin/python"},
                {"name": "tm", "kind": "lmdeploy", "python": "/venv/bin/python"},
                {"name": "o", "kind": "openai", "base_url": "http://127.0.0.1:1"}],
    "workload": {"input_len": 16, "output_len": 4, "num_prompts": 2},
    "load": {"concurrency": [1]},
}


def load(tmp_path, **top):
    data = copy.deepcopy(BASE)
    data.update(top)
    f = tmp_path / "s.yaml"
    f.write_text(yaml.safe_dump(data))
    return scenario.load(str(f))


def test_scenario_degree_is_every_engines_unless_it_sets_its_own(tmp_path):
    s = load(tmp_path)
    assert s.tensor_parallel == 1 and [e.tensor_parallel for e in s.engines] == [1, 1, 1]
    assert s.kernel_bench.tensor_parallel == 1
    data = copy.deepcopy(BASE)
    data["engines"][1]["tensor_parallel"] = 4
    s = load(tmp_path, engines=data["engines"], tensor_parallel=2)
    assert [e.tensor_parallel for e in s.engines] == [2, 4, 2]
    assert s.kernel_bench.tensor_parallel == 2  # null: the scenario's
    s = load(tmp_path, tensor_parallel=2, kernel_bench={"tensor_parallel": 8})
    assert s.kernel_bench.tensor_parallel == 8


def test_the_flag_goes_on_each_engines_command_line(tmp_path):
    s = load(tmp_path, tensor_parallel=2)
    v, tm, o = s.engines
    assert engines.server_command(v, "/m", 1)[-2:] == ["--tensor-parallel-size", "2"]
    cmd = engines.server_command(tm, "/m", 1)
    assert cmd[-2:] == ["--tp", "2"] and cmd.count("--tp") == 1
    with pytest.raises(ScenarioError, match="not launched"):  # an already-running server: recorded, nothing passed
        engines.server_command(o, "/m", 1)
    one = Engine(name="v", kind="vllm", command=["vllm"], tensor_parallel=1)
    assert "--tensor-parallel-size" not in engines.server_command(one, "/m", 1)  # degree 1: the engine's default


def test_the_same_flag_in_args_is_kept_once_and_a_different_one_is_an_error(tmp_path):
    data = copy.deepcopy(BASE)
    data["engines"][0]["args"] = ["-tp", "2"]
    data["engines"][1]["args"] = ["--tp=2"]
    s = load(tmp_path, engines=data["engines"], tensor_parallel=2)
    v_cmd, tm_cmd = (engines.server_command(e, "/m", 1) for e in s.engines[:2])
    assert v_cmd[-2:] == ["-tp", "2"] and "--tensor-parallel-size" not in v_cmd
    assert "--tp=2" in tm_cmd and "--tp" not in tm_cmd
    data["engines"][1]["tensor_parallel"] = 4
    with pytest.raises(ScenarioError) as e:
        load(tmp_path, engines=data["engines"], tensor_parallel=2)
    assert str(e.value) == ("s.yaml: engines[1].args: passes --tp 2, but the engine's tensor-parallel degree is 4 "
                            "(engines[1].tensor_parallel); set tensor_parallel: 2 instead and drop --tp from args "
                            "(llmcompare passes --tp)")


def fake_nvidia_smi(tmp_path, topo_rc=0):
    """An nvidia-smi on PATH that answers the two queries host.py makes."""
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    f = bin_ / "nvidia-smi"
    f.write_text("#!/bin/sh\n"
                 'if [ "$1" = topo ]; then printf "\\tGPU0\\tGPU1\\nGPU0\\t X \\tNV18\\nGPU1\\tNV18\\t X \\n"; '
                 f"exit {topo_rc}; fi\n"
                 'echo "NVIDIA H100 80GB HBM3, 570.1, 81559 MiB, 1980 MHz, 2619 MHz, 700.00 W"\n'
                 'echo "NVIDIA H100 80GB HBM3, 570.1, 81559 MiB, 1980 MHz, 2619 MHz, 700.00 W"\n')
    f.chmod(0o755)
    return str(bin_)


def test_host_records_gpu_count_and_topology_for_tensor_parallel_runs(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", fake_nvidia_smi(tmp_path) + os.pathsep + os.environ["PATH"])
    one, two = host.host_info(), host.host_info(tensor_parallel=2)
    assert one["gpu_count"] == 2 and one["gpu_topology"] is None  # degree 1: not asked
    assert two["tensor_parallel"] == 2 and "GPU0\t X \tNV18" in two["gpu_topology"]


def test_host_without_nvidia_smi_or_with_a_failing_one_still_answers(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no nvidia-smi at all
    info = host.host_info(tensor_parallel=4)
    assert info["gpus"] == [] and info["gpu_count"] == 0 and info["gpu_topology"] is None
    monkeypatch.setenv("PATH", fake_nvidia_smi(tmp_path, topo_rc=9) + os.pathsep + "/usr/bin:/bin")
    assert host.host_info(tensor_parallel=2)["gpu_topology"] is None
