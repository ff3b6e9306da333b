"""kernel-bench's TurboMind backend, for both Python APIs lmdeploy has had around its GEMM library. Runs inside an
lmdeploy environment (imported by impls.py, in the worker only); the API is told by what imports, not by version:

lmdeploy 0.18 (`lmdeploy/turbomind/_turbomind*.so`; lmdeploy/turbomind/linear.py is the torch-facing API):
  linear.Linear()                                       native LlamaLinear on the current torch stream
  Linear.get_weight_plan(weight_format=weight_format.AWQFormat(block_in=g), dtype=torch.float16)
  Linear.prepare_weight(qweight, plan=, scales=, zeros=qzeros) -> Weight (Weight.is_graph_compatible)
  Linear.tune(x, weight) -> (ExecPlan, out, out_scales)  measures the feasible kernels for this M
  Linear(x, weight, exec_plan=, out=) -> (out, out_scales)
lmdeploy 0.17 (`lmdeploy/lib/_turbomind*.so`, imported as top-level `_turbomind` as 0.17's
lmdeploy/turbomind/turbomind.py does; lmdeploy/turbomind/linear.py is only a weight-loading bundle there): the
extension's own classes, as 0.17 loads an AWQ linear (turbomind/builders/_base.py `_add_linear`,
weight_format.AWQFormat) and as its linear test harness runs one (tests/turbomind/linear/linear.py, InternLM/lmdeploy
1263d5cd8):
  _turbomind.create_device_context() -> ContextGuard    a TurboMind stream (.stream_ptr) and its allocators
  _turbomind.LinearConfig (input_dim, output_dim, data_type, format, has_bias);
  AWQFormat(block_in=g).make_data_format(TYPE_FP16) -> _turbomind.ResolveLinearWeightFormat(fp16, u4, g, 1)
  _turbomind.LinearWeight(config); .param(kind).alloc(shape, dtype) -> Tensor; Tensor.copy_from(torch tensor);
  weight/scales/zeros from AWQFormat.normalize + .pack (u4 [K, N] packed 8 per int32 along N, fp16 scales and
  zeros [K/g, N]); LinearWeight.prepare()
  _turbomind.LlamaLinear(); .set_measure(True) + forward_dense(x, weight, out, None, None) tunes this M,
  .set_measure(False) then dispatches from the tuned cache; _turbomind.from_dlpack(torch tensor)
  0.17 runs on its context's own stream: each call is fork-joined with the caller's torch stream through two
  events (so eager timing and CUDA-graph capture see it; it adds that cost to eager_us, not to graph_us).
GEMM choices: TM_GEMM_VERBOSE=1 (0.18) or TM_GEMM_TUNE_VERBOSE=1 (0.17) is set, what tuning prints on fd 1 is
captured and parsed by llmcompare.engines.turbomind_log, and each point carries it as `tm_gemm` (`tm_api` names the API).
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import importlib
import importlib.util
import os
import sys
import tempfile
import types

import torch

from llmcompare.engines.turbomind_log import turbomind_gemm_choices


def _package_dir(name: str) -> str:
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise ImportError(f"{name} is not installed in this environment ({sys.executable})")
    return list(spec.submodule_search_locations)[0]


def _native_module():
    """The _turbomind extension without lmdeploy's package __init__ (which imports the serving stack):
    lmdeploy.turbomind._turbomind (0.18) or, failing that, _turbomind from lmdeploy/lib (0.17)."""
    root = _package_dir("lmdeploy")
    for name, path in (("lmdeploy", root), ("lmdeploy.turbomind", os.path.join(root, "turbomind"))):
        if name not in sys.modules:
            m = types.ModuleType(name)
            m.__path__ = [path]
            sys.modules[name] = m
    try:
        tm = importlib.import_module("lmdeploy.turbomind._turbomind")
    except ModuleNotFoundError as e:
        lib = os.path.join(root, "lib")
        if e.name != "lmdeploy.turbomind._turbomind" or not os.path.isdir(lib):
            raise
        if lib not in sys.path:
            sys.path.append(lib)
        tm = importlib.import_module("_turbomind")
    sys.modules["lmdeploy.turbomind"]._tm = tm  # 0.18's linear.py does `from . import _tm`
    return tm


def load_api():
    tm = _native_module()
    linear = importlib.import_module("lmdeploy.turbomind.linear")
    wf = importlib.import_module("lmdeploy.turbomind.weight_format")
    if hasattr(getattr(linear, "Linear", None), "get_weight_plan"):
        return LinearAPI(linear, wf)
    if all(hasattr(getattr(tm, c, None), a) for c, a in (("LlamaLinear", "set_measure"), ("LlamaLinear", "forward_dense"),
                                                            ("LinearWeight", "prepare"))):
        return NativeAPI(tm, wf)
    raise ImportError(f"no TurboMind linear API known to llmcompare in {tm.__file__}")


@contextlib.contextmanager
def stdout_captured(sink: list[str]):
    """Points fd 1 (where TurboMind's std::cout goes, through C stdio's buffer) at a temporary file; appends what
    was written to `sink`. Python's own prints must not happen inside."""
    libc = ctypes.CDLL(None)
    sys.stdout.flush()
    libc.fflush(None)
    saved = os.dup(1)
    with tempfile.TemporaryFile() as f:
        os.dup2(f.fileno(), 1)
        try:
            yield
        finally:
            libc.fflush(None)
            os.dup2(saved, 1)
            os.close(saved)
            f.seek(0)
            sink.append(f.read().decode(errors="replace"))


class LinearAPI:
    """lmdeploy >= 0.18: lmdeploy.turbomind.linear."""

    name = "lmdeploy.turbomind.linear"

    def __init__(self, linear, wf):
        os.environ.setdefault("TM_GEMM_VERBOSE", "1")  # read once, when Linear() makes the native GEMM object
        self.lin = linear.Linear()
        self.wf = wf
        self.plans: dict = {}

    def prepare(self, t: dict):
        g = t["g"]
        if g not in self.plans:
            self.plans[g] = self.lin.get_weight_plan(weight_format=self.wf.AWQFormat(block_in=g), dtype=torch.float16)
        w = self.lin.prepare_weight(t["qweight"], plan=self.plans[g], scales=t["scales"], zeros=t["qzeros"])
        return w, bool(w.is_graph_compatible)

    def tune(self, x: torch.Tensor, w):
        ep, _, _ = self.lin.tune(x, w)
        return ep

    def call(self, x: torch.Tensor, w, ep, out: torch.Tensor | None) -> torch.Tensor:
        y, _ = self.lin(x, w, exec_plan=ep, out=out)
        return y


class _InContext:
    """A native object that must be released inside its TurboMind context (0.17)."""

    __slots__ = ("obj", "api", "n")

    def __init__(self, obj, api: NativeAPI, n: int):
        self.obj, self.api, self.n = obj, api, n

    def __del__(self):
        try:
            with self.api.active():
                self.obj = None
        except Exception:
            pass


class NativeAPI:
    """lmdeploy 0.17: the _turbomind extension's LinearWeight and LlamaLinear (see the module docstring)."""

    name = "_turbomind.LlamaLinear"

    def __init__(self, tm, wf):
        os.environ.setdefault("TM_GEMM_TUNE_VERBOSE", "1")  # read at each measurement
        self.tm, self.wf, self._depth = tm, wf, 0
        self.ctx = tm.create_device_context()
        self.stream = torch.cuda.ExternalStream(self.ctx.stream_ptr)
        self.ev_in, self.ev_out = torch.cuda.Event(), torch.cuda.Event()
        with self.active():
            self.linear = tm.LlamaLinear()  # its constructor and destructor use the context's stream
        atexit.register(self.close)
        dt = tm.DataType
        self.dtypes = {torch.float16: dt.TYPE_FP16, torch.int32: dt.TYPE_INT32, torch.uint8: dt.TYPE_UINT8}

    @contextlib.contextmanager
    def active(self):
        """The TurboMind context, entered once however deeply nested (entering a ContextGuard twice would
        replace its guard)."""
        if self._depth:
            self._depth += 1
            try:
                yield
            finally:
                self._depth -= 1
            return
        with self.ctx:
            self._depth = 1
            try:
                yield
            finally:
                self._depth = 0

    def close(self) -> None:
        if getattr(self, "linear", None) is not None:
            with self.active():
                self.linear = None

    def prepare(self, t: dict):
        tm, k, n, g = self.tm, t["k"], t["n"], t["g"]
        fmt = self.wf.AWQFormat(block_in=g)
        cfg = tm.LinearConfig()
        cfg.input_dim, cfg.output_dim = k, n
        cfg.data_type = tm.DataType.TYPE_FP16
        cfg.format = fmt.make_data_format(tm.DataType.TYPE_FP16)
        cfg.has_bias = False
        packed = {kind: fmt.pack(fmt.normalize(src, kind), kind)
                  for kind, src in (("weight", t["qweight"]), ("scales", t["scales"]), ("zeros", t["qzeros"]))}
        with self.active():
            try:
                lw = tm.LinearWeight(cfg)  # owned by Python (the test harness's way)
            except TypeError:  # no constructor bound: the loader's way (never freed)
                lw = tm.create_module(cfg)
            dsts = {}
            for kind, p in packed.items():
                shape = list(p.tensor.shape if p.alloc_shape is None else p.alloc_shape)
                dtype = self.dtypes[p.tensor.dtype] if p.alloc_dtype is None else p.alloc_dtype
                dsts[kind] = lw.param(kind).alloc(shape, dtype)
            torch.cuda.synchronize()  # the params come from the context's stream-ordered allocator
            for kind, p in packed.items():
                src = p.tensor.contiguous()
                if dsts[kind].byte_size != src.nbytes:
                    raise ValueError(f"{kind}: TurboMind param holds {dsts[kind].byte_size} B, source {src.nbytes} B")
                dsts[kind].copy_from(src)
            torch.cuda.synchronize()
            lw.prepare()  # converts to the kernels' layout, on the context's stream
            torch.cuda.synchronize()
            return _InContext(lw, self, n), True

    def _forward(self, x: torch.Tensor, w: _InContext, out: torch.Tensor) -> None:
        xin, oin = self.tm.from_dlpack(x), self.tm.from_dlpack(out)
        cur = torch.cuda.current_stream()
        joined = cur.cuda_stream != self.stream.cuda_stream
        if joined:
            self.ev_in.record(cur)
            self.stream.wait_event(self.ev_in)
        with self.active():
            self.linear.forward_dense(xin, w.obj, oin, None, None)
        if joined:
            self.ev_out.record(self.stream)
            cur.wait_event(self.ev_out)

    def tune(self, x: torch.Tensor, w: _InContext):
        out = torch.empty(x.shape[0], w.n, dtype=torch.float16, device=x.device)
        self.linear.set_measure(True)
        try:
            self._forward(x, w, out)
        finally:
            self.linear.set_measure(False)  # from now on: dispatch from the tuned cache (kReuse)
        torch.cuda.synchronize()
        return True

    def call(self, x: torch.Tensor, w: _InContext, ep, out: torch.Tensor | None) -> torch.Tensor:
        if out is None:
            out = torch.empty(x.shape[0], w.n, dtype=torch.float16, device=x.device)
        self._forward(x, w, out)
        return out


class TurboMind:
    """lmdeploy TurboMind's GEMM through whichever API the installed lmdeploy has: weight prepared once per copy,
    kernels tuned per M (shared by every copy of the same shape's weight), then called."""

    name = "turbomind"
    KEEP_CANDIDATES = 8

    def __init__(self):
        self.api = load_api()
        self.choices: dict = {}  # (n, k, m) -> parsed TurboMind GEMM lines of tuning that M

    def prepare(self, t: dict) -> dict:
        w, graph_ok = self.api.prepare(t)
        return {"w": w, "ep": t.setdefault("turbomind_exec_plans", {}), "graph_ok": graph_ok, "nk": (t["n"], t["k"])}

    def setup(self, x: torch.Tensor, w: dict) -> None:
        """Tunes the kernel choice for this M (TurboMind measures the feasible kernels)."""
        m = x.shape[0]
        if m not in w["ep"]:
            text: list[str] = []
            with stdout_captured(text):
                w["ep"][m] = self.api.tune(x, w["w"])
            sys.stderr.write(text[0])  # into the worker's log as well
            self.choices[(*w["nk"], m)] = turbomind_gemm_choices(text[0])

    def __call__(self, x: torch.Tensor, w: dict, out: torch.Tensor | None = None) -> torch.Tensor:
        return self.api.call(x, w["w"], w["ep"][x.shape[0]], out)

    def point_facts(self, w: dict, m: int) -> dict:
        """Extra fields for a point: the API used, the GEMM lines TurboMind printed while tuning this M (its
        choice and the KEEP_CANDIDATES fastest candidates) and how many candidates it measured."""
        cs = self.choices.get((*w["nk"], m), [])
        return {"tm_api": self.api.name, "tm_gemm_candidates": sum(c["line"] == "tune" for c in cs),
                "tm_gemm": [c for c in cs if c["line"] == "gemm" or c["rank"] < self.KEEP_CANDIDATES]}
