"""Checks across a scenario's fields and of their values (scenario.load calls validate; types were checked by
schema/build.py): each error names the field, the bad value and what is valid."""

from __future__ import annotations

import math

from llmcompare.engines.environments import check_venv
from llmcompare.engines.gemm_backends import UnknownBackend, backend
from llmcompare.engines.launch import check_degree, check_prefix_cache, check_tensor_parallel
from llmcompare.engines.registry import ENGINES
from llmcompare.errors import ScenarioError
from llmcompare.scenario import rules
from llmcompare.schema.build import bounded, check_name
from llmcompare.schema.scenario import (
    GENERATED,
    SLO_METRICS,
    Capacity,
    Converge,
    Engine,
    Profile,
    SameAnswerCheck,
    Scenario,
)
from llmcompare.workload.checks import MAX_PROMPTS, MAX_TOKENS, check_workload

# Every number of a scenario is finite and in a stated range (build.bounded): none the time estimate cannot honour
DAY_S = 86400.0  # a timeout, a duration: a day at most
MIN_RATE, MAX_RATE = 0.01, 1e6  # req/s: a probe or point at MIN_RATE sends a request every 100 s
MAX_CONCURRENCY = 100_000
MAX_PROBE_TOKENS, MAX_PROBE_TOP_K, MAX_PROBE_PROMPT = 64, 20, 4000  # checks.same_answer (20: vLLM's --max-logprobs)


def validate(s: Scenario) -> Scenario:
    """Checks across fields and of values; types were checked by build()."""
    if not s.model.path:
        raise ScenarioError("model.path: required (a local checkpoint directory)")
    if not s.engines:
        raise ScenarioError("engines: at least one engine is required")
    if s.name:  # load() gives the file's name when the file gives none
        check_name("name", s.name)
    check_degree("tensor_parallel", s.tensor_parallel)
    _check_engines(s)
    check_workload(s.workload)
    _check_load(s)
    _check_kernel_bench(s)
    check_profile(s.profile, s.load.concurrency, s.workload.input_lens, s.workload.output_lens)
    check_same_answer(s.checks.same_answer)
    return s


def _check_engines(s: Scenario) -> None:
    seen = set()
    for i, e in enumerate(s.engines):
        w = f"engines[{i}]"
        if not e.name:
            e.name = e.kind if e.kind not in seen else f"{e.kind}{i}"
        check_name(f"{w}.name", e.name)
        if e.name in seen:
            raise ScenarioError(f"{w}.name: {e.name!r} is used twice; engine names must be unique")
        seen.add(e.name)

        if e.kind not in ENGINES:
            raise ScenarioError(f"{w}.kind: {e.kind!r} is not valid; valid: {', '.join(ENGINES)}")
        if ENGINES[e.kind].command is None:
            if not e.base_url:
                raise ScenarioError(f"{w}.base_url: required for kind {e.kind} (an already-running server)")
        elif e.python and e.command:
            raise ScenarioError(f"{w}: give python or command, not both")
        if e.venv is not None:
            _venv(w, e)
        if e.port is not None and not 0 < e.port < 65536:
            raise ScenarioError(f"{w}.port: must be in 1..65535, got {e.port}")
        bounded(f"{w}.startup_timeout_s", e.startup_timeout_s, 1, DAY_S, "s")
        if not 0 <= e.nice <= 19:
            raise ScenarioError(f"{w}.nice: must be in 0..19 (a lower priority than the client's), got {e.nice}")
        if e.gemm_backend is not None:
            _backend(f"{w}.gemm_backend", e.gemm_backend)

        check_tensor_parallel(w, e, s.tensor_parallel)
        check_prefix_cache(w, e)


def _check_load(s: Scenario) -> None:
    wl = s.workload
    ld = s.load
    if not ld.concurrency and not ld.request_rate and not ld.capacity:
        raise ScenarioError("load: give at least one of concurrency (a list of integers), request_rate or capacity")
    for i, c in enumerate(ld.concurrency):
        bounded(f"load.concurrency[{i}]", c, 1, MAX_CONCURRENCY, "requests in flight")
    for i, r in enumerate(ld.request_rate):
        bounded(f"load.request_rate[{i}]", r, MIN_RATE, MAX_RATE, "req/s", inf="every request at once")
    bounded("load.burstiness", ld.burstiness, 0.01, 100, "(gamma shape; 1 is Poisson)", inf="a regular schedule")
    if ld.max_concurrency is not None:
        bounded("load.max_concurrency", ld.max_concurrency, 1, MAX_CONCURRENCY, "requests in flight")
    bounded("load.warmup_requests", ld.warmup_requests, 0, MAX_PROMPTS)
    bounded("load.request_timeout_s", ld.request_timeout_s, 0.1, DAY_S, "s")
    bounded("load.metrics_interval_s", ld.metrics_interval_s, 0.05, 3600, "s", zero_is_off=True)
    bounded("load.repeats", ld.repeats, 1, 1000)
    bounded("load.min_duration_s", ld.min_duration_s, 0.01, DAY_S, "s", zero_is_off=True)
    if ld.min_duration_s and wl.dataset not in GENERATED:  # a file dataset is shared out before the run
        raise ScenarioError(f"load.min_duration_s: needs a generated workload.dataset ({', '.join(GENERATED)}: a "
                            f"file's points have fixed sizes); got dataset {wl.dataset}")
    bounded("load.max_prompts_per_point", ld.max_prompts_per_point, 1, MAX_PROMPTS)
    bounded("load.max_attempts", ld.max_attempts, 1, 100)
    if ld.client_workers != "auto" and not (isinstance(ld.client_workers, int) and 1 <= ld.client_workers <= 256):
        raise ScenarioError(f"load.client_workers: {ld.client_workers!r} is not valid; valid: auto, or an integer "
                            "from 1 to 256 (client processes)")
    for what, xs in (("concurrency", ld.concurrency), ("request_rate", ld.request_rate)):
        dup = sorted({x for x in xs if xs.count(x) > 1})
        if dup:
            raise ScenarioError(f"load.{what}: {dup} listed twice; each load point must be distinct "
                                "(use load.repeats to measure a point several times)")
    for name in ("ttft_ms", "tpot_ms", "e2el_ms"):
        v = getattr(s.slo, name)
        if v is not None:
            bounded(f"slo.{name}", v, 0.001, DAY_S * 1000, "ms")
    for i, p in enumerate(s.percentiles):
        if not 0 < p < 100:
            raise ScenarioError(f"percentiles[{i}]: must be in (0, 100), got {p}")
    if ld.converge:
        check_converge(ld.converge, ld.request_rate, wl.dataset)
    if ld.capacity:
        rules.check(ld.capacity, s.slo, s.percentiles, wl.cells(), ld.restart_between_repeats or ld.interleave)


def _check_kernel_bench(s: Scenario) -> None:
    kb = s.kernel_bench
    for i, m in enumerate(kb.m):
        bounded(f"kernel_bench.m[{i}]", m, 1, MAX_TOKENS, "tokens")
    for i, b in enumerate(kb.backends):
        _backend(f"kernel_bench.backends[{i}]", b)
    if len(set(kb.backends)) != len(kb.backends):
        raise ScenarioError(f"kernel_bench.backends: {kb.backends} names a backend twice")
    for b in kb.python:
        _backend(f"kernel_bench.python[{b!r}]", b)
    bounded("kernel_bench.rep_ms", kb.rep_ms, 1, 60_000, "ms")
    bounded("kernel_bench.timeout_s", kb.timeout_s, 1, DAY_S, "s")
    bounded("kernel_bench.group_size", kb.group_size, 1, 4096)
    for i, nk in enumerate(kb.extra_shapes):
        if len(nk) != 2 or min(nk) <= 0:
            raise ScenarioError(f"kernel_bench.extra_shapes[{i}]: expected [N, K] with N, K > 0, got {nk}")
    check_degree("kernel_bench.tensor_parallel", kb.tensor_parallel)
    kb.tensor_parallel = kb.tensor_parallel or s.tensor_parallel


def _venv(w: str, e: Engine) -> None:

    if ENGINES[e.kind].command is None:
        raise ScenarioError(f"{w}.venv: kind {e.kind} is a running server, not launched in an environment")
    if e.python or e.command:
        raise ScenarioError(f"{w}: give one of python, command or venv")
    check_venv(e.venv, e.kind, f"{w}.venv")


def _backend(where: str, name: str) -> None:

    try:
        backend(name)
    except UnknownBackend as e:
        raise ScenarioError(f"{where}: {e}") from None


def check(cap: Capacity, slo, percentiles: list[float], cells: list, restart: bool) -> None:
    where = "load.capacity"
    if not any(getattr(slo, m) is not None for m in SLO_METRICS):
        raise ScenarioError(f"{where}: needs at least one SLO: set slo.ttft_ms, slo.tpot_ms or slo.e2el_ms")
    if cap.slo_percentile not in percentiles:
        raise ScenarioError(f"{where}.slo_percentile: {cap.slo_percentile:g} is not among percentiles "
                            f"{[float(p) for p in percentiles]}; add it there")
    bounded(f"{where}.min_rate", cap.min_rate, MIN_RATE, MAX_RATE, "req/s")
    bounded(f"{where}.max_rate", cap.max_rate, MIN_RATE, MAX_RATE, "req/s")
    if not cap.min_rate < cap.max_rate:
        raise ScenarioError(f"{where}: needs 0 < min_rate < max_rate (finite), got min_rate {cap.min_rate:g}, "
                            f"max_rate {cap.max_rate:g}")
    if not 0 < cap.tolerance < 1:
        raise ScenarioError(f"{where}.tolerance: a fraction in (0, 1), got {cap.tolerance:g}")
    if len(cells) != 1:
        raise ScenarioError(f"{where}: searches one workload cell; workload gives {len(cells)} (input_len x "
                            "output_len, x prefix_len x num_prefixes for shared-prefix): give single values")
    if restart:
        raise ScenarioError(f"{where}: cannot be combined with load.restart_between_repeats (one server per search)")
    bounded(f"{where}.max_probes", cap.max_probes, 2, 1000)


def check_profile(p: Profile, concurrency: list[int], input_lens: list[int], output_lens: list[int]) -> None:
    for name, want, axis in (("input_len", p.input_len, input_lens), ("output_len", p.output_len, output_lens)):
        if want is not None and want not in axis:
            raise ScenarioError(f"profile.{name}: {want} is not a cell of the grid; valid: workload.{name} "
                                f"({', '.join(map(str, axis))}) or null (every cell)")
    for i, c in enumerate(p.points):
        if c not in concurrency:
            raise ScenarioError(f"profile.points[{i}]: {c} is not a load point; valid: the concurrencies of "
                                f"load.concurrency ({', '.join(map(str, concurrency)) or 'none'})")
    if len(set(p.points)) != len(p.points):
        raise ScenarioError(f"profile.points: {p.points} names a point twice")
    bounded("profile.seconds", p.seconds, 0.01, 60, "s (a capture window)")
    bounded("profile.window_wave", p.window_wave, 2, 100, "waves finished before the captured window (the "
            "uncaptured one a wave earlier)")
    if p.waves is not None:
        bounded("profile.waves", p.waves, p.window_wave + 2, 1000, "waves (profile.window_wave + 2 at least: the "
                "captured window's wave and one to spare)")
    bounded("profile.telemetry_interval_ms", p.telemetry_interval_ms, 10, 60_000, "ms", zero_is_off=True)


def check_same_answer(c: SameAnswerCheck) -> None:
    where = "checks.same_answer"
    if not c.prompt.strip() or len(c.prompt) > MAX_PROBE_PROMPT:
        raise ScenarioError(f"{where}.prompt: must be a non-empty text of at most {MAX_PROBE_PROMPT} characters, got "
                            f"{len(c.prompt)} characters")
    bounded(f"{where}.max_tokens", c.max_tokens, 1, MAX_PROBE_TOKENS, "output tokens")
    bounded(f"{where}.top_k", c.top_k, 1, MAX_PROBE_TOP_K, "logprobs per token (vLLM's default --max-logprobs is 20)")
    bounded(f"{where}.max_kl", c.max_kl, 0, 10, "nats")
    bounded(f"{where}.tie_margin", c.tie_margin, 0, 10, "nats")
    bounded(f"{where}.timeout_s", c.timeout_s, 1, 3600, "s")


def check_converge(c: Converge, request_rate: list[float], dataset: str) -> None:
    where = "load.converge"
    bounded(f"{where}.rel_halfwidth", c.rel_halfwidth, 0.001, 0.5, "(a fraction of the rate: 0.02 is +-2%)")
    bounded(f"{where}.max_s", c.max_s, 30, DAY_S, "s (MSER-5 and 10 batch means need at least 30 s of series)")
    if math.inf in request_rate:
        raise ScenarioError(f"{where}: cannot be combined with load.request_rate .inf (every request sent at once: "
                            "nothing left to stop sending)")
    if dataset not in GENERATED:  # the point's prompts are made for max_s; a file's are shared out before the run
        raise ScenarioError(f"{where}: needs a generated workload.dataset ({', '.join(GENERATED)}: a file's points "
                            f"have fixed sizes); got dataset {dataset}")
