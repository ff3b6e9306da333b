"""What `doctor` asks of the machine and of each engine's environment, without importing any engine here: the GPUs
and driver (nvidia-smi), a probe run in the engine's own python (its version, whether it imports, its torch and
CUDA build), and the int4 GEMM kernel vLLM will choose for an AWQ model on this GPU where that can be known.

vLLM's choice (vllm/model_executor/kernels/linear, the same rule in 0.26.0's logs and 0.32.0's source): for AWQ
(`--quantization awq`, `awq_marlin` or `auto_awq`, or none: it reads the model's config) it takes the first of
Machete (compute capability exactly 9.0, Hopper) and Marlin (7.5 and up) that is not named in
VLLM_DISABLED_KERNELS; `--linear-backend marlin|machete` picks one outright.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess

from llmcompare.schema.gpu import Gpu

PROBE = r"""
import importlib, importlib.metadata as m, json, sys, time
dist, module = sys.argv[1], sys.argv[2]
out = {"python": sys.version.split()[0]}
try:
    out["version"] = m.version(dist)
except Exception as e:
    out["version_error"] = f"{type(e).__name__}: {e}"
try:
    import torch
    out["torch"] = torch.__version__
    out["torch_cuda"] = torch.version.cuda
    out["cuda_available"] = bool(torch.cuda.is_available())
except Exception as e:
    out["torch_error"] = f"{type(e).__name__}: {e}"
t0 = time.monotonic()
try:
    importlib.import_module(module)
    out["import_s"] = round(time.monotonic() - t0, 1)
except BaseException as e:
    out["import_error"] = f"{type(e).__name__}: {e}"
print("LLMCOMPARE-PROBE " + json.dumps(out))
"""




class GpuQueryError(RuntimeError):
    """nvidia-smi is there but does not answer (e.g. a driver/library version mismatch)."""


def query(fields: str, timeout_s: float = 30.0, units: bool = False) -> list[list[str]] | None:
    """`nvidia-smi --query-gpu=FIELDS`, one list of values per GPU: the one place llmcompare asks it what GPUs
    there are (gpus() for doctor, setup/host.py for run files). None without nvidia-smi; GpuQueryError when it is
    there but does not answer."""
    smi = shutil.which("nvidia-smi")
    if not smi:
        return None
    fmt = "csv,noheader" + ("" if units else ",nounits")
    try:
        p = subprocess.run([smi, f"--query-gpu={fields}", f"--format={fmt}"], capture_output=True, text=True,
                           timeout=timeout_s)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise GpuQueryError(f"nvidia-smi: {e}") from None
    if p.returncode:
        said = (p.stdout + p.stderr).strip().splitlines()
        raise GpuQueryError(f"nvidia-smi: {said[-1]}" if said else f"nvidia-smi exited {p.returncode}")
    return [[x.strip() for x in line.split(",")] for line in p.stdout.strip().splitlines() if line.strip()]


def gpus(timeout_s: float = 30.0) -> list[Gpu] | None:
    """The GPUs nvidia-smi lists; None when there is no nvidia-smi."""
    rows = query("index,name,driver_version,compute_cap,memory.total,memory.used", timeout_s)
    if rows is None:
        return None
    try:
        head = subprocess.run([shutil.which("nvidia-smi") or "nvidia-smi"], capture_output=True, text=True,
                              timeout=timeout_s).stdout
    except (OSError, subprocess.TimeoutExpired) as e:
        raise GpuQueryError(f"nvidia-smi: {e}") from None
    m = re.search(r"CUDA Version:\s*([\d.]+)", head)
    return [Gpu(int(f[0]), f[1], f[2], _num(f[3]), _num(f[4]), _num(f[5]), m.group(1) if m else None)
            for f in rows if len(f) >= 6]


def _num(s: str) -> float:
    try:
        return float(s)
    except ValueError:
        return float("nan")


def probe(python: str, dist: str, module: str, env: dict[str, str] | None = None,
          timeout_s: float = 600.0) -> dict:
    """Runs PROBE in the engine's python: version, torch and its CUDA build, whether `module` imports."""
    try:
        p = subprocess.run([python, "-c", PROBE, dist, module], capture_output=True, text=True, timeout=timeout_s,
                           env=env)
    except FileNotFoundError:
        return {"error": f"{python} does not exist"}
    except OSError as e:
        return {"error": f"{python} cannot run: {e}"}
    except subprocess.TimeoutExpired:
        return {"error": f"the probe did not finish in {timeout_s:.0f} s"}
    for line in p.stdout.splitlines():
        if line.startswith("LLMCOMPARE-PROBE "):
            return json.loads(line.split(" ", 1)[1])
    return {"error": f"{python} exited {p.returncode}: {(p.stderr.strip().splitlines() or [''])[-1]}"}


def _version_tuple(v: str | None) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", v or "")[:2])


def cuda_mismatch(torch_cuda: str | None, driver_cuda: str | None) -> bool:
    """torch built for a newer CUDA than the driver supports."""
    if not torch_cuda or not driver_cuda:
        return False
    return _version_tuple(torch_cuda) > _version_tuple(driver_cuda)
