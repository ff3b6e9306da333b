"""The report, rendered from committed result files made by the real code paths: tests/data/report-serve (a
serve-bench run of two real vLLM CPU servers, made from tests/data/report-scenario.yaml) and tests/data/h200-small
(small copies of committed H200 runs: kernel-bench, and TurboMind 0.18 / vLLM serve-bench; its README says how they
were cut). Nothing here reads reports/: a new run committed there cannot move a test."""

import json
import math
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from llmcompare.report.build import build_report
from llmcompare.report.doc import fmt

ROOT = Path(__file__).resolve().parents[1]
SERVE = ROOT / "tests/data/report-serve"
SMALL = ROOT / "tests/data/h200-small"  # copies of reports/h200-*: README.md there
KERNELS = SMALL / "h200-kernels"


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
    md = (report / "report.md").read_text()
    rows = md_rows(md.split("## End to end", 1)[1], "engine")
    want, wl = [], run["scenario"]["workload"]  # a /1 file: its points' cell is the scenario's one workload
    for name, e in run["engines"].items():
        for p in e["points"]:
            m = p["metrics"]
            want.append([name, f"{p['label']} in={wl['input_len']} out={wl['output_len']}", "1", "1", p["status"], str(m["completed"]), str(m["failed"]),
                         fmt(m["output_throughput"]), "–", "–", "–", fmt(m["median_ttft_ms"]), fmt(m["p99_ttft_ms"]),
                         fmt(m["median_tpot_ms"]), fmt(m["p99_tpot_ms"]), fmt(m["median_itl_ms"]), fmt(m["p99_itl_ms"]),
                         "–", fmt(p["server_metrics"].get("mean_num_requests_running")),
                         "–", "–", "–", "–", "–", ""])  # a /1 file: no prefix cache, workers, engine counters or TTFT split
    assert rows == want


def test_the_verdict_leads_and_says_when_there_is_no_interval(report):
    md = (report / "report.md").read_text()
    assert md.index("## Verdict: output throughput against vllm-a") < md.index("## End to end")
    run = json.loads((SERVE / "run.json").read_text())
    a = {p["label"]: p["metrics"]["output_throughput"] for p in run["engines"]["vllm-a"]["points"]}
    rows = md_rows(md, "engine")  # the verdict table comes first
    assert [r[:2] for r in rows] == [["vllm-b", "c=1 in=64 out=32"], ["vllm-b", "c=4 in=64 out=32"]]
    for row in rows:
        label = row[1].split()[0]  # the /1 file's labels name the load only
        b = next(p for p in run["engines"]["vllm-b"]["points"] if p["label"] == label)["metrics"]["output_throughput"]
        assert row[4] == f"{100 * (b / a[label] - 1):+.1f}% (no interval)"  # one run each, schema /1: no window
        assert row[5] == "no interval" and row[6] == "whole point"
    assert "vllm-b (0.32.0+cpu): no interval (one value each) at c=1 in=64 out=32" in md


def test_kernel_table_follows_the_inputs(report):
    md = (report / "report.md").read_text()
    kr = json.loads((KERNELS / "run.json").read_text())
    krows = md_rows(md, "shape")
    tm_down_m1 = next(p for p in kr["points"] if (p["backend"], p["shape"], p["m"]) == ("turbomind", "down", 1))
    row = next(r for r in krows if r[0] == "down" and r[2] == "turbomind")
    assert row[3] == fmt(tm_down_m1["graph_us"])


def test_attribution_and_references_are_stated(report):
    md = (report / "report.md").read_text()
    assert "Attribution: how much of each gap the GEMM kernels explain" in md
    assert "WARNING: the kernel run's shapes or layer count differ" in md  # tiny model vs Qwen2.5-7B kernels
    rows = md_rows(md.split("## Attribution", 1)[1], "engine")
    assert [(r[0], r[1], r[2]) for r in rows] == [("vllm-b", "vllm-a", "c=1 in=64 out=32"), ("vllm-b", "vllm-a", "c=4 in=64 out=32")]
    assert all(r[6] != "–" for r in rows)
    assert "vllm-b: GEMM backend turbomind (scenario gemm_backend)" in md
    assert "test reference: vllm-b 20% slower: published -20%" in md


def test_charts_are_written(report):
    for name in ("throughput.png", "latency_throughput.png", "gap.png"):
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
    # the test's own copy of the page, with a script that counts the images that loaded (no hook in the product)
    page = report / "report-test-copy.html"
    count = ("<script>window.addEventListener('load',()=>{const i=[...document.images];document.title='charts '+"
             "i.filter(x=>x.complete&&x.naturalWidth>0).length+'/'+i.length;});</script>")
    page.write_text((report / "report.html").read_text().replace("</head>", count + "</head>"))
    url = page.as_uri()
    dom = subprocess.run([*flags, "--dump-dom", url], capture_output=True, text=True, timeout=120).stdout
    page.unlink()
    n = len(list(report.glob("*.png")))
    assert f"<title>charts {n}/{n}</title>" in dom  # every chart the page names loaded
    shot = tmp_path / "page.png"
    subprocess.run([*flags, f"--screenshot={shot}", "--window-size=1200,2000", (report / "report.html").as_uri()],
                   capture_output=True, timeout=120)
    assert shot.stat().st_size > 20_000


def test_two_runs_of_the_same_engines_are_compared_side_by_side(tmp_path):
    other = tmp_path / "report-serve-again"
    shutil.copytree(SERVE, other)
    out = build_report([str(SERVE), str(other)], str(tmp_path / "r"), baseline="report-serve/vllm-a")
    md = (out / "report.md").read_text()
    rows = md_rows(md.split("## End to end", 1)[1], "engine")
    assert {r[0] for r in rows} == {"report-serve/vllm-a", "report-serve/vllm-b", "report-serve-again/vllm-a",
                                    "report-serve-again/vllm-b"}
    gaps = md_rows(md, "engine")  # the verdict table
    assert [r[4] for r in gaps if r[0] == "report-serve-again/vllm-a"] == ["+0.0% (no interval)"] * 2  # the same


H200 = SMALL / "h200-versions"


def test_kernel_facts_and_served_gemm_choices_of_the_h200_runs(tmp_path):
    """The real 0.18 and vLLM runs and kernel run of the H200; the 0.18 run.json given the GEMM choices that
    TurboMind printed in kernel-bench (real lines, tmgemm.Tally) and TM_GEMM_VERBOSE=1 in its env."""
    import lzma

    from llmcompare.engines.turbomind_log import summarize

    with lzma.open(H200 / "kernels-qwen-awq-h200-20261202-163848/worker-cublas-marlin-machete-turbomind.log.xz",
                   "rt") as f:
        choices = summarize(f).records()
    tm = tmp_path / "tm"
    tm.mkdir()
    run = json.loads((H200 / "qwen-awq-h200-20261202-162119/run.json").read_text())
    run["engines"]["turbomind"] |= {"gemm_choices": choices, "env": {"TM_GEMM_VERBOSE": "1"}}
    (tm / "run.json").write_text(json.dumps(run))
    out = build_report([str(tm), str(H200 / "qwen-awq-h200-20261202-163315"),
                        str(H200 / "kernels-qwen-awq-h200-20261202-163848")], str(tmp_path / "r"),
                       cross_machine=True)  # two runs: the machine is not recorded as one
    md = (out / "report.md").read_text()
    assert "turbomind (0.18.0) [instrumented: TM_GEMM_VERBOSE]" in md  # next to the engine, in the verdict
    assert "turbomind: TM_GEMM_VERBOSE=1 in its env: lmdeploy 0.18.0 prints one line per GEMM" in md
    served = {r[1]: r for r in md_rows(md.split("The kernel of each served GEMM", 1)[1], "engine")}
    assert len(served) == 60 and served["1x37888x3584"][4] == "8x128x64" and served["1x37888x3584"][3] == "[Gemm] tune"
    facts = {(r[0], r[2], r[4]): r for r in md_rows(md.split("Why each kernel takes its time", 1)[1], "backend")}
    head = ["backend", "engines", "shape", "N x K", "M", "graph µs", "kernel", "kernel from", "CTA tile", "split-K",
            "tiles", "CTAs per SM", "MB moved", "% of copy bandwidth", "why slow (computed)"]
    row = dict(zip(head, facts[("turbomind", "gate_up", "1")], strict=True))
    assert row["engines"] == "turbomind" and row["kernel from"] == "served log" and row["CTA tile"] == "8x128x64"
    assert row["tiles"] == str(math.ceil(37888 / 128)) == "296" and row["CTAs per SM"] == "2.24" and row["split-K"] == "1"
    assert row["why slow (computed)"].startswith("1.7x turbomind@0.17.0's 30.7 µs; 296 CTAs on 132 SMs")
    assert facts[("machete", "qkv", "1")][1] == "vllm" and facts[("machete", "qkv", "1")][8] == "tile not reported"
    assert ("turbomind@0.17.0", "qkv", "1") in facts and facts[("turbomind@0.17.0", "qkv", "1")][1] == "–"
    # the served runs reached batches above 64 (c=256): the measured M covering them is shown too
    assert ("turbomind", "qkv", "256") in facts and "SMs: cublas 132 (NVIDIA H200 (kernel run))" in md


def test_a_kernel_run_with_lm_head_enters_the_attribution(tmp_path):
    """The H200 kernel run with cuBLAS lm_head points added (made up: that run did not time lm_head); only
    cuBLAS has them, as kernel-bench's worker skips the int4 backends on lm_head."""
    run = json.loads((H200 / "kernels-qwen-awq-h200-20261202-163848/run.json").read_text())
    run["shapes"].append({"name": "lm_head", "n": 152064, "k": 3584, "per_layer": 0})
    run["points"] += [{"backend": "cublas", "shape": "lm_head", "n": 152064, "k": 3584, "m": m, "status": "ok",
                       "graph_us": 160.0 * max(1, m / 64)} for m in (1, 64, 256)]
    k = tmp_path / "k"
    k.mkdir()
    (k / "run.json").write_text(json.dumps(run))
    serve = [str(H200 / "qwen-awq-h200-20261202-162119"), str(H200 / "qwen-awq-h200-20261202-163315")]
    with_head = (build_report(serve + [str(k)], str(tmp_path / "a"), cross_machine=True) / "report.md").read_text()
    without = (build_report(serve + [str(H200 / "kernels-qwen-awq-h200-20261202-163848")], str(tmp_path / "b"),
                             cross_machine=True) / "report.md").read_text()
    assert "lm_head measured (cuBLAS fp16, added to every engine)" in with_head
    assert "lm_head not measured: left out" in without
    a = md_rows(with_head.split("## Attribution", 1)[1], "engine")
    b = md_rows(without.split("## Attribution", 1)[1], "engine")
    # the cells with a verdict (TurboMind c=1 and vLLM c=64 each had a repeat untrusted at its first attempt: left out)
    assert [r[:3] for r in a] == [r[:3] for r in b] and len(a) == 2
    assert all(float(x[8]) > float(y[8]) for x, y in zip(a, b, strict=True))  # GEMM shares grow with lm_head
    assert [x[6] for x in a] == [y[6] for y in b]  # the predicted gap does not move (to the printed digit)


def test_a_backend_timed_with_another_engine_version_is_named_beside_the_attribution(tmp_path):
    """The H200 kernel run as if its `turbomind` had been timed in an lmdeploy 0.17.0 environment without the @
    label (session 25's H100 run of 0.17 was: `--backends turbomind --python turbomind=<0.17 env>`): the served
    TurboMind is 0.18.0, so its attribution uses another version's kernels, and the report says so."""
    run = json.loads((H200 / "kernels-qwen-awq-h200-20261202-163848/run.json").read_text())
    for w in run["workers"]:
        if "turbomind" in w["backends"]:
            w["env"]["versions"]["lmdeploy"] = "0.17.0"
    k = tmp_path / "k"
    k.mkdir()
    (k / "run.json").write_text(json.dumps(run))
    serve = [str(H200 / "qwen-awq-h200-20261202-162119"), str(H200 / "qwen-awq-h200-20261202-163315")]
    part = (build_report(serve + [str(k)], str(tmp_path / "r"), cross_machine=True) / "report.md").read_text()
    part = part.split("## Attribution", 1)[1]
    assert ("WARNING: the kernel run timed turbomind with lmdeploy 0.17.0, and turbomind served lmdeploy 0.18.0: time "
            "each version under its own name, e.g. kernel-bench --backends turbomind@0.17.0") in part
    assert "applies the kernels as timed, so it is not about the version served" in part
    ok = (build_report(serve + [str(H200 / "kernels-qwen-awq-h200-20261202-163848")], str(tmp_path / "ok"),
                       cross_machine=True) / "report.md").read_text().split("## Attribution", 1)[1]
    assert "WARNING: the kernel run timed" not in ok  # its own version: no warning
    assert md_rows(part, "engine") and len(md_rows(part, "engine")) == len(md_rows(ok, "engine"))


def test_a_kernel_run_above_the_decode_batch_is_not_modelled(tmp_path, report):
    """A kernel run of prefill sizes only (M >= 512; the session-33 run on the H100 was one) must not price a
    decode step at the table's first M: the attribution says the point is not modelled and why."""
    run = json.loads((KERNELS / "run.json").read_text())
    run["points"] = [p for p in run["points"] if p["m"] >= 512]
    k = tmp_path / "k"
    k.mkdir()
    (k / "run.json").write_text(json.dumps(run))
    md = (build_report([str(SERVE), str(k)], str(tmp_path / "r")) / "report.md").read_text()
    rows = md_rows(md.split("## Attribution", 1)[1], "engine")
    full = md_rows((report / "report.md").read_text().split("## Attribution", 1)[1], "engine")
    assert rows and [r[:3] for r in rows] == [r[:3] for r in full]
    assert all(r[6].startswith("not modelled: the kernel table starts at M = 512") and r[8] == "–" for r in rows)
    assert not any(r[6].startswith("not modelled") for r in full)
