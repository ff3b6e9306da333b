"""GPU telemetry (serve/telemetry.py): nvidia-smi's CSV parsed and summarised; no nvidia-smi is not an error; and the
scenario's profile section is validated with errors that name the field."""

import gzip
import json
import shutil

import pytest

from llmcompare import scenario
from llmcompare.errors import ScenarioError
from llmcompare.serve import telemetry

# recorded with: nvidia-smi --query-gpu=index,timestamp,clocks.sm,power.draw,memory.used
#                --format=csv,noheader,nounits -lms 200   (two GPUs; one line cut short; one [N/A])
CSV = """0, 2026/12/02 21:10:00.000, 1980, 400.00, 70000
1, 2026/12/02 21:10:00.010, 1980, 100.00, 1000
0, 2026/12/02 21:10:00.200, 1965, 600.00, 70100
1, 2026/12/02 21:10:00.210, 1980, 100.00, 1000
0, 2026/12/02 21:10:00.400, 1755, 500.00, 70200
1, 2026/12/02 21:10:00.410, [N/A], 100.00, 1000
0, 2026/12/02 21:10:00.6
"""


def test_parse_and_summarise_recorded_nvidia_smi_output(tmp_path):
    samples = telemetry.parse(CSV)
    assert len(samples) == 6 and {x.gpu for x in samples} == {0, 1}
    assert samples[5].sm_clock_mhz is None and samples[2].power_w == 600.0
    s = telemetry.summarize(samples, output_tokens=100)
    # GPU 0: trapezoids 0.2 s * 500 W + 0.2 s * 550 W = 210 J; GPU 1: 0.4 s * 100 W = 40 J
    assert s.available and s.energy_j == pytest.approx(250.0) and s.duration_s == pytest.approx(0.4)
    assert s.mean_power_w == pytest.approx(625.0) and s.j_per_output_token == pytest.approx(2.5)
    assert s.sm_clock_mhz_min == 1755 and s.memory_used_mib_max == 70200 and s.gpus == [0, 1]


def test_without_nvidia_smi_telemetry_is_recorded_as_unavailable(tmp_path, monkeypatch):
    if shutil.which("nvidia-smi"):
        pytest.skip("this machine has nvidia-smi")
    with telemetry.Telemetry(200) as t:
        pass
    s = t.save(tmp_path / "x.telemetry.jsonl.gz", {"point": 0}, None)
    assert not s.available and s.why_not == "nvidia-smi not on PATH"
    assert not (tmp_path / "x.telemetry.jsonl.gz").exists()
    assert telemetry.Telemetry(0).summary(10).why_not.startswith("off")


def test_samples_are_appended_per_point_gzipped(tmp_path):
    t = telemetry.Telemetry(200)
    t.why_not, t.samples = None, telemetry.parse(CSV)
    f = tmp_path / "e.telemetry.jsonl.gz"
    t.save(f, {"point": 0}, None)
    t.save(f, {"point": 1}, None)
    with gzip.open(f, "rt") as fi:
        rows = [json.loads(x) for x in fi]
    assert len(rows) == 12 and rows[0]["point"] == 0 and rows[-1]["point"] == 1 and rows[0]["power_w"] == 400.0


def test_profile_section_is_validated(tmp_path):
    base = {"model": {"path": str(tmp_path)}, "engines": [{"name": "v", "kind": "vllm"}],
            "load": {"concurrency": [1, 64]}}
    f = tmp_path / "s.yaml"

    def load(profile):
        f.write_text(json.dumps({**base, "profile": profile}))
        return scenario.load(str(f))

    assert load({"points": [64], "seconds": 1.5}).profile.points == [64]
    assert load({}).profile.points == [] and load({}).profile.telemetry_interval_ms == 200
    with pytest.raises(ScenarioError, match=r"profile.points\[0\]: 32 is not a load point; valid: .*\(1, 64\)"):
        load({"points": [32]})
    with pytest.raises(ScenarioError, match=r"profile.seconds: must be in 0.01..60 s \(a capture window\), got 0.0"):
        load({"points": [64], "seconds": 0})
    with pytest.raises(ScenarioError, match="profile: unknown key 'secs'; valid keys: points, seconds"):
        load({"secs": 2})
