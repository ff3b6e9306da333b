"""The device campaigns (scripts/gpu/*campaign*.txt, one shell command a line, run by background.sh) are checked here,
on the CPU, before a device session spends its minutes on them: every `h200.sh serve` line names a shipped scenario,
engines that scenario has, and --set overrides that load and validate. A typo found on the H200 costs a whole turn."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from llmcompare import scenario
from llmcompare.engines.launch import arg_max_len
from llmcompare.scenario.overrides import parse_set
from llmcompare.serve.context_length import check_lengths
from llmcompare.serve.preflight import chosen_engines
from llmcompare.workload.prompts import Prompts

ROOT = Path(__file__).resolve().parents[1]
CAMPAIGNS = sorted((ROOT / "scripts/gpu").glob("*campaign*.txt"))


def serve_lines(path: Path) -> list[tuple[int, str]]:
    return [(i, line) for i, line in enumerate(path.read_text().splitlines(), 1)
            if "h200.sh serve" in line and not line.lstrip().startswith("#")]


def pop_env(words: list[str]) -> dict[str, str]:
    """The leading NAME=VALUE words of a command line, taken off `words`."""
    env = {}
    while words and "=" in words[0] and not words[0].startswith("-"):
        k, v = words.pop(0).split("=", 1)
        env[k] = v
    return env


def parse_serve(line: str) -> tuple[str, list[str], list[str]]:
    """(scenario, engines, --set items) of `[SCENARIO=x] bash scripts/gpu/h200.sh serve ENGINE... [--set K=V...]`."""
    words = shlex.split(line)
    env = pop_env(words)
    i = words.index("serve")
    rest = words[i + 1:]
    engines = rest[: rest.index("--set")] if "--set" in rest else rest
    sets = rest[rest.index("--set") + 1:] if "--set" in rest else []
    return env.get("SCENARIO", "qwen-awq-h200"), engines, sets


def test_there_are_campaigns():
    assert CAMPAIGNS, "scripts/gpu holds no *campaign*.txt"
    assert sum(len(serve_lines(p)) for p in CAMPAIGNS) >= 5  # the parser finds them (a format change would hide them)


@pytest.mark.parametrize("path", CAMPAIGNS, ids=lambda p: p.name)
def test_every_serve_line_loads(path):
    for lineno, line in serve_lines(path):
        name, engines, sets = parse_serve(line)
        where = f"{path.name}:{lineno}"
        assert engines, f"{where}: no engine named"
        s = scenario.load(name, {**parse_set(sets), "output_dir": "/tmp/llmc/runs"})
        chosen = chosen_engines(s, engines)  # an engine the scenario lacks is an error naming the valid ones
        if s.workload.dataset in ("random", "shared-prefix", "synthetic-sharegpt"):  # no file, no tokenizer read
            for _, e in chosen:  # every request fits each engine's context, less what the engine keeps (SGLang: 2)
                check_lengths(e, *arg_max_len(e), s, Prompts(s.workload, None))


def kernels_lines(path: Path) -> list[tuple[int, str]]:
    return [(i, line) for i, line in enumerate(path.read_text().splitlines(), 1)
            if "h200.sh kernels" in line and not line.lstrip().startswith("#")]


@pytest.mark.parametrize("path", [p for p in CAMPAIGNS if kernels_lines(p)], ids=lambda p: p.name)
def test_every_kernels_line_parses_and_loads(path):
    """`h200.sh kernels ARGS` runs `llmcompare kernel-bench $SCENARIO --output-dir $OUT ARGS`: the arguments parse,
    the backends and M values validate against the scenario (an unknown backend names the valid ones)."""
    from llmcompare import cli

    for lineno, line in kernels_lines(path):
        words = shlex.split(line.split("&&")[-1].replace("$LLMC_PY_SGLANG", "/py"))  # after `source env.sh &&`
        name = pop_env(words).get("SCENARIO", "qwen-awq-h200")  # h200.sh's default
        args = words[words.index("kernels") + 1:]
        a = cli.parser().parse_args(["kernel-bench", name, "--output-dir", "/tmp/llmc/runs", *args])
        s = cli.kernel_bench_scenario(a)
        assert s.kernel_bench.backends and s.kernel_bench.m, f"{path.name}:{lineno}"


def test_parse_serve_reads_a_campaign_line():
    name, engines, sets = parse_serve("SCENARIO=converge-h200 bash scripts/gpu/h200.sh serve turbomind vllm "
                                      "--set 'load.concurrency=[512]' 'profile.points=[512]'")
    assert (name, engines, sets) == ("converge-h200", ["turbomind", "vllm"],
                                     ["load.concurrency=[512]", "profile.points=[512]"])


def test_a_bad_override_in_a_campaign_would_fail():
    from llmcompare.errors import ScenarioError

    with pytest.raises(ScenarioError):
        scenario.load("converge-h200", parse_set(["load.concurency=[512]"]))


def test_wait_brings_back_the_runs_and_new_sglang_jit_modules_once(tmp_path):
    """background.sh `wait` on a finished campaign: every run packed into $OUT, and SGLang's JIT modules (compiled on
    the host into the bundle's TVM_FFI_CACHE_DIR) packed once, for the next bundle's --jit-cache."""
    import subprocess
    import tarfile

    root, out = tmp_path / "llmc", tmp_path / "out"
    (root / "bg").mkdir(parents=True)
    (root / "bg/done").write_text("")
    (root / "bg/log").write_text("== 00:00:00 start: x\n== 00:00:01 exit 0: x\n")
    (root / "runs/run-1").mkdir(parents=True)
    (root / "runs/run-1/run.json").write_text("{}")
    mod = root / "jit/tvm-ffi/sgl_kernel_jit_m__arch_9.0__tvmffi_0.1.11"
    mod.mkdir(parents=True)
    (mod / "sgl_kernel_jit_m.so").write_text("elf")
    (mod / "build.ninja").write_text("")
    env = {"PATH": "/usr/bin:/bin", "LLMC_ROOT": str(root), "HOME": str(tmp_path / "home")}

    def wait() -> str:
        out.mkdir(exist_ok=True)
        r = subprocess.run(["bash", str(ROOT / "scripts/gpu/background.sh"), "wait", "1"], env={**env, "OUT": str(out)},
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        return r.stdout

    assert "campaign: done" in wait()
    assert (out / "run-1.tar.xz").exists() and (out / "campaign.log").exists()
    with tarfile.open(out / "jit-cache.tar.xz") as t:
        assert t.getnames() == [f"{mod.name}/sgl_kernel_jit_m.so"]  # as TVM_FFI_CACHE_DIR lays them out
    (out / "jit-cache.tar.xz").unlink()
    assert "JIT modules packed" not in wait() and not (out / "jit-cache.tar.xz").exists()  # nothing new: not again
    (mod.parent / "sgl_kernel_jit_n__arch_9.0__tvmffi_0.1.11").mkdir()
    (mod.parent / "sgl_kernel_jit_n__arch_9.0__tvmffi_0.1.11/sgl_kernel_jit_n.so").write_text("elf")
    assert "JIT modules packed: 2" in wait()


def test_modules_the_bundle_carried_are_not_sent_back(tmp_path):
    """`start` notes the JIT modules already there (the bundle's): `wait` packs only when new ones appeared, and
    skips comment lines of the campaign."""
    import shutil
    import subprocess

    tree, root, out = tmp_path / "tree", tmp_path / "llmc", tmp_path / "out"
    (tree / "scripts/gpu").mkdir(parents=True)
    for f in ("background.sh", "pack_out.sh"):
        shutil.copy(ROOT / "scripts/gpu" / f, tree / "scripts/gpu" / f)
    carried = root / "jit/tvm-ffi/sgl_kernel_jit_a__arch_9.0__tvmffi_0.1.11"
    carried.mkdir(parents=True)
    (carried / "sgl_kernel_jit_a.so").write_text("elf")
    (tmp_path / "commands").write_text("# a comment: not run\n\necho ran > $OUT/mark\n")
    env = {"PATH": "/usr/bin:/bin", "LLMC_ROOT": str(root), "HOME": str(tmp_path / "home")}

    def bg(*args: str) -> str:
        out.mkdir(exist_ok=True)
        r = subprocess.run(["bash", str(tree / "scripts/gpu/background.sh"), *args], env={**env, "OUT": str(out)},
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        return r.stdout

    bg("start", str(tmp_path / "commands"))
    assert "campaign: done" in bg("wait", "30")
    assert (root / "runs/mark").read_text() == "ran\n" and "start: #" not in (root / "bg/log").read_text()
    assert not (out / "jit-cache.tar.xz").exists()
    new = root / "jit/tvm-ffi/sgl_kernel_jit_b__arch_9.0__tvmffi_0.1.11"
    new.mkdir()
    (new / "sgl_kernel_jit_b.so").write_text("elf")
    assert "JIT modules packed: 2" in bg("wait", "1")


@pytest.mark.parametrize("path", CAMPAIGNS, ids=lambda p: p.name)
def test_env_variables_are_set_before_use(path):
    """background.sh runs each line in a bare `bash -c`: a $LLMC_ variable on it is empty unless the line sources
    env.sh before using it (h200.sh sources env.sh itself, too late for its own arguments)."""
    for lineno, line in enumerate(path.read_text().splitlines(), 1):
        if line.lstrip().startswith("#") or "$LLMC_" not in line:
            continue
        first_use = line.index("$LLMC_")
        assert "source /tmp/llmc/env.sh" in line[:first_use], f"{path.name}:{lineno}: $LLMC_ used before env.sh"
