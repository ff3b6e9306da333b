"""Per-step analysis of a Chrome trace (profile/timeline.py) and the kernel class registry, on small synthetic traces
built here (a parser test: the real traces come from test_profile.py on vLLM's CPU build and from the H200)."""

import gzip
import json
from pathlib import Path

import pytest

from llmcompare.profile import kernel_class, timeline

LAYERS = 3
# one decode step: per layer qkv (int4), attention, norm, o (int4), silu, gate_up/down (int4); then lm_head
# (cuBLAS), then sampling; gaps between steps are the host's
LAYER = [("turbomind::gemm::gemm_kernel<qkv>", 10.0), ("flash_fwd_splitkv_kernel", 20.0),
         ("rms_norm_kernel", 2.0), ("turbomind::gemm::gemm_kernel<o>", 5.0), ("silu_and_mul_kernel", 3.0)]
HEAD = [("sm90_xmma_gemm_f16f16_f32", 30.0), ("argmax_kernel", 4.0), ("Memcpy DtoH (Device -> Pinned)", 1.0)]
IDLE_US = 50.0  # per step, after sampling


def kernel_events(steps: int, device: int = 0) -> list[dict]:
    evs, t = [], 1000.0
    for _ in range(steps):
        for name, dur in [*LAYER * LAYERS, *HEAD]:
            evs.append({"ph": "X", "cat": "kernel", "name": name, "pid": device, "tid": 7, "ts": t, "dur": dur})
            t += dur
        evs[-1]["cat"] = "gpu_memcpy"  # torch.profiler's category of a copy
        t += IDLE_US
    return evs


def test_registry_names_the_engines_kernels():
    c = kernel_class.classify
    assert c("void turbomind::gemm::gemm_kernel<...>") == "int4_gemm"
    tm = "void turbomind::gemm::gemm_kernel<turbomind::gemm::GemmUniversal<turbomind::arch::Sm80, Operand_A<half>, "
    assert c(tm + "Operand_B_Pack<turbomind::uint4_t, 1>, half>>(...)") == "int4_gemm"
    assert c(tm + "Operand_B<half, 1>, half>>(...)") == "gemm"  # TurboMind's fp16 lm_head
    assert c("machete::MacheteKernel<...>") == "int4_gemm"
    assert c("void marlin::Marlin<256, 1, 8, 8, 4, 8>") == "int4_gemm"
    assert c("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn") == "gemm"
    assert c("nvjet_hsh_128x256_64x4_2x1_v_bz_coopB_TNN") == "gemm"
    assert c("void flash_fwd_splitkv_kernel<...>") == "attention"
    assert c("void vllm::paged_attention_v2_kernel<...>") == "attention"
    assert c("ncclDevKernel_AllReduce_Sum_f16_RING_LL") == "comm"
    assert c("void vllm::fused_add_rms_norm_kernel<...>") == "norm_act"
    assert c("void at::native::vectorized_elementwise_kernel<...>") == "norm_act"
    assert c("void vllm::reshape_and_cache_flash_kernel<...>") == "attention"  # the KV-cache write
    tm_kv = "void turbomind::ProcessKV_v2<__half, 64, 128, 4>(char**, turbomind::RopeKernelParam, cutlass::FastDivmod)"
    assert c(tm_kv) == "attention" and c("void turbomind::flattenKV_v2<64, 128, 4, __half>") == "attention"
    assert c("Memcpy HtoD (Pinned -> Device)") == "copy"
    assert c("argmax_kernel") == "sampling"
    assert c("aten::linear") == "gemm" and c("aten::mm") == "gemm" and c("_C::onednn_mm") == "gemm"  # vLLM CPU 0.32
    assert c("some_unknown_thing") == "other"
    # Inductor's fused Triton kernels name the ops they read: a Machete GEMM's output is not a GEMM (vLLM 0.26, H200)
    assert c("triton_red_fused_fused_add_rms_norm_machete_mm_2") == "norm_act"
    assert c("triton_poi_fused_machete_mm_mul_silu_slice_1") == "norm_act"
    assert c("triton_poi_fused_3") == "other"
    machete = ("void cutlass::device_kernel<cutlass::gemm::kernel::GemmUniversal<cute::tuple<int, int, int, int>, "
               "machete::MacheteCollectiveMma<cute::tuple<cutlass::integer_subbyte<4, false>, cutlass::half_t>>>")
    assert c(machete) == "int4_gemm"
    with pytest.raises(ValueError, match="valid: int4_gemm, comm"):
        kernel_class.check_class("profile.x", "bogus")


def test_sglang_kernel_names_are_classed():
    """SGLang 0.5.15's kernel names, as its sources declare them (the Marlin and store_kvcache ones were seen in an
    H100 trace later, below): jit_kernel/csrc/gemm/marlin/marlin_template.h `namespace device::marlin { __global__ void Marlin(...)`,
    jit_kernel/csrc/gemm/awq_dequantize.cuh `namespace device::awq { __global__ void dequantize_weights(...)`,
    jit_kernel/csrc/elementwise/kvcache.cuh `__global__ void store_kvcache(...)`; nvcc's demangled form."""
    c = kernel_class.classify
    marlin = ("void device::marlin::Marlin<__half, 4, 256, 1, 8, 8, true, 4, 8, false>(int4 const*, int4 const*, "
              "int4*, int4*, int4 const*, int4 const*, int4 const*, int const*, int, int, int, int, int, int*, bool, "
              "bool, int)")
    assert c(marlin) == "int4_gemm"
    assert c("void device::awq::dequantize_weights(int*, __half*, int*, __half*, int, int, int)") == "int4_gemm"
    assert c("void (anonymous namespace)::store_kvcache<256u, 2u, true>(StoreKVCacheParams)") == "attention"
    assert c("void awq_marlin_repack_kernel<256, 4, false>(unsigned int const*, unsigned int*, int, int)") == "int4_gemm"


# The kernels of SGLang 0.5.15's decode step in its profiled pass on an H100 (reports/h100-sglang-c64, the scheduler's
# trace), names as the trace has them (cut after the template's first arguments), and the class each must get
SGLANG_H100_KERNELS = [
    ("void device::marlin::Marlin<__half, 1125899906843648l, 256, 4, 16, 4, false, 4, 8, false>(int4 const*, "
     "int4 const*, int4*, int4*)", "int4_gemm"),
    ("void cutlass::device_kernel<flash::enable_sm90_or_later<flash::FlashAttnFwdSm90<flash::CollectiveMainloopFwdSm90<",
     "attention"),
    ("void cutlass::device_kernel<flash::FlashAttnFwdCombine<cute::tuple<cute::C<8>, cute::C<128> >, 5, 256, 1, false",
     "attention"),
    ("void flash::prepare_varlen_num_blocks_kernel<4, true>(int, int, int, int const*)", "attention"),
    ("void (anonymous namespace)::store_kvcache<1024l, 2, true, long>((anonymous namespace)::StoreKVCacheParams)",
     "attention"),
    ("nvjet_sm90_hsh_384x64_64x3_2x1_v_bz_coopB_TNN", "gemm"),  # the lm_head
    # FlashInfer's norms: not attention, though their name holds `flash`
    ("void flashinfer::norm::FusedAddRMSNormKernel<8u, __half>(__half*, __half*, __half*, unsigned int, unsigned int",
     "norm_act"),
    ("void flashinfer::norm::RMSNormKernel<8u, __half>(__half*, __half*, __half*, unsigned int)", "norm_act"),
    ("void (anonymous namespace)::act_and_mul_kernel<__half, ((anonymous namespace)::ActivationKind)0, true, false>(",
     "norm_act"),
    ("void (anonymous namespace)::fused_rope_kernel<true, 128l, true, __half, long, 16u>((anonymous namespace)::Fuse",
     "norm_act"),
    ("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::ArgMaxOps<float>, unsigned int,",
     "sampling"),
]


@pytest.mark.parametrize(("name", "cls"), SGLANG_H100_KERNELS)
def test_sglang_kernel_names_seen_on_an_h100_are_classed(name, cls):
    assert kernel_class.classify(name) == cls


def test_steps_busy_by_class_and_idle_from_a_synthetic_gpu_trace(tmp_path):
    steps = 6
    trace = {"traceEvents": [*kernel_events(steps), *kernel_events(steps, device=1),
                             {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 0, "dur": 5}]}
    f = tmp_path / "t.trace.json.gz"
    with gzip.open(f, "wt") as fo:
        json.dump(trace, fo)
    s = timeline.analyze(f)
    assert s.source == "gpu" and s.events == steps * (len(LAYER) * LAYERS + len(HEAD))  # device 0 only
    assert s.anchor == "sm90_xmma_gemm_f16f16_f32"  # the lm_head ends... and so marks each step
    assert s.steps == steps - 1  # from one lm_head to the next; the part after the last one is dropped
    busy_us = sum(d for _, d in LAYER) * LAYERS + sum(d for _, d in HEAD)
    assert s.step_ms_median == pytest.approx((busy_us + IDLE_US) / 1000)
    assert s.busy_ms_mean == pytest.approx(busy_us / 1000)
    assert s.idle_ms_mean == pytest.approx(IDLE_US / 1000)
    assert s.class_ms_mean["int4_gemm"] == pytest.approx(15.0 * LAYERS / 1000)
    assert s.class_ms_mean["attention"] == pytest.approx(20.0 * LAYERS / 1000)
    assert s.class_ms_mean["norm_act"] == pytest.approx(5.0 * LAYERS / 1000)
    assert s.class_ms_mean["gemm"] == pytest.approx(0.030)
    assert s.class_ms_mean["sampling"] == pytest.approx(0.004) and s.class_ms_mean["copy"] == pytest.approx(0.001)
    assert sum(s.class_ms_mean.values()) + s.idle_ms_mean == pytest.approx(s.step_ms_mean)
    assert s.top_kernels[0]["class"] == "attention"


def test_overlapping_streams_count_once_in_busy_and_anchor_can_be_named():
    evs = kernel_events(4)
    # a second stream's kernel under an attention kernel of the second decode step (the first counted one: steps
    # run from one argmax to the next): busy unchanged, its class time added
    a = [e for e in evs if e["name"].startswith("flash")][LAYERS]
    evs.append({**a, "tid": 9, "name": "ncclDevKernel_AllReduce", "dur": a["dur"] / 2})
    s = timeline.summarize(*timeline.events({"traceEvents": evs}), anchor="argmax")
    assert s.anchor == "argmax" and s.steps == 3
    busy_us = sum(d for _, d in LAYER) * LAYERS + sum(d for _, d in HEAD)
    assert s.busy_ms_mean == pytest.approx(busy_us / 1000)
    assert s.class_ms_mean["comm"] == pytest.approx(a["dur"] / 2 / 1000 / 3, abs=1e-5)  # rounded to 10 ns


def test_cpu_trace_uses_outermost_ops_and_finds_steps_without_a_gemm():
    evs, t = [], 0.0
    for _ in range(5):  # aten::linear holds aten::addmm: only the outer one counts
        evs += [{"ph": "X", "cat": "cpu_op", "name": "aten::linear", "pid": 5, "tid": 5, "ts": t, "dur": 100},
                {"ph": "X", "cat": "cpu_op", "name": "aten::addmm", "pid": 5, "tid": 5, "ts": t + 1, "dur": 90},
                {"ph": "X", "cat": "cpu_op", "name": "aten::argmax", "pid": 5, "tid": 5, "ts": t + 120, "dur": 10}]
        t += 200
    s = timeline.summarize(*timeline.events({"traceEvents": evs}))
    assert s.source == "cpu" and s.events == 10 and s.anchor == "aten::linear" and s.steps == 4
    assert s.class_ms_mean == {"gemm": 0.1, "sampling": 0.01} and s.idle_ms_mean == pytest.approx(0.09)
    empty = timeline.summarize(*timeline.events({"traceEvents": []}))
    assert empty.steps == 0 and "no kernel" in empty.note


# Two traces of reports/h200-map/qwen-map-h200-20261203-013249, copied with only the GPU events the analysis reads
H200_MAP = Path(__file__).resolve().parent / "data/h200-map-traces"
ROOT = Path(__file__).resolve().parents[1]


def test_real_h200_traces_split_at_the_lm_head_with_no_fused_triton_kernel_taken_for_a_gemm():
    # vLLM 0.26's EngineCore at c=64 (CUDA graphs, Machete): Inductor's triton_*_machete_mm_* kernels are norms
    s = timeline.analyze(H200_MAP / "vllm.profile-p10.pid953.trace.json.gz", None)
    assert s.anchor.startswith("nvjet_sm90") and s.steps == 155
    assert not [k for k in s.top_kernels if k["name"].startswith("triton_") and k["class"] == "int4_gemm"]
    assert 3.0 < s.class_ms_mean["int4_gemm"] < 3.7 and 1.3 < s.class_ms_mean["attention"] < 1.6
    # TurboMind 0.18 at c=256 in a prefill phase: its per-layer ProcessKV is attention, not the step's anchor
    s = timeline.analyze(H200_MAP / "turbomind.profile-p11.pid732.trace.json.gz", None)
    assert s.anchor.startswith("nvjet_sm90") and s.steps == 7


def test_an_lm_head_whose_kernel_changes_with_the_batch_still_marks_every_step():
    # cuBLAS picks another kernel for the lm_head as the batch moves (variable lengths): both names mark steps
    evs = kernel_events(6)
    heads = [e for e in evs if e["name"] == "sm90_xmma_gemm_f16f16_f32"]
    for e in heads[3:]:
        e["name"] = "nvjet_sm90_hsh_128x256_64x4_2x1_v_bz_coopA_TNT"
    s = timeline.summarize(*timeline.events({"traceEvents": evs}))
    assert s.steps == 5 and s.anchor == "sm90_xmma_gemm_f16f16_f32"
    assert s.anchor_names == ["sm90_xmma_gemm_f16f16_f32", "nvjet_sm90_hsh_128x256_64x4_2x1_v_bz_coopA_TNT"]
    assert s.step_ms_median == pytest.approx(s.step_ms_mean)  # no merged step among them
    one = timeline.summarize(*timeline.events({"traceEvents": kernel_events(6)}))
    assert one.steps == 5 and one.anchor_names == []  # one name: nothing more to say


def test_two_gemm_launches_with_no_int4_gemm_between_them_fall_back_to_one_name():
    # a split-K lm_head (two gemm-class launches a step): counting both would halve every step
    evs, t = [], 1000.0
    for _ in range(5):
        for name, dur in [*LAYER * LAYERS, ("sm90_xmma_gemm_f16f16_f32", 30.0), ("cutlass_splitK_gemm_f16", 5.0)]:
            evs.append({"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7, "ts": t, "dur": dur})
            t += dur
        t += IDLE_US
    ev, _ = timeline.events({"traceEvents": evs})
    assert kernel_class.classify("cutlass_splitK_gemm_f16") == "gemm"
    assert timeline.lm_head_names(ev) is None
    s = timeline.summarize(ev)
    assert s.steps == 4 and s.anchor_names == []


def test_heavy_steps_are_those_whose_int4_gemm_ran_at_a_larger_m():
    # 8 forward passes; the 6th carries a prefill chunk: its int4 GEMMs (the turbomind::gemm kernels) 4x as long
    evs, t = [], 1000.0
    for step in range(8):
        for name, dur in [*LAYER * LAYERS, *HEAD]:
            d = dur * 4 if step == 5 and name.startswith("turbomind::gemm") else dur
            evs.append({"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7, "ts": t, "dur": d})
            t += d
        t += IDLE_US
    s = timeline.summarize(*timeline.events({"traceEvents": evs}))
    int4_us = 15.0 * LAYERS  # per step at decode
    light_us = sum(d for _, d in LAYER) * LAYERS + sum(d for _, d in HEAD) + IDLE_US
    assert s.steps == 7 and s.heavy_steps == 1 and s.heavy_factor == timeline.HEAVY_INT4
    assert s.light_step_ms_mean == pytest.approx(light_us / 1000)
    assert s.heavy_step_ms_mean == pytest.approx((light_us + 3 * int4_us) / 1000)
    assert s.heavy_time_share == pytest.approx(s.heavy_step_ms_mean / (s.step_ms_mean * s.steps), abs=1e-3)
    steady = timeline.summarize(*timeline.events({"traceEvents": kernel_events(8)}))
    assert steady.heavy_steps == 0 and steady.heavy_time_share == 0.0 and steady.heavy_step_ms_mean is None


def test_a_real_h100_window_whose_lm_head_changed_kernel_is_covered_whole():
    # TurboMind 0.18 at c=512 on an H100 (reports/h100-c512): its lm_head ran two cuBLAS kernels in one window;
    # one name marked 34 steps over 68% of it (the committed run.json, analysed so), both mark 48
    trace = ROOT / "reports/h100-c512/converge-h200-20261205-133942/turbomind.profile-p0.pid897.trace.json.gz"
    s = timeline.analyze(trace)
    assert s.steps == 48 and len(s.anchor_names) == 2 and s.heavy_steps == 0
    assert s.steps * s.step_ms_mean > 0.95 * s.window_ms
    assert 21.0 < s.step_ms_median < 22.5
