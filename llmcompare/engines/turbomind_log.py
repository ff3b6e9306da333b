"""TurboMind's GEMM kernel choices, read from what its GEMM library prints (no lmdeploy import, no torch).

What each version prints, to the process's stdout (std::cout, through C stdio's buffer), and when:

lmdeploy 0.18 (`TM_GEMM_VERBOSE` set when the GEMM object is made; src/turbomind/kernels/gemm/gemm.cu after PR
"Expand SM90 quantized GEMMs and unify TurboMind linear execution", `Gemm::Impl::PrintSelection` and
`Gemm::Impl::Measure`; the 0.18.0 wheel's _turbomind .so holds exactly these literals):
    [Gemm] <kind> <problem> <kernel> family=<family> backend=<backend> splits=<n> swizzle=<n>
        kind "plan": `Gemm::GetExecPlan`, which `LlamaLinear::Forward` calls for every GEMM it runs when not
        tuning, so a served engine prints one line per linear layer per forward pass;
        kind "tune": `Gemm::Tune`, once per problem it measures (kind "plan" if the cache already had it)
    [tune] <problem> <kernel> swizzle=<n> splits=<n> measured=<ms>
        `Measure`, one line per candidate it timed, fastest first (tuner/sampler.cu sorts by mean time; the
        first one is what the dispatch cache keeps)
lmdeploy 0.17 has no TM_GEMM_VERBOSE (the string is not in its .so). It has `TM_GEMM_TUNE_VERBOSE`, read at each
measurement, which prints only the `[tune]` lines above, during tuning (src/turbomind/kernels/gemm/gemm.cu:198-205
at InternLM/lmdeploy 1263d5cd8, 2026-08-21, after the 0.16.0 bump; gemm.cu last changed in 530ea6b72; the 0.17.0
.so holds these literals and no "[Gemm] "); its `[Gemm] dispatch:` line is commented out (same file, line 335).

<problem> is `to_string(GemmDesc)` (src/turbomind/kernels/gemm/desc.h:63-87 at 1263d5cd8):
    sm<arch/10>_<type_a>[quant_a]_<type_b>[quant_b]_<type_c>_<orders a,b,c: n|t>_<striding a,b,c: f|r|i|b>_
    <m>x<n>x<k>_<num>                       e.g. sm90_f16_u4k128_f16_tnt_fff_16x4096x4096_1
  (LlamaLinear: A is the activation [m, k], B the weight, so m = tokens, n = output features, k = input)
<kernel> is `Kernel::GetName()` (src/turbomind/kernels/gemm/kernel.cu:129-175 at 1263d5cd8):
    sm<arch>_<a>[q]_<b>[q]_<c>_<orders>_<stridings>_<cta m>x<n>x<k>_<stages>_<cluster x>x<y>_<op class>_
    <mma m>x<n>x<k>[_atom<x>x<y>x<z>][_fused_silu][_<m|n>group]_c<x>x<y>_a<x>x<y>x<z>[_algo<hex>_<r|c>]_<policies>
  A kernel whose operand A has the weight's type (the problem's type_b) runs the transposed problem: its cta
  tile's first number then spans the problem's n.

Serving: a TurboMind server tunes at start-up (TurboMind::Impl::WarmUp: set_measure(true), one forward per logged
"Warm-up lengths" entry, set_measure(false); turbomind.cc:370-470 at 1263d5cd8) and later dispatches every GEMM from
that cache (kernel_for below). 0.17 with TM_GEMM_TUNE_VERBOSE=1 therefore prints only during warm-up: no cost
afterwards. 0.18 with TM_GEMM_VERBOSE=1 prints the warm-up lines and then one "[Gemm] plan" line per GEMM of every
forward pass (TurboMind runs no CUDA graphs: its .so imports no cudaGraph*/cudaStreamBeginCapture), formatted on the
thread that launches the kernels: a cost when serving. Off, it is one branch on a const bool per GEMM. To serve
0.18 unslowed with known kernels: one start with TM_GEMM_VERBOSE=1 and TM_GEMM_EXPORT=<file> (the tuned cache is
written after warm-up), the measured run with TM_GEMM_IMPORT=<file> (no tuning, the same cache) and no verbose.
"""

from __future__ import annotations

import re

_GEMM = re.compile(r"^\[Gemm\] (?P<kind>\S+) (?P<problem>\S+) (?P<kernel>\S+) family=(?P<family>.*?) "
                   r"backend=(?P<backend>.*?) splits=(?P<splits>-?\d+) swizzle=(?P<swizzle>-?\d+)\s*$")


_TUNE = re.compile(r"^\[tune\] (?P<problem>\S+) (?P<kernel>\S+) swizzle=(?P<swizzle>-?\d+) "
                   r"splits=(?P<splits>-?\d+) measured=(?P<measured>\S+)\s*$")


_PROBLEM = re.compile(r"^sm(?P<arch>\d+)_(?P<type_a>[^_]+)_(?P<type_b>[^_]+)_(?P<type_c>[^_]+)_(?P<order>[nt]{3})_"
                      r"(?P<striding>[frib]{3})_(?P<m>\d+)x(?P<n>\d+)x(?P<k>\d+)_(?P<num>\d+)$")


_MNK = re.compile(r"_(?P<m>\d+)x(?P<n>\d+)x(?P<k>\d+)_(?P<num>\d+)$")


_OP_CLASSES = "simt|mma_h884|mma_h16816|gmma_h64n16|gmma_q64n32|unknown_op_cls"


_KERNEL = re.compile(r"^sm(?P<arch>\d+)_(?P<type_a>[^_]+)_(?P<type_b>[^_]+)_(?P<type_c>[^_]+)_(?P<order>[nt]{3})_"
                     r"(?P<striding>[frib]{3})_(?P<tile>\d+x\d+x\d+)_(?P<stages>\d+)_(?P<cluster>\d+x\d+)_"
                     rf"(?P<op_class>{_OP_CLASSES})_(?P<mma>\d+x\d+x\d+)(?P<rest>.*)$")


def _dims(s: str) -> list[int]:
    return [int(x) for x in s.split("x")]


def parse_problem(problem: str) -> dict:
    """`to_string(GemmDesc)` -> arch, types, m, n, k, num (only m/n/k/num when the rest has another layout)."""
    if p := _PROBLEM.match(problem):
        d = p.groupdict()
        return {"arch": int(d["arch"]), "type_a": d["type_a"], "type_b": d["type_b"], "type_c": d["type_c"],
                "order": d["order"], "striding": d["striding"],
                **{key: int(d[key]) for key in ("m", "n", "k", "num")}}
    if p := _MNK.search(problem):
        return {key: int(v) for key, v in p.groupdict().items()}
    return {}


def parse_kernel(name: str) -> dict:
    """`Kernel::GetName()` -> tile [m, n, k], stages, cluster, op class, mma shape and the optional parts."""
    p = _KERNEL.match(name)
    if not p:
        return {}
    d, rest = p.groupdict(), p.group("rest")
    out = {"kernel_arch": int(d["arch"]), "kernel_type_a": d["type_a"], "kernel_type_b": d["type_b"],
           "tile": _dims(d["tile"]), "stages": int(d["stages"]), "cluster": _dims(d["cluster"]),
           "op_class": d["op_class"], "mma": _dims(d["mma"]), "fused_silu": "_fused_silu" in rest,
           "group_axis": None, "c_tile": None, "align": None, "algo": None}
    if g := re.search(r"_atom(\d+x\d+x\d+)", rest):
        out["atom"] = _dims(g.group(1))
    if g := re.search(r"_([mn])group", rest):
        out["group_axis"] = g.group(1)
    if g := re.search(r"_c(\d+x\d+)_a(\d+x\d+x\d+)", rest):
        out["c_tile"], out["align"] = _dims(g.group(1)), _dims(g.group(2))
    if g := re.search(r"_algo([0-9a-f]+)_([rc])", rest):
        out["algo"] = {"id": g.group(1), "raster": g.group(2)}
    return out


def _choice(line_kind: str, d: dict) -> dict:
    out = {"line": line_kind, "kind": d.get("kind"), "problem": d["problem"], "kernel": d["kernel"],
           "splits": int(d["splits"]), "swizzle": int(d["swizzle"]), "family": d.get("family"),
           "backend": d.get("backend"), "measured_ms": None}
    if "measured" in d:
        try:
            out["measured_ms"] = float(d["measured"])
        except ValueError:
            out["measured_ms"] = None
    out |= parse_problem(d["problem"])
    kernel = parse_kernel(d["kernel"])
    out |= kernel
    # a kernel whose A operand has the weight's type computes the transposed problem
    out["transposed"] = (kernel["kernel_type_a"] == out["type_b"]) if kernel and "type_b" in out else None
    return out


def turbomind_gemm_choices(text: str) -> list[dict]:
    """Every `[Gemm]` and `[tune]` line in `text` (a server log, a captured stdout), in order.

    Each: line ("gemm" | "tune"), kind ("plan" | "tune" for [Gemm] lines, None for [tune]), problem and its
    arch/type_a/type_b/type_c/order/striding/m/n/k/num, kernel and its tile/stages/cluster/op_class/mma/
    fused_silu/group_axis/c_tile/align/algo, splits (split-K count), swizzle, family and backend ([Gemm] only),
    measured_ms ([tune] only), rank (for [tune] lines: 0 = the fastest, the one TurboMind keeps, counted per
    run of consecutive lines of one problem) and transposed. Other lines are ignored."""
    out: list[dict] = []
    prev_problem, rank = None, 0
    for raw in text.splitlines():
        line = raw.strip()
        if m := _GEMM.match(line):
            out.append(_choice("gemm", m.groupdict()))
            prev_problem = None
        elif m := _TUNE.match(line):
            c = _choice("tune", m.groupdict())
            rank = rank + 1 if c["problem"] == prev_problem else 0
            prev_problem = c["problem"]
            out.append(c | {"rank": rank})
        else:
            continue
    return out


def selected(choices: list[dict]) -> dict[str, dict]:
    """problem -> the kernel TurboMind kept for it: the last [Gemm] line of that problem, else its rank-0
    [tune] line (0.17 prints no [Gemm] lines)."""
    out: dict[str, dict] = {}
    for c in choices:
        if c["line"] == "gemm" or (c.get("rank") == 0 and out.get(c["problem"], {}).get("line") != "gemm"):
            out[c["problem"]] = c
    return out


def kernel_for(choices: list[dict], m: int, n: int, k: int) -> dict | None:
    """The kernel a served engine runs for an M-row GEMM of an [n, k] weight, from what its warm-up tuned: the
    entry of the smallest tuned M >= m for that problem (DispatchCache::LowerBound = Find(desc, exact=false),
    src/turbomind/kernels/gemm/dispatch_cache.cu:229-249 at 1263d5cd8; TurboMind::Impl::WarmUp tunes the
    "Warm-up lengths" it logs, up to max_forward_token_num, turbomind.cc:382-466). None when nothing covers m."""
    tuned = sorted((c for c in selected(choices).values() if "m" in c and (c["n"], c["k"]) == (n, k)),
                   key=lambda c: c["m"])
    return next((c for c in tuned if c["m"] >= m), None)


# The compact per-problem record of a served engine's log (EngineRecord.gemm_choices): these keys of the kept
# choice, then the counts of the lines that named the problem.
RECORD_KEYS = ("problem", "m", "n", "k", "kernel", "family", "backend", "tile", "stages", "op_class", "splits",
               "swizzle", "transposed")


_CACHE_LINES = 4096  # distinct [Gemm] lines parsed once each: a served log repeats the same few per forward pass


class Tally:
    """A server log fed one line at a time: per GEMM problem, the kernel TurboMind kept (as `selected`: its last
    [Gemm] line, else the fastest [tune] candidate) and how many lines named it. Counts are kept, lines are not:
    an 0.18 server with TM_GEMM_VERBOSE=1 prints one `[Gemm] plan` line per GEMM per forward pass (~112 per
    decode step of a 28-layer model), so its log grows by millions of lines in a serving run."""

    def __init__(self) -> None:
        self._kept: dict[str, dict] = {}  # problem -> the choice kept (a parsed line)
        self._counts: dict[str, dict[str, int]] = {}  # problem -> plan_lines, tune_lines, candidates, tunings
        self._kernels: dict[str, set[str]] = {}  # problem -> kernels its [Gemm] lines named
        self._parsed: dict[str, dict] = {}  # [Gemm] line -> its parse
        self._prev, self._rank = None, 0
        self.plan_lines = 0  # all `[Gemm] plan` lines: > 0 means the engine ran with TM_GEMM_VERBOSE (0.18)

    def add(self, raw: str) -> bool:
        """Counts one log line; False when it is not a GEMM-choice line."""
        line = raw.strip()
        if line.startswith("[Gemm] "):
            c = self._parsed.get(line)
            if c is None:
                if not (m := _GEMM.match(line)):
                    return False
                c = _choice("gemm", m.groupdict())
                if len(self._parsed) < _CACHE_LINES:
                    self._parsed[line] = c
            self._prev = None
            plan = c["kind"] == "plan"
            self.plan_lines += plan
            self._count(c["problem"], "plan_lines" if plan else "tune_lines")
            self._kernels.setdefault(c["problem"], set()).add(c["kernel"])
            self._kept[c["problem"]] = c
            return True
        if line.startswith("[tune] ") and (m := _TUNE.match(line)):
            c = _choice("tune", m.groupdict())
            self._rank = self._rank + 1 if c["problem"] == self._prev else 0
            self._prev = c["problem"]
            self._count(c["problem"], "candidates")
            if self._rank == 0:
                self._count(c["problem"], "tunings")
                if self._kept.get(c["problem"], {}).get("line") != "gemm":
                    self._kept[c["problem"]] = c
            return True
        return False

    def _count(self, problem: str, key: str) -> None:
        counts = self._counts.setdefault(problem, {"plan_lines": 0, "tune_lines": 0, "candidates": 0, "tunings": 0})
        counts[key] += 1

    def records(self) -> list[dict]:
        """One dict per problem, by (n, k, m): RECORD_KEYS of the kept choice ("tile" is the CTA tile [m, n, k]
        from the kernel name; "splits" the split-K count), source ("[Gemm] plan", "[Gemm] tune" or "[tune]
        fastest"), plan_lines and tune_lines (its [Gemm] lines), candidates ([tune] lines), tunings (times it
        was tuned), seen (lines that stated the choice: its [Gemm] lines, else its tunings) and kernels (distinct
        kernels its [Gemm] lines named: more than 1 means the choice changed during the run)."""
        out = []
        for problem, c in self._kept.items():
            counts = self._counts[problem]
            gemm_lines = counts["plan_lines"] + counts["tune_lines"]
            out.append({key: c.get(key) for key in RECORD_KEYS}
                       | {"source": f"[Gemm] {c['kind']}" if c["line"] == "gemm" else "[tune] fastest"}
                       | counts | {"seen": gemm_lines or counts["tunings"],
                                  "kernels": len(self._kernels.get(problem, ())) or 1})
        return sorted(out, key=lambda r: (r["n"] or 0, r["k"] or 0, r["m"] or 0, r["problem"]))


def summarize(lines) -> Tally:
    """A Tally of an iterable of lines (an open file: read line by line, never whole)."""
    t = Tally()
    for line in lines:
        t.add(line)
    return t


def served_kernel(records: list[dict], m: int, n: int, k: int) -> dict | None:
    """The record of the kernel a served engine runs for an M-row GEMM of an [n, k] weight: the smallest M >= m
    its log names for that weight (as kernel_for: `[Gemm] plan` lines name the M run, warm-up the M tuned)."""
    same = sorted((r for r in records if (r["n"], r["k"]) == (n, k) and r["m"] is not None), key=lambda r: r["m"])
    return next((r for r in same if r["m"] >= m), None)
