import pytest

from llmcompare.analysis import attribution as A
from llmcompare.schema.run import EngineRecord, Metrics, PointResult


def table():
    # two shapes, 2 layers; backend "fast" takes 10 µs per GEMM at any M <= 64, "slow" 20 µs; both 4x at M=256
    pts = {b: {s: [(1, t), (64, t), (256, 4 * t)] for s in ("a", "b")} for b, t in (("fast", 10.0), ("slow", 20.0))}
    return A.KernelTable(pts, [{"name": "a", "n": 8, "k": 8}, {"name": "b", "n": 8, "k": 8}], layers=2)


def test_interpolation_is_log_log_and_linear_past_the_end():
    t = table()
    assert t.gemm_us("fast", "a", 32) == pytest.approx(10.0)
    assert t.gemm_us("fast", "a", 128) == pytest.approx(20.0)  # halfway in log M between 10 and 40 -> sqrt(10*40)
    assert t.gemm_us("fast", "a", 512) == pytest.approx(80.0)  # linear in M past 256
    assert t.step_us("slow", 8) == pytest.approx(2 * (20 + 20))


def test_gap_prediction_by_hand():
    t = table()
    # baseline: 100 requests, 1000 output tokens at batch 10 -> 100 steps of 2 layers * 2 GEMMs * 20 µs = 8 ms;
    # prefill 100 requests at M=64 -> 100 * 80 µs = 8 ms. GEMM total 16 ms of a 1 s run.
    base = A.PointGemm("c=10", 10.0, "test", 100, 1000, 64.0, 1.0, 1000.0)
    cand = A.PointGemm("c=10", 10.0, "test", 100, 1000, 64.0, 0.8, 1250.0)
    r = A.compare("c=10", cand, base, t, "fast", "slow")
    assert r.gemm_s_baseline == pytest.approx(0.016)
    assert r.measured_gap_pct == pytest.approx(25.0)
    # with the fast kernels the baseline would take 1 - 0.016 + 0.008 s
    assert r.gemm_predicted_gap_pct == pytest.approx(100 * (1 / 0.992 - 1))
    assert r.not_explained_pct == pytest.approx(25.0 - 100 * (1 / 0.992 - 1))


def test_backend_from_log_then_scenario_then_kind():
    rec = lambda **kw: EngineRecord(name="e", **kw)  # noqa: E731
    assert A.engine_backend(rec(kernels={"AutoAWQMarlinLinearMethod": "MacheteLinearKernel"}))[0] == "machete"
    assert A.engine_backend(rec(kernels={}), {"gemm_backend": "marlin"})[0] == "marlin"
    assert A.engine_backend(rec(kind="lmdeploy"))[0] == "turbomind"
    assert A.engine_backend(rec(kind="openai"))[0] is None


def test_decode_batch_by_littles_law_with_the_engine_gauge_beside_it():
    # 4 req/s, each in decode for 0.9 s on average -> 3.6 requests decoding at any time
    m = Metrics(completed=8, total_output_tokens=80, total_input_tokens=160, duration_s=2.0, output_throughput=40.0,
                request_throughput=4.0, stats={"mean_e2el_ms": 1000.0, "mean_ttft_ms": 100.0})
    pg = A.point_profile([PointResult(concurrency=4, status="complete", metrics=m)], [4, 3])
    assert pg.batch == pytest.approx(3.6) and pg.input_len == 20
    assert pg.batch_source == "Little's law (client); engine /metrics said 3.5"


def test_lm_head_is_added_per_step_for_every_engine_and_leaves_the_gap_prediction():
    t = table()
    t.lm_head = [(1, 5.0), (64, 5.0), (256, 20.0)]  # cuBLAS fp16 vocab x hidden: any engine
    assert t.lm_head_us(8) == pytest.approx(5.0) and t.lm_head_us(512) == pytest.approx(40.0)
    assert t.step_us("slow", 8) == pytest.approx(2 * (20 + 20) + 5)  # once per step, not per layer
    assert t.step_us("slow", 256, head_m=1) == pytest.approx(2 * (80 + 80) + 5)  # prefill: the last token only
    base = A.PointGemm("c=10", 10.0, "test", 100, 1000, 64.0, 1.0, 1000.0)
    cand = A.PointGemm("c=10", 10.0, "test", 100, 1000, 64.0, 0.8, 1250.0)
    r = A.compare("c=10", cand, base, t, "fast", "slow")
    # test_gap_prediction_by_hand's 16 ms, plus 100 decode steps and 100 prefills of 5 µs of lm_head each
    assert r.gemm_s_baseline == pytest.approx(0.016 + 0.001)
    assert r.gemm_share_baseline == pytest.approx(0.017)
    assert r.gemm_predicted_gap_pct == pytest.approx(100 * (1 / 0.992 - 1))  # the same time on both sides
    assert A.KernelTable({}, [], 1).lm_head_us(8) == 0.0  # not measured: left out


def test_kernel_table_reads_lm_head_from_cublas_points_only():
    from llmcompare.schema.kernel_run import KernelPoint, KernelRun

    run = KernelRun(layers=2, shapes=[{"name": "a", "n": 8, "k": 8, "per_layer": 1},
                                      {"name": "lm_head", "n": 64, "k": 8, "per_layer": 0}],
                    points=[KernelPoint(backend="cublas", shape="lm_head", m=m, status="ok", graph_us=t)
                            for m, t in ((16, 7.0), (1, 6.0))]
                    + [KernelPoint(backend="marlin", shape="lm_head", m=1, status="ok", graph_us=1.0),
                       KernelPoint(backend="marlin", shape="a", m=1, status="ok", graph_us=3.0)])
    t = A.KernelTable.from_run(run)
    assert t.lm_head == [(1, 6.0), (16, 7.0)] and [s["name"] for s in t.shapes] == ["a"]
    assert t.step_us("marlin", 1) == pytest.approx(2 * 3.0 + 6.0) and t.has("marlin")


def test_tensor_parallel_step_time_is_gemm_plus_two_allreduces_per_layer():
    t = table()
    t.tensor_parallel, t.allreduce_us = 2, [(1, 5.0), (64, 5.0), (256, 20.0)]
    assert t.comm_step_us(10) == pytest.approx(2 * 2 * 5.0)  # 2 layers x 2 all-reduces x 5 µs
    assert t.comm_step_us(128) == pytest.approx(2 * 2 * 10.0)  # log-log: sqrt(5 * 20)
    assert A.PointGemm("x", 1, "", 1, 1, 1, 1, 1).comm_s == 0.0
    base = A.PointGemm("c=10", 10.0, "test", 100, 1000, 64.0, 1.0, 1000.0)
    g = A.gemm_time(base, t, "slow")
    # decode: 100 steps x 20 µs = 2 ms; prefill: 100 prompts at M=64 x 20 µs = 2 ms; GEMM as without TP: 16 ms
    assert (g.decode_comm_s, g.prefill_comm_s, g.gemm_s) == pytest.approx((0.002, 0.002, 0.016))
    assert g.rest_s == pytest.approx(1.0 - 0.016 - 0.004)
    cand = A.PointGemm("c=10", 5.0, "test", 100, 1000, 64.0, 0.8, 1250.0)  # half the batch: twice the steps
    r = A.compare("c=10", cand, base, t, "fast", "slow")
    assert r.comm_s_baseline == pytest.approx(0.004) and r.comm_s_candidate == pytest.approx(200 * 20e-6 + 0.002)
    # the same table at the baseline's batch on both sides: communication leaves the GEMM prediction as it was
    assert r.gemm_predicted_gap_pct == pytest.approx(100 * (1 / 0.992 - 1))
    assert A.gemm_time(base, table(), "slow").comm_s == 0.0  # no all-reduce measured: no comm term


def test_kernel_table_reads_the_runs_allreduce_points():
    from llmcompare.schema.kernel_run import AllReducePoint, KernelPoint, KernelRun

    run = KernelRun(layers=64, tensor_parallel=2, shapes=[{"name": "o", "n": 5120, "k": 2560, "per_layer": 1}],
                    points=[KernelPoint(backend="marlin", shape="o", m=1, status="ok", graph_us=9.0)],
                    collectives=[AllReducePoint(m=16, status="ok", us=12.0), AllReducePoint(m=1, status="ok", us=8.0),
                                 AllReducePoint(m=4096, status="error", error="OOM")])
    t = A.KernelTable.from_run(run)
    assert (t.tensor_parallel, t.allreduce_us, t.layers) == (2, [(1, 8.0), (16, 12.0)], 64)
    assert t.comm_step_us(1) == pytest.approx(64 * 2 * 8.0)
    qwen32b = {"hidden_size": 5120, "intermediate_size": 27648, "num_attention_heads": 40, "num_key_value_heads": 8,
               "num_hidden_layers": 64}
    t.shapes = [{"name": n, "n": a, "k": b} for n, a, b in (("qkv", 3584, 5120), ("o", 5120, 2560),
                                                           ("gate_up", 27648, 5120), ("down", 5120, 13824))]
    assert A.shapes_match(t, qwen32b) is True  # per-GPU shapes match the model at the run's degree
    t.tensor_parallel = 1
    assert A.shapes_match(t, qwen32b) is False


def test_an_m_below_the_table_is_not_modelled():
    """A kernel run that starts at M = 64 (a prefill-size run) holds nothing at a decode batch of 10: the model
    would repeat M = 64's time there, so it refuses and says which M."""
    pts = {b: {s: [(64, 10.0), (256, 40.0)] for s in ("a", "b")} for b in ("fast", "slow")}
    t = A.KernelTable(pts, [{"name": "a", "n": 8, "k": 8}, {"name": "b", "n": 8, "k": 8}], layers=2)
    assert t.lowest_m("fast") == 64
    why = A.below_table(t, ["fast", "slow"], {"decode batch": 10.0, "mean prompt": 300.0})
    assert why == "the kernel table starts at M = 64, below it not measured: decode batch 10"
    assert A.below_table(t, ["fast"], {"decode batch": 64.0}) is None
    assert A.below_table(table(), ["fast", "slow"], {"decode batch": 1.0}) is None  # a table from M = 1 covers all


def _engine(version, kind="lmdeploy", name="turbomind"):
    return EngineRecord(name=name, kind=kind, version=version)


def test_a_backend_timed_with_another_version_of_the_served_engine_is_named():
    from llmcompare.schema.kernel_run import KernelRun

    # session 25's H100 run of 0.17: `--backends turbomind --python turbomind=<lmdeploy 0.17 env>`, no @ label
    run = KernelRun(layers=2, shapes=[{"name": "a", "n": 8, "k": 8, "per_layer": 1}],
                    workers=[{"backends": ["turbomind"], "env": {"versions": {"lmdeploy": "0.17.0", "torch": "2.11"}}},
                             {"backends": ["machete", "cublas"], "env": {"versions": {"vllm": "0.26.0+cu130"}}},
                             {"backends": ["turbomind@0.18.0"], "env": None}])
    t = A.KernelTable.from_run(run)
    why = t.other_version("turbomind", _engine("0.18.0"))
    assert why and "timed turbomind with lmdeploy 0.17.0, and turbomind served lmdeploy 0.18.0" in why
    assert "--backends turbomind@0.17.0" in why
    assert t.other_version("turbomind", _engine("0.17.0")) is None  # the version it served
    assert t.other_version("machete", _engine("0.26.0", "vllm", "vllm")) is None  # a local build tag is not a version
    assert t.other_version("machete", _engine("0.25.1", "vllm", "vllm"))
    assert t.other_version("cublas", _engine("0.18.0")) is None  # cuBLAS stands for no engine's package
    assert t.other_version("turbomind", _engine(None)) is None  # the served version unknown: not checked
    assert t.other_version("turbomind@0.18.0", _engine("0.17.0")) is None  # its worker reported no versions
    assert A.KernelTable({}, [], 1).other_version("turbomind", _engine("0.18.0")) is None  # an older table
