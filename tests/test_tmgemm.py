"""TurboMind GEMM-choice lines (llmcompare.tmgemm). The lines below follow the C++ that prints them, token for
token; the kernel names and numbers in them are made up (no GPU here), the grammar is not:
  [Gemm] ...  lmdeploy 0.18 gemm.cu Gemm::Impl::PrintSelection:
      "[Gemm] " << kind << " " << to_string(desc) << " " << spec.kernel->name() << " family=" << family
      << " backend=" << backend << " splits=" << spec.splits << " swizzle=" << spec.swizzle << "\\n"
  [tune] ...  gemm.cu Measure (0.18; 0.17 at InternLM/lmdeploy 1263d5cd8 src/turbomind/kernels/gemm/gemm.cu:198-205):
      "[tune] " << to_string(ctx.desc()) << " " << s.kernel->name() << " swizzle=" << s.swizzle
      << " splits=" << s.splits << " measured=" << s.measured << "\\n"
  to_string(GemmDesc): src/turbomind/kernels/gemm/desc.h:63-87; Kernel::GetName: kernel.cu:129-175 (1263d5cd8).
"""

from llmcompare.engines import launch
from llmcompare.engines.turbomind_log import (
    kernel_for,
    parse_kernel,
    parse_problem,
    selected,
    turbomind_gemm_choices,
)

PROBLEM = "sm90_f16_u4k128_f16_tnt_fff_16x18944x3584_1"
K_SM90 = "sm90_f16_u4k128_f16_tnt_fff_64x128x64_4_1x1_gmma_q64n32_64x128x32_c64x128_a1x8x128_00"
K_SM80 = "sm80_f16_u4k128_f16_tnt_fff_16x128x128_3_1x1_mma_h16816_16x16x16_atom1x4x1_c16x128_a1x8x128_00"
K_T = "sm80_u4k128_f16_f16_ntn_fff_128x16x128_3_1x1_mma_h16816_16x16x16_ngroup_c128x16_a8x1x128_algo1f_r_00"

LOG_018 = f"""\
[TM][INFO] something else
[tune] {PROBLEM} {K_SM90} swizzle=0 splits=1 measured=0.0412
[tune] {PROBLEM} {K_SM80} swizzle=1 splits=4 measured=0.0533
[tune] {PROBLEM} {K_T} swizzle=0 splits=2 measured=1.2e-01
[Gemm] tune {PROBLEM} {K_SM90} family=sm90_mixed backend=native splits=1 swizzle=0
[Gemm] plan sm90_f16_u4k128_f16_tnt_fff_1x3584x18944_1 {K_SM80} family=sm80_u4 backend=native splits=8 swizzle=3
"""
LOG_017 = f"""\
[tune] {PROBLEM} {K_SM80} swizzle=1 splits=4 measured=0.0533
[tune] {PROBLEM} {K_SM90} swizzle=0 splits=1 measured=0.0612
[tune] sm90_f16_u4k128_f16_tnt_fff_1x512x3584_1 {K_SM80} swizzle=0 splits=7 measured=9.87654e-05
"""


def test_018_lines_give_kernel_tile_split_and_problem():
    cs = turbomind_gemm_choices(LOG_018)
    assert [(c["line"], c["kind"], c.get("rank")) for c in cs] == [
        ("tune", None, 0), ("tune", None, 1), ("tune", None, 2), ("gemm", "tune", None), ("gemm", "plan", None)]
    tune = cs[3]
    assert tune["kernel"] == K_SM90 and tune["family"] == "sm90_mixed" and tune["backend"] == "native"
    assert (tune["m"], tune["n"], tune["k"], tune["num"]) == (16, 18944, 3584, 1)
    assert tune["splits"] == 1 and tune["swizzle"] == 0 and tune["measured_ms"] is None
    assert tune["tile"] == [64, 128, 64] and tune["stages"] == 4 and tune["op_class"] == "gmma_q64n32"
    assert tune["transposed"] is False and tune["type_b"] == "u4k128"
    assert cs[0]["measured_ms"] == 0.0412 and cs[2]["measured_ms"] == 0.12
    plan = cs[4]
    assert (plan["m"], plan["n"], plan["k"]) == (1, 3584, 18944) and plan["splits"] == 8 and plan["swizzle"] == 3


def test_017_has_only_tune_lines_and_the_fastest_is_kept():
    cs = turbomind_gemm_choices(LOG_017)
    assert all(c["line"] == "tune" and c["family"] is None for c in cs)
    assert [c["rank"] for c in cs] == [0, 1, 0]  # rank restarts with each problem
    kept = selected(cs)
    assert kept[PROBLEM]["kernel"] == K_SM80 and kept[PROBLEM]["splits"] == 4
    assert kept["sm90_f16_u4k128_f16_tnt_fff_1x512x3584_1"]["measured_ms"] == 9.87654e-05


def test_selected_prefers_the_gemm_line_over_the_fastest_candidate():
    kept = selected(turbomind_gemm_choices(LOG_018))
    assert kept[PROBLEM]["line"] == "gemm" and kept[PROBLEM]["kind"] == "tune"
    assert len(kept) == 2


def test_kernel_name_parts():
    k = parse_kernel(K_SM80)
    assert k["tile"] == [16, 128, 128] and k["stages"] == 3 and k["cluster"] == [1, 1] and k["mma"] == [16, 16, 16]
    assert k["atom"] == [1, 4, 1] and k["c_tile"] == [16, 128] and k["align"] == [1, 8, 128] and k["algo"] is None
    t = parse_kernel(K_T)
    assert t["kernel_type_a"] == "u4k128" and t["group_axis"] == "n" and t["algo"] == {"id": "1f", "raster": "r"}
    assert parse_kernel("cublas") == {}


def test_transposed_kernel_is_flagged():
    (c,) = turbomind_gemm_choices(f"[tune] {PROBLEM} {K_T} swizzle=0 splits=1 measured=0.1\n")
    assert c["transposed"] is True and c["tile"] == [128, 16, 128]


def test_unknown_problem_layout_still_gives_mnk_and_other_lines_are_ignored():
    assert parse_problem("sm90_f16_u4k128_f16_tnt_fff_bbb_8x64x128_2") == {"m": 8, "n": 64, "k": 128, "num": 2}
    assert parse_problem("garbage") == {}
    text = "[Gemm] dispatch: old format split_k=1 swizzle=3\nmeasuring x with swizzle=3, splits=1\n"
    assert turbomind_gemm_choices(text) == []
    (c,) = turbomind_gemm_choices(f"  [Gemm] plan {PROBLEM} cublas family=cublas backend=cublas splits=1 swizzle=0\r\n")
    assert c["kernel"] == "cublas" and c["transposed"] is None and "tile" not in c and c["m"] == 16


def test_served_m_uses_the_smallest_tuned_m_at_or_above_it():
    warmup = "".join(f"[tune] sm90_f16_u4k128_f16_tnt_fff_{m}x512x3584_1 {K_SM80} swizzle=0 splits={s} measured=0.01\n"
                     for m, s in ((1, 7), (16, 3), (64, 1)))
    cs = turbomind_gemm_choices(warmup)
    assert [kernel_for(cs, m, 512, 3584)["splits"] for m in (1, 2, 16, 17, 64)] == [7, 3, 3, 1, 1]
    assert kernel_for(cs, 65, 512, 3584) is None and kernel_for(cs, 1, 512, 4096) is None


# --- Tally: the per-problem record of a served engine's log, on the real lines TurboMind printed on the H200 ---

import lzma  # noqa: E402
from pathlib import Path  # noqa: E402

from llmcompare.engines.turbomind_log import Tally, served_kernel, summarize  # noqa: E402

DATA = Path(__file__).resolve().parent / "data"
KRUN = DATA / "h200-versions-kernel-bench"  # from reports/h200-versions/kernels-qwen-awq-h200-20261202-163848


def real_lines(worker: str) -> list[str]:
    """TurboMind's own stdout from kernel-bench's worker on the H200 (0.18: [tune] and [Gemm] tune; 0.17: [tune])."""
    with lzma.open(KRUN / worker, "rt") as f:
        return [ln for ln in f if ln.startswith(("[Gemm]", "[tune]"))]


def test_tally_of_real_018_lines_keeps_the_gemm_line_and_counts_candidates():
    lines = real_lines("worker-cublas-marlin-machete-turbomind.log.xz")
    recs = {r["problem"]: r for r in summarize(lines).records()}
    # one record per problem kernel-bench ran: 4 shapes x 15 M
    assert len(recs) == 60
    r = recs["sm90_f16_u4k32_f16_tnt_fff_1x37888x3584_1"]
    assert (r["m"], r["n"], r["k"]) == (1, 37888, 3584)
    assert r["kernel"] == ("sm90_f16_u4k32_f16_tnt_ibb_8x128x64_4_1x1_gmma_h64n16_64x8x16_atom1x1x1_fused_silu_mgroup_"
                           "c8x128_a1x64x64_algo102_r_00")
    assert r["tile"] == [8, 128, 64] and r["stages"] == 4 and r["splits"] == 1 and r["family"] == "35"
    assert r["source"] == "[Gemm] tune" and r["tune_lines"] == 1 and r["plan_lines"] == 0 and r["seen"] == 1
    assert r["candidates"] == 4 and r["tunings"] == 1  # the 4 [tune] lines before it, on the log's lines 586-589
    # the same answer as the list parser's `selected`
    kept = selected(turbomind_gemm_choices("".join(lines)))
    assert {p: c["kernel"] for p, c in kept.items()} == {p: r["kernel"] for p, r in recs.items()}


def test_tally_of_real_017_lines_keeps_the_fastest_candidate():
    lines = real_lines("worker-turbomind_0.17.0.log.xz")
    recs = {r["problem"]: r for r in summarize(lines).records()}
    r = recs["sm90_f16_u4k128_f16_ttt_fff_1x4608x3584_1"]
    first = turbomind_gemm_choices(next(ln for ln in lines if "_1x4608x3584_1 " in ln))[0]
    assert r["source"] == "[tune] fastest" and r["kernel"] == first["kernel"] and r["splits"] == first["splits"] == 2
    assert r["tile"] == [16, 64, 128] and r["plan_lines"] == r["tune_lines"] == 0 and r["seen"] == r["tunings"] >= 1


def test_tally_counts_plan_lines_without_keeping_them():
    warm = real_lines("worker-cublas-marlin-machete-turbomind.log.xz")
    # the M=1 problems' lines as `[Gemm] plan`: what a decode step at batch 1 prints, once per layer's GEMM
    plans = [ln.replace("[Gemm] tune ", "[Gemm] plan ", 1) for ln in warm
             if ln.startswith("[Gemm] tune") and parse_problem(ln.split()[2])["m"] == 1]
    assert len(plans) == 4

    def log():  # 200,000 forward passes, generated: never a list
        yield from warm
        for _ in range(200_000):
            yield from plans

    t = summarize(log())
    assert t.plan_lines == 800_000
    recs = {(r["m"], r["n"], r["k"]): r for r in t.records()}
    r = recs[(1, 4608, 3584)]
    assert r["source"] == "[Gemm] plan" and r["plan_lines"] == 200_000 and r["seen"] == 200_001 and r["kernels"] == 1
    assert recs[(2, 4608, 3584)]["plan_lines"] == 0
    assert len(t._parsed) <= 64  # the distinct lines it parsed, not the 800,000 it read


def test_served_kernel_is_the_smallest_tuned_m_at_or_above():
    recs = summarize(real_lines("worker-cublas-marlin-machete-turbomind.log.xz")).records()
    assert served_kernel(recs, 3, 4608, 3584)["m"] == 4
    assert served_kernel(recs, 64, 37888, 3584)["tile"] == [64, 128, 64]
    assert served_kernel(recs, 1, 4608, 4096) is None and served_kernel(recs, 20000, 4608, 3584) is None
    assert Tally().records() == []


# The two probes of 2026-12-03 on the H200 (reports/h200-versions/qwen-awq-h200-20261203-000904 and -000738, copied
# to tests/data): whole served logs, parsed as serve-bench does.


def _served(tmp_path, run: str, engine: str):
    import json


    log = tmp_path / "server.log"
    with lzma.open(DATA / run / f"{engine}.server.log.xz") as src, open(log, "wb") as dst:
        dst.write(src.read())
    facts = launch.read_log_file("lmdeploy", log)
    saved = json.loads((DATA / run / "run.json").read_text())["engines"][engine]["gemm_choices"]
    return {(c["m"], c["n"], c["k"]): c for c in facts.gemm_choices}, saved


def test_served_018_log_names_the_sm90_kernel_of_every_decode_gemm(tmp_path):
    got, saved = _served(tmp_path, "h200-probe-turbomind-0.18", "turbomind-kernels")
    assert len(got) == len(saved) == 765  # what serve-bench saved is what the log says
    for n, k in [(4608, 3584), (3584, 3584), (37888, 3584), (3584, 18944)]:
        c = got[(1, n, k)]
        assert c["source"] == "[Gemm] plan" and c["op_class"] == "gmma_h64n16" and c["splits"] == 1, c
        assert c["plan_lines"] > 10000  # one line per forward pass at batch 1
    assert got[(1, 3584, 18944)]["tile"] == [8, 128, 64]


def test_served_017_log_keeps_the_fastest_tuned_kernel(tmp_path):
    got, saved = _served(tmp_path, "h200-probe-turbomind-0.17", "turbomind-0.17-kernels")
    assert len(got) == len(saved) == 69  # 17 tuned M per linear shape, and lm_head's one
    c = got[(16, 3584, 18944)]
    assert c["source"] == "[tune] fastest" and c["op_class"] == "mma_h16816" and c["splits"] == 4, c
    assert c["candidates"] > 10 and c["plan_lines"] == 0
