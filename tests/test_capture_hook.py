"""The capture hook (profile/in_engine/sitecustomize.py) in real processes of the vLLM CPU environment's python (it has
torch), without a server: registration (forked children too), the SIGUSR2 toggle, a torch-less process that
answers and survives, the chained sitecustomize, and the traces collected, gzipped and analysed (serve/capture.py)."""

import asyncio
import gzip
import json
import os
import signal
import subprocess
import time

from llmcompare.schema.files import RunFile
from llmcompare.schema.run import ServeRun
from llmcompare.serve import capture

CODE = """
import os, subprocess, sys, time
import torch
subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])  # no torch: must not be killed
os.fork()  # the child registers through os.register_at_fork and runs the same loop
x = torch.randn(64, 64)
end = time.time() + 120
while time.time() < end:
    torch.mm(x, x)
    time.sleep(0.001)
"""


def test_hook_toggles_capture_in_torch_processes_only(tmp_path, vllm_py):
    work = tmp_path / "cap"
    other = tmp_path / "other"
    other.mkdir()
    (other / "sitecustomize.py").write_text(
        "import os\nopen(os.path.join(os.environ['MARK_DIR'], f'chained-{os.getpid()}'), 'w').close()\n")
    env = {**os.environ, "PYTHONPATH": str(other), "MARK_DIR": str(tmp_path)}
    env |= capture.hook_env(True, work, env)
    assert env["PYTHONPATH"].split(os.pathsep) == [str(capture.HOOK_DIR), str(other)]
    proc = subprocess.Popen([vllm_py, "-c", CODE], env=env, start_new_session=True)
    try:
        cap = capture.Capture(work, proc.pid)
        deadline = time.monotonic() + 60
        while len(cap.pids()) < 3 and time.monotonic() < deadline:
            time.sleep(0.1)
        pids = cap.pids()
        assert len(pids) == 3 and proc.pid in pids
        time.sleep(1.0)  # let torch import in the torch processes
        started = asyncio.run(cap.start())
        assert proc.pid in started and len(started) == 2  # the parent and its forked child; not the sleeper
        sleeper = (set(pids) - set(started)).pop()
        assert (work / f"skipped-{sleeper}").exists()
        time.sleep(0.5)
        cap.stop(started)
        (tmp_path / "run").mkdir()
        traces = asyncio.run(cap.collect(RunFile(tmp_path / "run", ServeRun()), "e", 0, started))
        os.kill(sleeper, 0)  # still alive: SIGUSR2 did not kill it
        assert proc.poll() is None
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert len(list(tmp_path.glob("chained-*"))) == 2  # the other sitecustomize ran in each exec'ed python
    assert sorted(t.pid for t in traces) == sorted(started)
    for t in traces:
        assert t.error is None and t.file and t.start_unix_s < t.end_unix_s and t.json_bytes > 0
        assert t.cuda is False  # no CUDA in these processes: CPU ops only
        with gzip.open(tmp_path / "run" / t.file, "rt") as f:
            names = {e.get("name") for e in json.load(f)["traceEvents"]}
        assert "aten::mm" in names
        assert t.steps.source == "cpu" and t.steps.class_ms_total.get("gemm", 0) > 0
    assert not list(work.glob("trace-*.json"))  # the raw traces were moved into the run directory

