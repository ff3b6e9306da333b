"""Tile/SM/bandwidth facts (llmcompare.kernelfacts) on the committed real kernel-bench run of the H200
(tests/data/h200-versions-kernel-bench: reports/h200-versions/kernels-qwen-awq-h200-20261202-163848's run.json with
its points at M <= 256; TurboMind 0.18 and 0.17 tm_gemm choices per point)."""

import math
from pathlib import Path

import pytest

from llmcompare.analysis import kernel_facts as F
from llmcompare.engines.gemm_backends import int4_awq_bytes
from llmcompare.schema.files import load_run
from llmcompare.schema.run import EngineRecord

KRUN = Path(__file__).resolve().parent / "data/h200-versions-kernel-bench"


@pytest.fixture(scope="module")
def run():
    return load_run(KRUN)


def by(facts):
    return {(f.backend, f.shape, f.m): f for f in facts}


def test_turbomind_018_gate_up_at_m1_tile_and_tiles_from_n(run):
    f = by(F.facts(run))[("turbomind", "gate_up", 1)]
    assert f.kernel_from == "kernel-bench tm_gemm" and "_8x128x64_4_" in f.kernel
    assert f.tile == [8, 128, 64] and f.splits == 1 and f.transposed is False
    assert f.n == 37888 and f.tiles == math.ceil(1 / 8) * math.ceil(37888 / 128) == 296
    assert f.sms == 132 and f.sms_from == "NVIDIA H200 (kernel run)" and f.per_sm == pytest.approx(296 / 132)
    # bytes: the int4 weight + fp16 scales + int4 zeros, x and y in fp16; % of the worker's measured copy bandwidth
    assert f.bytes == int4_awq_bytes(37888, 3584, 128) + 2 * 3584 + 2 * 37888
    p = next(p for p in run.points if (p.backend, p.shape, p.m) == ("turbomind", "gate_up", 1))
    assert f.pct_copy_bw == pytest.approx(p.pct_copy_bw)  # kernel-bench's own figure, 32%
    assert f.slow and f.fastest_backend == "turbomind@0.17.0"
    assert f.why().startswith("1.7x turbomind@0.17.0's 30.7 µs; 296 CTAs on 132 SMs (2.24 per SM): the last wave "
                              "fills 24% of them, split-K 1; 32% of copy bandwidth (70.6 MB)")


def test_turbomind_018_qkv_at_m1_leaves_most_sms_idle_and_017_splits_k(run):
    fs = by(F.facts(run))
    f = fs[("turbomind", "qkv", 1)]
    assert f.tiles == 36 and f.ctas == 36  # ceil(1 / 8) * ceil(4608 / 128)
    assert "36 tiles on 132 SMs: 27% of SMs busy, split-K 1" in f.why()
    assert "a fixed cost per call" in f.why()  # 28.6-29.8 µs from M=1 to 64 at 7-8% of copy bandwidth
    old = fs[("turbomind@0.17.0", "qkv", 1)]
    assert old.tile == [16, 64, 128] and old.splits == 2 and old.tiles == 72 and old.ctas == 144
    assert not old.slow and old.why() == ""


def test_other_backends_name_their_kernel_but_no_tile(run):
    fs = by(F.facts(run))
    m = fs[("marlin", "down", 1)]
    assert m.kernel.startswith("marlin::Marlin<") and m.kernel_from == "profiler" and m.tile is None
    assert fs[("marlin", "down", 2)].kernel_from == "not profiled at this M"
    c = fs[("cublas", "down", 1)]
    assert c.kernel == "nvjet_sm90_hsh_256x8_64x6_4x1_v_bz_splitK_TNT" and c.split_note.startswith("split-K")
    assert c.bytes == 2 * 3584 * 18944 + 2 * 18944 + 2 * 3584  # fp16 weight
    assert "tile not reported" in c.why() and "82% of copy bandwidth" in c.why()
    assert "fixed cost" not in fs[("cublas", "gate_up", 1)].why()  # flat, but at 88% of the copy bandwidth
    assert {f.m for f in F.facts(run)} == {1, 2, 4, 8, 16, 32, 64}
    assert {f.m for f in F.facts(run, extra_ms={256})} == {1, 2, 4, 8, 16, 32, 64, 256}


def test_a_served_log_choice_wins_over_kernel_bench(run):
    served = [{"problem": "p", "m": 1, "n": 4608, "k": 3584, "kernel": "k16", "tile": [16, 128, 64], "splits": 3,
               "transposed": False}]
    f = by(F.facts(run, {"turbomind": served}, {"turbomind": ["tm"]}))[("turbomind", "qkv", 1)]
    assert (f.kernel, f.kernel_from, f.tiles, f.ctas, f.engines) == ("k16", "served log", 36, 108, ["tm"])
    # no served M >= 2 for that weight: kernel-bench's choice
    assert by(F.facts(run, {"turbomind": served}))[("turbomind", "qkv", 2)].kernel_from == "kernel-bench tm_gemm"


def test_engine_to_kernel_run_backend_by_version(run):
    tm = lambda v: EngineRecord(name="t", kind="lmdeploy", version=v)  # noqa: E731
    assert F.run_backend(run, "turbomind", tm("0.17.0")) == "turbomind@0.17.0"
    assert F.run_backend(run, "turbomind", tm("0.18.0")) == "turbomind"
    assert F.run_backend(run, "turbomind", tm(None)) == "turbomind"
    assert F.run_backend(run, "machete", EngineRecord(kind="vllm", version="0.26.0")) == "machete"
    assert F.run_backend(run, "exllama", tm(None)) is None


def test_no_gpu_recorded_states_the_assumption(run):
    bare = load_run(KRUN)
    bare.workers = []
    f = by(F.facts(bare))[("turbomind", "qkv", 1)]
    assert f.sms == 132 and f.sms_from.startswith("assumed 132") and f.pct_copy_bw is None
