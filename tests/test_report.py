"""The report, rendered from committed result files made by the real code paths: tests/data/report-serve (a
serve-bench run of two real vLLM CPU servers, made from tests/data/report-scenario.yaml) and reports/h200-kernels
(kernel-bench on the H200)."""

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from llmcompare.report import build_report, fmt

ROOT = Path(__file__).resolve().parents[1]
SERVE = ROOT / "tests/data/report-serve"
KERNELS = ROOT / "reports/h200-kernels"


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    out = tmp_path_factory.mktemp("report")
    build_report([str(SERVE), str(KERNELS)], str(out))
    return out


def md_rows(md: str, first_header: str) -> list[list[str]]:
    lines = md.splitlines()
    i = next(i for i, ln in enumerate(lines) if ln.startswith(f"| {first_header} |"))
    rows = []
    for ln in lines[i + 2:]:
        if not ln.startswith("|"):
            break
        rows.append([c.strip() for c in ln.strip("|").split("|")])
    return rows


def test_serve_table_equals_the_run_files(report):
    run = json.loads((SERVE / "run.json").read_text())
    rows = md_rows((report / "report.md").read_text(), "engine")
    want = []
    for name, e in run["engines"].items():
        for p in e["points"]:
            m = p["metrics"]
            want.append([name, p["label"], p["status"], str(m["completed"]), str(m["failed"]),
                         fmt(m["request_throughput"]), fmt(m["output_throughput"]), fmt(m["total_token_throughput"]),
                         fmt(m["median_ttft_ms"]), fmt(m["p99_ttft_ms"]), fmt(m["median_tpot_ms"]), fmt(m["p99_tpot_ms"]),
                         fmt(m["median_itl_ms"]), fmt(m["p99_itl_ms"]), fmt(m["median_e2el_ms"]),
                         fmt(p["server_metrics"].get("mean_num_requests_running"))])
    assert rows == want


def test_gap_and_kernel_tables_follow_the_inputs(report):
    md = (report / "report.md").read_text()
    run = json.loads((SERVE / "run.json").read_text())
    a = {p["label"]: p["metrics"]["output_throughput"] for p in run["engines"]["vllm-a"]["points"]}
    gaps = md_rows(md, "engine")  # the first table is serve; find the gap table by its header instead
    gaps = md_rows(md.split("### Gap against vllm-a", 1)[1], "engine")
    for row in gaps:
        b = next(p for p in run["engines"]["vllm-b"]["points"] if p["label"] == row[1])["metrics"]["output_throughput"]
        assert row[4] == fmt(100 * (b / a[row[1]] - 1))
    kr = json.loads((KERNELS / "run.json").read_text())
    krows = md_rows(md, "shape")
    tm_down_m1 = next(p for p in kr["points"] if (p["backend"], p["shape"], p["m"]) == ("turbomind", "down", 1))
    row = next(r for r in krows if r[0] == "down" and r[2] == "turbomind")
    assert row[3] == fmt(tm_down_m1["graph_us"])


def test_attribution_and_references_are_stated(report):
    md = (report / "report.md").read_text()
    assert "Attribution: how much of the gap the GEMM kernels explain" in md
    assert "WARNING: the kernel run's shapes or layer count differ" in md  # tiny model vs Qwen2.5-7B kernels
    rows = md_rows(md.split("## Attribution", 1)[1], "engine")
    assert [r[1] for r in rows] == ["c=1", "c=4"] and all(r[5] != "–" for r in rows)
    assert "vllm-b: GEMM backend turbomind (scenario gemm_backend)" in md
    assert "test reference: vllm-b 20% slower: published -20%" in md


def test_charts_are_written(report):
    for name in ("throughput.png", "latency_throughput.png", "percentiles.png", "gap.png"):
        assert (report / name).stat().st_size > 10_000
    assert (report / "report.md").read_text().count("![") == len(list(report.glob("*.png")))


def chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


def test_html_renders_in_headless_chromium_with_every_chart(report, tmp_path):
    exe = chromium()
    if exe is None:
        if os.environ.get("LLMCOMPARE_REQUIRE_CHROMIUM"):
            pytest.fail("LLMCOMPARE_REQUIRE_CHROMIUM is set but chromium is not installed")
        pytest.skip("chromium is not installed (apt-get install chromium)")
    flags = [exe, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             f"--user-data-dir={tmp_path / 'profile'}", "--virtual-time-budget=10000"]
    url = (report / "report.html").as_uri()
    dom = subprocess.run([*flags, "--dump-dom", url], capture_output=True, text=True, timeout=120).stdout
    n = len(list(report.glob("*.png")))
    assert f"<title>charts {n}/{n}</title>" in dom  # the page's onload script counted every image as loaded
    shot = tmp_path / "page.png"
    subprocess.run([*flags, f"--screenshot={shot}", "--window-size=1200,2000", url], capture_output=True, timeout=120)
    assert shot.stat().st_size > 20_000


def test_two_runs_of_the_same_engines_are_compared_side_by_side(tmp_path):
    other = tmp_path / "report-serve-again"
    shutil.copytree(SERVE, other)
    out = build_report([str(SERVE), str(other)], str(tmp_path / "r"), baseline="report-serve/vllm-a")
    rows = md_rows((out / "report.md").read_text(), "engine")
    assert {r[0] for r in rows} == {"report-serve/vllm-a", "report-serve/vllm-b", "report-serve-again/vllm-a",
                                    "report-serve-again/vllm-b"}
    gaps = md_rows((out / "report.md").read_text().split("### Gap against report-serve/vllm-a", 1)[1], "engine")
    assert [r[4] for r in gaps if r[0] == "report-serve-again/vllm-a"] == ["0.0", "0.0"]  # the same numbers
