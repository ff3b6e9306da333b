#!/usr/bin/env python3
"""Client capacity: how much streamed load llmcompare's load generator sustains on one core, and how much timing
error it adds, side by side in one run with every peer benchmark client against the same local server:
vLLM's `vllm bench serve`, guidellm, NVIDIA's aiperf and kubernetes-sigs' inference-perf. A benchmark, not a test.

  flock /tmp/llmcompare-cpu.lock .venv/bin/python scripts/client_capacity.py [--install-peers]
      [--clients NAME...] [--concurrency C...] [--out reports/client-capacity.json]

The server (tests/fakeserver.py, pinned to core 1) answers every request on a known schedule: first chunk TTFT_MS
after the request arrives, then one chunk every ITL_MS, OUTPUT_LEN chunks of one token, on absolute deadlines;
it reports how late its own sends were (/stats). Each client runs alone on core 0 (taskset, its child processes
included) at each concurrency of the ladder: a closed loop of c streamed /v1/completions requests, max(64, 4c)
requests measured after min(c, 16) warm-up requests, 16 tokens in, exactly 64 out (max_tokens, ignore_eos).
Added error = measured minus scheduled (p99 ITL - ITL_MS; p99 TTFT - TTFT_MS), each read from the client's own
result files. Peers are installed from PyPI, pinned (PEERS), each in its own venv under ~/.cache/llmcompare/peers.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # the fake server lives with the tests, which use it too
import fakeserver  # noqa: E402

TTFT_MS, ITL_MS, OUTPUT_LEN, INPUT_LEN = 20.0, 5.0, 64, 16
CONCURRENCY = [1, 16, 64, 128, 256, 512]
CACHE = Path("~/.cache/llmcompare").expanduser()
# where the peers' venvs are: --install-peers makes them here; on the GPU host, the bundle's peer folders
# (scripts/gpu/bundle.py --peers: /tmp/llmc/peers/<name>/bin/python and the peer's commands)
PEERS_DIR = Path(os.environ.get("LLMCOMPARE_PEERS_DIR", CACHE / "peers"))
# name -> (PyPI requirement, python it needs, venv); the venvs are made by --install-peers
PEERS = {
    "guidellm": ("guidellm==0.8.1", "3.11", PEERS_DIR / "guidellm"),
    "aiperf": ("aiperf==0.13.0", "3.11", PEERS_DIR / "aiperf"),
    "inference_perf": ("inference-perf==0.7.0", "3.12", PEERS_DIR / "inference-perf"),  # Requires-Python >=3.12
}
CLIENTS = ["llmcompare", "vllm_bench_serve", "guidellm", "aiperf", "inference_perf"]
LABELS = {"llmcompare": "llmcompare", "vllm_bench_serve": "vLLM bench serve", "guidellm": "guidellm",
          "aiperf": "aiperf", "inference_perf": "inference-perf"}
CLIENT_TIMEOUT_S = 300
# One core each: the peers that start worker processes get one (guidellm's default is 10 spawned processes,
# inference-perf's os.cpu_count(), which ignores taskset; aiperf's own formula already gives 1 here). On one
# core this made guidellm faster (2,206 against 1,943 tok/s at concurrency 16) and its start 2x quicker.
INFERENCE_PERF_WORKERS = 1
CLIENT_CORES = "0"  # taskset's core list for the clients (scripts/client_scaling.py gives its own)


def guidellm_env(workers: int = 1) -> dict:
    return {"GUIDELLM__MAX_WORKER_PROCESSES": str(workers)}


GUIDELLM_ENV = guidellm_env(1)


def n_requests(c: int) -> int:
    return max(64, 4 * c)


def n_warmup(c: int) -> int:
    return min(c, 16)


def pinned(cmd: list[str], cores: str = CLIENT_CORES) -> list[str]:
    return ["taskset", "-c", cores, *cmd]


def run(cmd: list[str], cwd: Path | None = None, env: dict | None = None, ok=(0,),
        cores: str = CLIENT_CORES) -> subprocess.CompletedProcess:
    p = subprocess.run(pinned(cmd, cores), capture_output=True, text=True, cwd=cwd, timeout=CLIENT_TIMEOUT_S,
                       env={**os.environ, **(env or {})})
    if p.returncode not in ok:
        raise RuntimeError(f"exit {p.returncode}: {(p.stderr or p.stdout)[-1500:]}")
    return p


# ---- installing the peers --------------------------------------------------------------------------------------
def find_python(version: str) -> str:
    for exe in (f"python{version}", str(Path(f"~/.pyenv/versions/{version}").expanduser()) + "/bin/python"):
        path = shutil.which(exe) or (exe if Path(exe).exists() else None)
        # a pyenv shim is on PATH for every version pyenv has, but runs only the ones selected (global, local)
        if path and subprocess.run([path, "-c", ""], capture_output=True).returncode == 0:
            return path
    for d in sorted(Path("~/.pyenv/versions").expanduser().glob(f"{version}.*"), reverse=True):
        if (d / "bin/python").exists():
            return str(d / "bin/python")
    raise SystemExit(f"no python {version} found to make a venv with (install one, e.g. with pyenv)")


def install_peers() -> None:
    for name, (req, pyver, venv) in PEERS.items():
        dist, want = req.split("==")
        if peer_version(name) == want:
            print(f"{name} {want} already in {venv}")
            continue
        subprocess.run([find_python(pyver), "-m", "venv", "--clear", str(venv)], check=True)
        subprocess.run([str(venv / "bin/python"), "-m", "pip", "install", "-q", req], check=True)
        print(f"{name}: installed {req} in {venv}")


def peer_version(name: str) -> str | None:
    req, _, venv = PEERS[name]
    py = venv / "bin/python"
    if not py.exists():
        return None
    p = subprocess.run([str(py), "-c", f"import importlib.metadata as m; print(m.version({req.split('==')[0]!r}))"],
                       capture_output=True, text=True)
    return p.stdout.strip() or None


# ---- the clients: each returns output tok/s, p99 ITL, p99 TTFT (ms) read from its own result files --------------
def llmcompare_scenario(base: str, model_dir: str, c: int, out: Path) -> dict:
    from llmcompare.schema.scenario import Load

    load = {"concurrency": [c], "warmup_requests": n_warmup(c), "metrics_interval_s": 0}
    if "max_attempts" in getattr(Load, "__dataclass_fields__", {}):
        load["max_attempts"] = 1  # measure each point once, as every peer does (its trust verdict is kept)
    return {"name": f"cap-{c}", "model": {"path": model_dir},
            "engines": [{"name": "fake", "kind": "openai", "base_url": base}],
            "workload": {"input_len": INPUT_LEN, "output_len": OUTPUT_LEN, "num_prompts": n_requests(c)},
            "load": load, "percentiles": [50, 99], "output_dir": str(out)}


def run_llmcompare(base: str, model_dir: str, c: int, tmp: Path) -> dict:
    import yaml

    out = tmp / f"llmcompare-{c}"
    scen = tmp / f"cap-{c}.yaml"
    scen.write_text(yaml.safe_dump(llmcompare_scenario(base, model_dir, c, out)))
    # exit 3 (some requests failed) and 4 (a point the client could not time) still leave the point on disk
    run([sys.executable, "-m", "llmcompare.cli", "serve-bench", str(scen)], cwd=ROOT, ok=(0, 3, 4))
    (run_file,) = out.glob("*/run.json")
    pt = json.loads(run_file.read_text())["engines"]["fake"]["points"][-1]
    m = pt["metrics"]
    return {"completed": m["completed"], "output_tok_per_s": m["output_throughput"], "p99_itl_ms": m["p99_itl_ms"],
            "p99_ttft_ms": m["p99_ttft_ms"], "mean_itl_ms": m["mean_itl_ms"], "status": pt.get("status"),
            "trust": (pt.get("trust") or {}).get("reasons"), "loop_lag_p99_ms": (pt.get("client") or {}).get("loop_lag_p99_ms")}


def vllm_cmd(base: str, model_dir: str, c: int, rdir: Path) -> list[str]:
    return ["vllm", "bench", "serve", "--backend", "vllm", "--base-url", base, "--endpoint", "/v1/completions",
            "--model", fakeserver.MODEL, "--tokenizer", model_dir, "--dataset-name", "random",
            "--random-input-len", str(INPUT_LEN), "--random-output-len", str(OUTPUT_LEN),
            "--num-prompts", str(n_requests(c)), "--max-concurrency", str(c), "--request-rate", "inf", "--ignore-eos",
            "--num-warmups", str(n_warmup(c)), "--percentile-metrics", "ttft,itl", "--metric-percentiles", "50,99",
            "--save-result", "--result-dir", str(rdir), "--result-filename", "r.json"]


def run_vllm(py: str, base: str, model_dir: str, c: int, tmp: Path) -> dict:
    rdir = tmp / f"vllm-{c}"
    cmd = vllm_cmd(base, model_dir, c, rdir)
    run([py, "-m", "vllm.entrypoints.cli.main", *cmd[1:]], env={"VLLM_CPU_OMP_THREADS_BIND": "0"})
    r = json.loads((rdir / "r.json").read_text())
    return {"completed": r["completed"], "output_tok_per_s": r["output_throughput"], "p99_itl_ms": r["p99_itl_ms"],
            "p99_ttft_ms": r["p99_ttft_ms"], "mean_itl_ms": r["mean_itl_ms"]}


def guidellm_cmd(base: str, model_dir: str, c: int, out: Path, n: int | None = None) -> list[str]:
    profile = {"kind": "concurrent", "streams": [c], "warmup": {"value": n_warmup(c), "mode": "requests"}}
    return ["guidellm", "run",
            "--backend", f"kind=openai_http,target={base},model={fakeserver.MODEL},request_format=/v1/completions",
            "--profile", json.dumps(profile),
            "--constraint", f"kind=max_requests,count={(n or n_requests(c)) + n_warmup(c)}",
            "--data", f"kind=synthetic_text,prompt_tokens={INPUT_LEN},output_tokens={OUTPUT_LEN}",
            "--tokenizer", f"kind=huggingface_auto,model={model_dir}",
            "--output", f"kind=json,path={out}", "--disable-console"]


def run_guidellm(base: str, model_dir: str, c: int, tmp: Path, workers: int = 1, cores: str = CLIENT_CORES,
                 n: int | None = None) -> dict:
    """workers: guidellm's worker processes (GUIDELLM__MAX_WORKER_PROCESSES); n: requests measured."""
    out = tmp / f"guidellm-{c}-{workers}.json"
    cmd = guidellm_cmd(base, model_dir, c, out, n)
    run([str(PEERS["guidellm"][2] / "bin/guidellm"), *cmd[1:]], cwd=tmp, env=guidellm_env(workers), cores=cores)
    (b,) = json.loads(out.read_text())["benchmarks"]
    m = b["metrics"]
    ok = lambda k: m[k]["successful"]  # noqa: E731
    totals = m["request_totals"]
    return {"completed": totals["successful"], "failed": totals.get("errored", 0) + totals.get("incomplete", 0),
            "output_tok_per_s": ok("output_tokens_per_second")["mean"],
            # guidellm keeps no per-chunk timestamps (first and last token only): its ITL is each request's mean
            # gap, (last - first) / (tokens - 1), its percentiles taken over tokens
            "p99_itl_ms": ok("inter_token_latency_ms")["percentiles"]["p99"], "itl_kind": "per-request mean",
            "p99_ttft_ms": ok("time_to_first_token_ms")["percentiles"]["p99"],
            "mean_itl_ms": ok("inter_token_latency_ms")["mean"]}


def aiperf_cmd(base: str, model_dir: str, c: int, art: Path) -> list[str]:
    return ["aiperf", "profile", "--model", fakeserver.MODEL, "--url", base, "--endpoint-type", "completions",
            "--streaming", "--tokenizer", model_dir, "--concurrency", str(c), "--request-count", str(n_requests(c)),
            "--warmup-request-count", str(n_warmup(c)), "--isl", str(INPUT_LEN), "--isl-stddev", "0",
            "--osl", str(OUTPUT_LEN), "--osl-stddev", "0", "--extra-inputs", "ignore_eos:true",
            "--use-server-token-count", "--ui", "none", "--artifact-dir", str(art)]


def run_aiperf(base: str, model_dir: str, c: int, tmp: Path) -> dict:
    art = tmp / f"aiperf-{c}"
    cmd = aiperf_cmd(base, model_dir, c, art)
    run([str(PEERS["aiperf"][2] / "bin/aiperf"), *cmd[1:]], cwd=tmp)
    r = json.loads((art / "profile_export_aiperf.json").read_text())
    # aiperf's inter_token_latency is per request ((last - first) / (tokens - 1), i.e. TPOT); the gaps between
    # chunks, as vLLM defines ITL, are its inter_chunk_latency
    return {"completed": int(r["request_count"]["avg"]), "output_tok_per_s": r["output_token_throughput"]["avg"],
            "p99_itl_ms": r["inter_chunk_latency"]["p99"], "p99_ttft_ms": r["time_to_first_token"]["p99"],
            "mean_itl_ms": r["inter_chunk_latency"]["avg"]}


def inference_perf_config(base: str, model_dir: str, c: int, out: Path, workers: int = INFERENCE_PERF_WORKERS,
                          n: int | None = None) -> dict:
    n, w = n or n_requests(c), n_warmup(c)
    fixed = lambda v: {"min": v, "max": v, "mean": v, "std_dev": 0, "total_count": n + w, "type": "fixed"}  # noqa: E731
    return {
        "api": {"type": "completion", "streaming": True},
        "server": {"type": "vllm", "model_name": fakeserver.MODEL, "base_url": base, "ignore_eos": True},
        "tokenizer": {"pretrained_model_name_or_path": model_dir},
        "data": {"type": "random", "input_distribution": fixed(INPUT_LEN), "output_distribution": fixed(OUTPUT_LEN)},
        # no warm-up option: a first stage of w requests at the same concurrency is the warm-up, stage 1 is measured
        "load": {"type": "concurrent", "num_workers": workers,
                 "stages": [{"num_requests": w, "concurrency_level": c}, {"num_requests": n, "concurrency_level": c}]},
        "report": {"request_lifecycle": {"summary": True, "per_stage": True, "per_request": False,
                                         "percentiles": [50, 99]}},
        "storage": {"local_storage": {"path": str(out)}},
    }


def run_inference_perf(base: str, model_dir: str, c: int, tmp: Path, workers: int = INFERENCE_PERF_WORKERS,
                       cores: str = CLIENT_CORES, n: int | None = None) -> dict:
    """workers: inference-perf's load.num_workers (processes); n: requests measured."""
    import yaml

    out = tmp / f"inference-perf-{c}-{workers}"
    cfg = tmp / f"inference-perf-{c}-{workers}.yaml"
    cfg.write_text(yaml.safe_dump(inference_perf_config(base, model_dir, c, out, workers, n)))
    run([str(PEERS["inference_perf"][2] / "bin/inference-perf"), "--config_file", str(cfg)], cwd=tmp, cores=cores)
    r = json.loads((out / "stage_1_lifecycle_metrics.json").read_text())
    s = r["successes"]
    lat = s["latency"]
    return {"completed": s["count"], "failed": (r.get("failures") or {}).get("count", 0),
            "output_tok_per_s": s["throughput"]["output_tokens_per_sec"],
            "p99_itl_ms": lat["inter_token_latency"]["p99"] * 1000, "p99_ttft_ms": lat["time_to_first_token"]["p99"] * 1000,
            "mean_itl_ms": lat["inter_token_latency"]["mean"] * 1000}


def commands(base: str, model_dir: str, c: int) -> dict:
    """The exact options each client ran with (paths shortened), for the report."""
    t = Path("OUT")
    return {"llmcompare": "llmcompare serve-bench SCENARIO  with SCENARIO = "
                          + json.dumps(llmcompare_scenario(base, model_dir, c, t)),
            "vllm_bench_serve": " ".join(vllm_cmd(base, model_dir, c, t)),
            "guidellm": " ".join([*(f"{k}={v}" for k, v in GUIDELLM_ENV.items()), *guidellm_cmd(base, model_dir, c, t / "g.json")]),
            "aiperf": " ".join(aiperf_cmd(base, model_dir, c, t)),
            "inference_perf": "inference-perf --config_file CFG  with CFG = "
                              + json.dumps(inference_perf_config(base, model_dir, c, t))}


# ---- the run ---------------------------------------------------------------------------------------------------
def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    from llmcompare.engines import environments

    ap.add_argument("--vllm-python", default=str(environments.python_of(environments.location(environments.parse_spec("vllm-cpu")))))
    ap.add_argument("--model", default=str(CACHE / "models/qwen2-tiny-bf16"),
                    help="a checkpoint directory whose tokenizer the clients load")
    ap.add_argument("--concurrency", type=int, nargs="+", default=CONCURRENCY)
    ap.add_argument("--clients", nargs="+", choices=CLIENTS, default=CLIENTS)
    ap.add_argument("--install-peers", action="store_true", help="make the peers' venvs (pinned, from PyPI) first")
    ap.add_argument("--out", default=str(ROOT / "reports/client-capacity.json"))
    ap.add_argument("--table", metavar="JSON", help="only print the README table of a saved result")
    a = ap.parse_args()
    if a.table:
        return print(table(json.loads(Path(a.table).read_text())))
    if a.install_peers:
        install_peers()
    sys.path.insert(0, str(ROOT))
    from llmcompare.engines.server import free_port
    from llmcompare.models import checkpoint

    if not checkpoint.is_complete(a.model):
        checkpoint.make_model(a.model, "tiny")
    versions = {"python": platform.python_version(), "llmcompare": "this tree"}
    import aiohttp

    versions["aiohttp"] = aiohttp.__version__
    vp = subprocess.run([a.vllm_python, "-c", "import importlib.metadata as m; print(m.version('vllm'))"],
                        capture_output=True, text=True)
    versions["vllm_bench_serve"] = vp.stdout.strip() or None
    for name in PEERS:
        versions[name] = peer_version(name)
    missing = [c for c in a.clients if c in versions and versions[c] is None]
    if missing:
        raise SystemExit(f"not installed: {missing} (run with --install-peers)")
    runners = {"llmcompare": lambda c, t: run_llmcompare(base, a.model, c, t),
               "vllm_bench_serve": lambda c, t: run_vllm(a.vllm_python, base, a.model, c, t),
               "guidellm": lambda c, t: run_guidellm(base, a.model, c, t),
               "aiperf": lambda c, t: run_aiperf(base, a.model, c, t),
               "inference_perf": lambda c, t: run_inference_perf(base, a.model, c, t)}
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    srv = fakeserver.launch(port, "--ttft-ms", str(TTFT_MS), "--itl-ms", str(ITL_MS), "--cpu", "1")
    t_start = time.time()
    try:
        rows = ladder(base, a.concurrency, a.clients, runners)
    finally:
        srv.terminate()
        srv.wait()
    result = {"date": time.strftime("%Y-%m-%d"), "machine": machine(), "versions": versions,
              "schedule": {"ttft_ms": TTFT_MS, "itl_ms": ITL_MS, "output_len": OUTPUT_LEN, "input_len": INPUT_LEN},
              "client_cores": "core 0 (taskset -c 0, child processes included)", "server_cores": "core 1",
              "clients": a.clients, "commands_at_c64": commands("http://127.0.0.1:PORT", "MODEL", 64),
              "itl_definitions": {"guidellm": "per-request mean gap (guidellm keeps first and last token times only)",
                                  "aiperf": "inter_chunk_latency (gaps between chunks)",
                                  "others": "gaps between consecutive chunks carrying a choice"},
              "total_wall_s": round(time.time() - t_start), "rows": rows}
    Path(a.out).write_text(json.dumps(result, indent=1) + "\n")
    print(table(result))


def ladder(base: str, concurrency: list[int], clients: list[str], runners: dict) -> list[dict]:
    """Every client at every concurrency, in that order: one row per concurrency, each client's figures in it."""
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for c in concurrency:
            row = {"concurrency": c, "ideal_tok_per_s": c * OUTPUT_LEN / ((TTFT_MS + (OUTPUT_LEN - 1) * ITL_MS) / 1000),
                   "requests": n_requests(c), "warmup_requests": n_warmup(c)}
            for name in clients:
                fakeserver.stats(base, reset=True)
                t0 = time.time()
                try:
                    row[name] = runners[name](c, Path(tmp))
                except (RuntimeError, subprocess.TimeoutExpired, KeyError, OSError, ValueError) as e:
                    row[name] = {"error": f"{type(e).__name__}: {str(e)[-600:]}"}
                row[name]["wall_s"] = round(time.time() - t0, 1)
                # the client and the server hold one core each: a 1-minute load well above 2 means other
                # processes on the machine (not under the lock) shared the cores during this run
                row[name]["loadavg_1m"] = round(os.getloadavg()[0], 2)
                row[name]["server"] = fakeserver.stats(base)
                print(f"c={c} {name}: {json.dumps(row[name])}", flush=True)
            rows.append(row)
    return rows


def machine() -> str:
    cpu = next((ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text().splitlines()
                if ln.startswith("model name")), platform.processor())
    return f"{os.cpu_count()} cores ({cpu}), {platform.machine()}, Linux {platform.release()}"


def table(result: dict) -> str:
    """One row per concurrency; each client's cell: output tok/s / p99 ITL error ms / p99 TTFT error ms."""
    s = result["schedule"]
    clients = result["clients"]
    lines = ["| concurrency | ideal tok/s | " + " | ".join(LABELS[c] for c in clients) + " | server p99 lateness ms (min-max of the runs) |",
             "|" + "---|" * (len(clients) + 3)]
    for r in result["rows"]:
        cells = []
        for c in clients:
            d = r.get(c, {})
            if "output_tok_per_s" not in d:
                cells.append("failed")
                continue
            mark = "†" if d.get("itl_kind") else ""
            cells.append(f"{d['output_tok_per_s']:,.0f} / {d['p99_itl_ms'] - s['itl_ms']:.2f}{mark} / "
                         f"{d['p99_ttft_ms'] - s['ttft_ms']:.1f}")
        late = [r[c]["server"].get("p99_late_ms", 0) for c in clients if "server" in r.get(c, {})]
        lines.append(f"| {r['concurrency']} | {r['ideal_tok_per_s']:,.0f} | " + " | ".join(cells)
                     + f" | {min(late):.1f}-{max(late):.1f} |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
