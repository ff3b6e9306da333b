"""Older serve-bench files, read as the current records: each step fills in what its files did not carry, from
what they did (run.ServeRun.from_json applies them in order; the caller's dict is never changed).

  /1 -> /2                points had no repeats, attempts or trust checks
  /2 -> /3                points did not carry their workload lengths
  shared-prefix (any /3)  points did not carry prefix_len / num_prefixes (before they could be grid axes)
  machine (any)           engine records did not carry their machine: the run's host stands for it
  no_steady (any)         MSER-5's reason began "no steady state: ", which every place that shows it says first
                          (before 2026-12-05): dropped
"""

from __future__ import annotations

import json
import math


def upgrade(d: dict) -> dict:
    """A serve-bench run.json as read, as the current ServeRun's fields expect it."""
    if d.get("schema") == "llmcompare.serve-bench/1":
        d = _serve_v1(d)
    if d.get("schema") in ("llmcompare.serve-bench/1", "llmcompare.serve-bench/2"):
        d = _serve_v2(d)
    return _no_steady_reasons(_machines(_shared_prefix_cells(d)))


def _no_steady_reasons(d: dict) -> dict:
    """Points' no_steady as MSER-5 words it now: without the "no steady state: " it began with before 2026-12-05."""
    old = "no steady state: "
    points = [p for e in d.get("engines", {}).values() for p in e.get("points", [])]
    if not any(str(p.get("no_steady") or "").startswith(old) for p in points):
        return d
    d = json.loads(json.dumps(d))  # the caller's dict is left as it was
    for e in d["engines"].values():
        for p in e.get("points", []):
            if str(p.get("no_steady") or "").startswith(old):
                p["no_steady"] = p["no_steady"][len(old):]
    return d


def _machines(d: dict) -> dict:
    """Engine records written before each carried its machine (schema/machine.py): the run's host stands for it,
    marked `source: run host`; its key is the run (one process, one machine) unless the run was resumed."""
    engines = d.get("engines", {})
    if not engines or all("machine" in e for e in engines.values()):
        return d
    d = json.loads(json.dumps(d))  # the caller's dict is left as it was
    host = d.get("host") or {}
    gpus = host.get("gpus") or []
    for e in d["engines"].values():
        if "machine" in e:
            continue
        local = e.get("command") is not None or _local(e.get("base_url"))
        e["machine"] = {"key": f"run {d.get('created_at', '')}" if local and not d.get("resumed") else "",
                        "hostname": host.get("hostname", ""), "cpu_model": host.get("cpu", ""),
                        "cpu_count": host.get("cpu_count"), "gpu_name": (gpus[0].get("name") or "") if gpus else "",
                        "gpu_uuids": [g["uuid"] for g in gpus if g.get("uuid")],
                        "server_host": "local" if local else "remote",
                        "source": "run host" + ("" if not d.get("resumed") else ", run resumed: machine not known")}
    return d


def _local(url: str | None) -> bool:
    host = (url or "").split("://", 1)[-1].split("/", 1)[0].rsplit(":", 1)[0].strip("[]")
    return host in ("127.0.0.1", "localhost", "::1", "0.0.0.0", "")


def _serve_v1(d: dict) -> dict:
    """/1 -> /2: points had no repeats, attempts or trust checks; labels were their identity."""
    d = json.loads(json.dumps(d))
    for e in d.get("engines", {}).values():
        for i, p in enumerate(e.get("points", [])):
            p.setdefault("index", i)
            p["trust"] = {"assessed": False, "trusted": True,
                          "reasons": ["written by schema /1: timestamps and lengths not checked"]}
            if p.get("request_rate") == "inf":
                p["request_rate"] = math.inf
    return d


def _serve_v2(d: dict) -> dict:
    """/2 -> /3: one workload per run, so points did not carry their lengths; a random workload's come from the
    scenario as run (so a /2 point pairs with the same cell of a /3 grid)."""
    wl = (d.get("scenario") or {}).get("workload") or {}
    if wl.get("dataset", "random") != "random":
        return d
    d = json.loads(json.dumps(d))  # the caller's dict is left as it was
    for e in d.get("engines", {}).values():
        for p in e.get("points", []):
            p.setdefault("input_len", wl.get("input_len", 1024))
            p.setdefault("output_len", wl.get("output_len", 256))
    return d


def _shared_prefix_cells(d: dict) -> dict:
    """A shared-prefix run written before prefix_len and num_prefixes could be grid axes: its points (and
    profiled passes) did not carry them; they come from the scenario as run, where they were single values (so
    the point pairs with the same cell of a newer run, and a resume finds it). Other datasets: unchanged."""
    wl = (d.get("scenario") or {}).get("workload") or {}
    plen, count = wl.get("prefix_len"), wl.get("num_prefixes", 1)
    if wl.get("dataset") != "shared-prefix" or not isinstance(plen, int) or not isinstance(count, int):
        return d
    d = json.loads(json.dumps(d))  # the caller's dict is left as it was
    for e in d.get("engines", {}).values():
        for p in e.get("points", []) + e.get("profiles", []):
            if "prefix_len" not in p:
                p["prefix_len"], p["num_prefixes"] = plen, count
    return d
