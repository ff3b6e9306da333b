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
from dataclasses import dataclass

AWQ_METHODS = ("awq", "awq_marlin", "auto_awq")

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


@dataclass
class Gpu:
    index: int
    name: str
    driver: str
    capability: float  # e.g. 9.0
    memory_total_mib: float
    memory_used_mib: float
    cuda: str | None = None  # the newest CUDA the driver supports (nvidia-smi's header)

    @property
    def sm(self) -> int:
        return round(self.capability * 10)


class GpuQueryError(RuntimeError):
    """nvidia-smi is there but does not answer (e.g. a driver/library version mismatch)."""


def gpus(timeout_s: float = 30.0) -> list[Gpu] | None:
    """The GPUs nvidia-smi lists; None when there is no nvidia-smi."""
    smi = shutil.which("nvidia-smi")
    if not smi:
        return None
    q = "index,name,driver_version,compute_cap,memory.total,memory.used"
    try:
        p = subprocess.run([smi, f"--query-gpu={q}", "--format=csv,noheader,nounits"], capture_output=True,
                           text=True, timeout=timeout_s)
        head = subprocess.run([smi], capture_output=True, text=True, timeout=timeout_s).stdout
    except (OSError, subprocess.TimeoutExpired) as e:
        raise GpuQueryError(f"nvidia-smi: {e}") from None
    if p.returncode:
        said = (p.stdout + p.stderr).strip().splitlines()
        raise GpuQueryError(f"nvidia-smi: {said[-1]}" if said else f"nvidia-smi exited {p.returncode}")
    m = re.search(r"CUDA Version:\s*([\d.]+)", head)
    out = []
    for line in p.stdout.strip().splitlines():
        f = [x.strip() for x in line.split(",")]
        if len(f) < 6:
            continue
        out.append(Gpu(int(f[0]), f[1], f[2], _num(f[3]), _num(f[4]), _num(f[5]), m.group(1) if m else None))
    return out


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


def arg_value(args: list[str], flag: str) -> str | None:
    """The value of `--flag V` or `--flag=V` in a server's arguments (the last one wins)."""
    val = None
    for i, a in enumerate(args):
        if a == flag and i + 1 < len(args):
            val = args[i + 1]
        elif a.startswith(flag + "="):
            val = a.split("=", 1)[1]
    return val


@dataclass
class KernelChoice:
    kernel: str | None  # e.g. MacheteLinearKernel; None: not predicted
    why: str
    problem: bool = False


def vllm_kernel(gpu: Gpu | None, quant: dict | None, args: list[str], disabled: str, cpu_build: bool) -> KernelChoice:
    """The int4 GEMM kernel vLLM will choose (see the module's docstring), or why it cannot be told."""
    if not quant:
        return KernelChoice(None, "unquantized model: no int4 GEMM kernel is chosen")
    method = str(quant.get("quant_method", "")).lower()
    asked = (arg_value(args, "--quantization") or "").lower().replace("-", "_")
    if method != "awq" or (asked and asked not in AWQ_METHODS):
        return KernelChoice(None, f"not predicted for quant_method {method!r} with --quantization {asked or 'auto'}")
    if cpu_build:
        return KernelChoice(None, "vLLM's CPU build: its CPU int4 path, not Machete or Marlin")
    if gpu is None:
        return KernelChoice(None, "no GPU seen: cannot tell")
    backend = (arg_value(args, "--linear-backend") or "auto").lower().replace("-", "_")
    off = {k.strip() for k in disabled.split(",") if k.strip()}
    where = f"{gpu.name}, compute capability {gpu.capability:.1f}"
    if backend == "machete":
        if gpu.sm != 90:
            return KernelChoice(None, f"--linear-backend machete, but Machete needs compute capability 9.0 ({where})",
                                problem=True)
        return KernelChoice("MacheteLinearKernel", f"--linear-backend machete ({where})")
    if backend == "marlin":
        return KernelChoice("MarlinLinearKernel", f"--linear-backend marlin ({where})")
    if backend != "auto":
        return KernelChoice(None, f"--linear-backend {backend}: not predicted")
    if gpu.sm == 90 and "MacheteLinearKernel" not in off:
        return KernelChoice("MacheteLinearKernel", f"Hopper ({where}): vLLM's first choice for AWQ; Marlin instead "
                            "with VLLM_DISABLED_KERNELS=MacheteLinearKernel or --linear-backend marlin")
    if gpu.sm >= 75 and "MarlinLinearKernel" not in off:
        why = "Machete disabled by VLLM_DISABLED_KERNELS" if gpu.sm == 90 else "Machete needs compute capability 9.0"
        return KernelChoice("MarlinLinearKernel", f"{why} ({where})")
    return KernelChoice(None, f"neither Machete nor Marlin can run ({where}; VLLM_DISABLED_KERNELS={disabled!r}): "
                        "vLLM falls back to a slower kernel or refuses the model")
