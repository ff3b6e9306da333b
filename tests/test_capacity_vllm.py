"""The capacity search end to end against a real vLLM CPU server (tiny model): SLOs it meets at 1 req/s and
misses at 16 (measured on this machine: TPOT p99 32 ms at 1 req/s, 71 at 4, 134 at 16; TTFT p99 84, 163, 370)."""

import json
import re
import statistics
import subprocess

import pytest
import yaml
from test_e2e_vllm import group_gone, run_dir_of, scenario_file

from llmcompare.report.build import build_report

pytestmark = pytest.mark.vllm
SLO = {"ttft_ms": 300.0, "tpot_ms": 100.0}


def test_capacity_search_against_real_vllm(tmp_path, vllm_py, tiny_model, cli):
    f = scenario_file(tmp_path, vllm_py, tiny_model, concurrency=[], repeats=2,
                      capacity={"slo_percentile": 99, "min_rate": 1, "max_rate": 32, "tolerance": 0.5,
                                "max_probes": 6})
    data = yaml.safe_load(f.read_text())
    data["workload"].update(output_len=16, num_prompts=12)
    data["slo"] = SLO
    f.write_text(yaml.safe_dump(data))
    p = subprocess.run([*cli, "serve-bench", str(f)], capture_output=True, text=True, timeout=900)
    assert p.returncode in (0, 4), p.stderr[-3000:]
    assert "vllm-cpu: capacity search at TTFT p99 < 300 ms and TPOT p99 < 100 ms" in p.stderr
    assert "vllm-cpu: capacity probe 1 req/s passes" in p.stderr
    d = run_dir_of(tmp_path)
    run = json.loads((d / "run.json").read_text())
    eng = run["engines"]["vllm-cpu"]
    assert group_gone(eng["pid"])
    by_rate: dict[float, list] = {}
    for q in eng["points"]:  # every probe is a saved point, each repeat measured
        assert q["request_rate"] is not None and q["label"] == f"rate={q['request_rate']:g} in=64 out=16"
        by_rate.setdefault(q["request_rate"], []).append(q)
    rates = list(by_rate)
    assert rates[:2] == [1, 2] and all(len({q["repeat"] for q in by_rate[r]}) == 2 for r in rates)

    def worst(q):  # the SLO ratio from the saved figures, by hand
        m = q["metrics"]
        return max(m["p99_ttft_ms"] / SLO["ttft_ms"], m["p99_tpot_ms"] / SLO["tpot_ms"]) if not m["failed"] else 9e9

    mean = {r: statistics.fmean(worst(q) for q in by_rate[r] if q["status"] == "complete") for r in rates}
    lo = max(r for r in rates if mean[r] < 1)
    hi = min(r for r in rates if mean[r] >= 1 and r > lo)
    assert hi / lo - 1 <= 0.5 or len(rates) == 6  # bisected to the tolerance, or out of probes
    out = build_report([str(d)], str(tmp_path / "report"))
    md = (out / "report.md").read_text()
    m = re.search(r"At TTFT p99 < 300 ms and TPOT p99 < 100 ms, vllm-cpu \(\S+\) holds ([\d.]+) \[([\d.]+), ([\d.]+)\] "
                  r"req/s \(bracket: passes at ([\d.]+), fails at ([\d.]+) req/s", md)
    assert m, md[:3000]
    est, low, high, b_lo, b_hi = map(float, m.groups())
    assert (b_lo, b_hi) == (pytest.approx(lo, rel=5e-3), pytest.approx(hi, rel=5e-3))  # printed to 3 digits
    assert lo - 0.006 <= low <= est <= high <= hi + 0.006  # printed to 2 decimals
