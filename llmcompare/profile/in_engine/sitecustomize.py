"""llmcompare's capture hook, put first on a served engine's PYTHONPATH (serve/capture.py) when a load point is profiled.

In every Python process of the server whose environment names LLMC_PROFILE_DIR, it
  - writes `<dir>/pid-<pid>.json` (pid, parent pid, argv) so llmcompare signals only processes that can take the
    signal (SIGUSR2's default action would kill any other), again in forked children (os.register_at_fork);
  - handles SIGUSR2 as a toggle: the first signal starts torch.profiler (CPU ops, and CUDA kernels through CUPTI
    when CUDA is up), the next stops it and writes `<dir>/trace-<pid>.json` (Chrome trace) and
    `<dir>/trace-<pid>.meta.json` (pid, process title, window start/end as Unix seconds, error if any).
A process that has not imported torch answers skipped-<pid> and records nothing; one that started answers
started-<pid>. torch is imported in the handler, never at start-up, so the hook costs one file write per
process when unused. Python runs signal handlers on the main thread, where torch's CPU-op profiler must start to see that thread's ops; CUPTI's kernel records are
process-wide (TurboMind's C++ threads, vLLM's CUDA graphs). Any other sitecustomize on the path (Debian's) runs
after this one, as it would have without the hook.
"""

import importlib.machinery
import importlib.util
import json
import os
import signal
import sys
import time

_DIR = os.environ.get("LLMC_PROFILE_DIR", "")


_state = {"prof": None, "start": None}


def _title() -> str:
    try:
        with open("/proc/self/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return " ".join(sys.argv)


def _write(name: str, data: dict) -> None:
    tmp = os.path.join(_DIR, name + ".tmp")
    with open(tmp, "w") as f:
        json.dump(data, f)
    os.replace(tmp, os.path.join(_DIR, name))


def _register() -> None:
    try:
        _write(f"pid-{os.getpid()}.json", {"pid": os.getpid(), "ppid": os.getppid(), "argv": sys.argv})
    except OSError:
        pass


def _uses_cuda(torch) -> bool:
    """Whether this process already has a GPU context: torch's CUDA is up, or the process maps the driver's device
    files (/dev/nvidia*: TurboMind's C++ runs CUDA without torch's). Asking CUPTI for kernels elsewhere (vLLM's API
    server) could create a CUDA context there, costing GPU memory; LLMC_PROFILE_CUDA=1 or 0 decides instead."""
    forced = os.environ.get("LLMC_PROFILE_CUDA")
    if forced in ("0", "1"):
        return forced == "1"
    if torch.cuda.is_initialized():
        return True
    try:
        with open("/proc/self/maps") as f:
            return any("/dev/nvidia" in line for line in f)
    except OSError:
        return False


def _start() -> None:
    import torch  # already imported by the engine: this is a dictionary look-up

    acts = [torch.profiler.ProfilerActivity.CPU]
    if _uses_cuda(torch) and torch.cuda.is_available():
        acts.append(torch.profiler.ProfilerActivity.CUDA)
    prof = torch.profiler.profile(activities=acts)
    prof.start()
    _state["prof"], _state["start"], _state["cuda"] = prof, time.time(), len(acts) > 1


def _stop() -> None:
    prof, start = _state["prof"], _state["start"]
    _state["prof"] = None
    end, err = time.time(), None
    trace = f"trace-{os.getpid()}.json"
    try:
        prof.stop()
        prof.export_chrome_trace(os.path.join(_DIR, trace + ".part"))
        os.replace(os.path.join(_DIR, trace + ".part"), os.path.join(_DIR, trace))
    except Exception as e:  # noqa: BLE001 - the engine must keep serving; the error goes to the meta file
        err = f"{type(e).__name__}: {e}"
    _write(f"trace-{os.getpid()}.meta.json", {"pid": os.getpid(), "ppid": os.getppid(), "title": _title(),
                                              "cuda": _state.get("cuda"),
                                              "start_unix_s": start, "end_unix_s": end,
                                              "trace": None if err else trace, "error": err})


def _toggle(signum, frame) -> None:
    """Start or stop; answers a start with started-<pid> (or skipped-<pid> without torch) for llmcompare."""
    pid = os.getpid()
    try:
        if "torch" not in sys.modules:
            _write(f"skipped-{pid}", {"pid": pid, "why": "torch not imported"})
        elif _state["prof"] is not None:
            _stop()
        else:
            _start()
            _write(f"started-{pid}", {"pid": pid, "start_unix_s": _state["start"]})
    except Exception as e:  # noqa: BLE001 - never take the engine down
        try:
            _write(f"skipped-{pid}", {"pid": pid, "why": f"{type(e).__name__}: {e}"})
        except OSError:
            pass


def _chain() -> None:
    """Runs the next sitecustomize on sys.path (the one this file shadows), if there is one."""
    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or ".") != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is not None and spec.loader is not None:
        mod = importlib.util.module_from_spec(spec)
        sys.modules["_llmc_chained_sitecustomize"] = mod
        spec.loader.exec_module(mod)


if _DIR and os.path.isdir(_DIR):
    try:
        signal.signal(signal.SIGUSR2, _toggle)
        _register()
        os.register_at_fork(after_in_child=_register)
    except (ValueError, OSError):  # not the main thread, or no such directory: leave the process alone
        pass


_chain()
