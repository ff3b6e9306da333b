"""SGLang's OpenAI server (`python -m sglang.launch_server`): its command line, its environment, what its log says
it chose, and the int4 GEMM it will run for an AWQ model.

Read from sglang 0.5.15's own source (the PyPI wheel sglang-0.5.15-cp311-cp311-manylinux_2_34_x86_64.whl,
2026-12-04). Its first GPU run (an H100, 2026-12-06: reports/h100-sglang) printed the kernel line below and showed
CONTEXT_RESERVE.

Flags (srt/server_args.py, ServerArgs: each field's flag is its name with dashes, plus `aliases`): --model-path
(alias --model), --tokenizer-path, --served-model-name, --host, --port, --context-length, --mem-fraction-static,
--max-running-requests, --quantization (choices include awq and awq_marlin), --tp-size (alias
--tensor-parallel-size; there is no --tp alias), --disable-radix-cache ("Disable RadixAttention for prefix
caching.", default False: the prefix cache is on unless this is given), --enable-metrics (default False).

The AWQ kernel (srt/configs/model_config.py `_verify_quantization`, srt/layers/quantization/awq/awq.py
`AWQMarlinConfig.override_quantization_method`): for a checkpoint whose quant_method is awq, 4 bits, a Marlin
group size (-1, 32, 64, 128) and zero points, on CUDA with compute capability >= 8.0, and --quantization unset,
awq_marlin or marlin, SGLang logs "The model is convertible to awq_marlin during runtime. Using awq_marlin kernel."
and runs AWQMarlinLinearKernel (srt/hardware_backend/gpu/quantization/awq_kernels.py): weights repacked by
sglang.jit_kernel.awq_marlin_repack, each linear `gptq_marlin_gemm` from sglang.jit_kernel.gptq_marlin, a Marlin
kernel (`device::marlin::Marlin<...>`, jit_kernel/csrc/gemm/marlin/) compiled at first use by tvm-ffi (nvcc) into
~/.cache/tvm-ffi, not sgl_kernel's prebuilt library and not vLLM's ops. There is no Machete path: on Hopper too
it is Marlin. With --quantization awq it logs "... you specified quantization=awq explicitly, so forcing awq ..."
and runs AWQLinearKernel: awq_dequantize to fp16, then torch.matmul (cuBLAS).
"""

from __future__ import annotations

import re

from llmcompare.engines.flags import arg_value
from llmcompare.engines.log import KernelChoice, LogFacts
from llmcompare.engines.package import Package
from llmcompare.schema.gpu import Gpu
from llmcompare.schema.scenario import Engine

# `llmcompare setup sglang`: sglang 0.5.15 pins torch==2.11.0 (the H200's torch) and CUDA 13 packages
# (flashinfer_python[cu13]==0.6.12, sglang-kernel==0.4.4, nvidia-cutlass-dsl[cu13]); later versions pin newer
# torch (0.5.20: 2.13.0). No CPU build of it is on PyPI.
# `llmcompare setup sglang-cpu` (a bare `sglang` on a machine without an NVIDIA GPU): the same sglang, installed
# without its dependencies, then sglang 0.5.15's Requires-Dist less the CUDA-only ones (cuda-python,
# flash-attn-4, flashinfer_*, nvidia-cutlass-dsl, nvidia-mathdx, sgl-deep-gemm, sglang-kernel, tilelang,
# tokenspeed_mla, quack-kernels). torch==2.11.0 from PyPI is a CUDA build (~5 GB with its nvidia libraries; the
# environment is 6.1 GB) that runs on a CPU. Without sgl_kernel SGLang takes its native-torch CPU paths; it serves
# with SGLANG_USE_CPU_ENGINE=1 --device cpu --attention-backend torch_native (docs/engines.md, tests/test_sglang_cpu.py).
CPU_REQUIREMENTS = (
    "torch==2.11.0", "torchvision==0.26.0", "torchaudio==2.11.0", "aiohttp", "anthropic", "apache-tvm-ffi==0.1.11",
    "blobfile==3.0.0", "compressed-tensors", "datasets", "distro", "easydict", "einops", "fastapi", "gguf",
    "interegular", "IPython", "llguidance>=0.7.11,<0.8.0", "mistral_common>=1.11.5", "modelscope", "msgspec", "ninja",
    "numpy", "nvidia-ml-py", "openai==2.6.1", "openai-harmony==0.0.4", "orjson", "outlines==0.1.11", "packaging",
    "partial_json_parser", "pillow", "prometheus-client", "psutil", "pybase64", "pydantic", "python-multipart",
    "pyzmq>=25.1.2", "requests", "scipy", "sentencepiece", "setproctitle", "tiktoken", "torchao==0.17.0", "tqdm",
    "transformers==5.12.1", "uvicorn", "uvloop", "watchfiles", "xgrammar==0.2.1", "zstandard", "soundfile==0.13.1",
    "timm==1.0.16", "smg-grpc-servicer", "kernels>=0.14.1,<0.15", "torch_memory_saver>=0.0.9.post1", "py-spy",
)
ENVIRONMENTS = {
    "sglang": Package("sglang", "0.5.15", "sglang", "sglang", "sglang", True, without_gpu="sglang-cpu"),
    # its check imports the server (what the dependencies chosen here must carry), not only the package
    "sglang-cpu": Package("sglang", "0.5.15", "sglang", "sglang.launch_server", "sglang", False, no_deps=True,
                          requirements=CPU_REQUIREMENTS),
}
CLI_MODULE = "sglang.launch_server"  # `python -m sglang.launch_server --model-path M ...`
CONSOLE = "sglang"  # the console script: `sglang serve --model-path M ...` (sglang/cli/main.py)

# RadixAttention (the prefix cache) is on by default; --disable-radix-cache turns it off (store_true)
SGLANG_PREFIX = {"on": [], "off": ["--disable-radix-cache"]}
# --quantization values for an AWQ checkpoint (the one doctor suggests last); awq forces the dequantize path
AWQ_METHODS = ("awq", "marlin", "awq_marlin")
# srt/server_args.py `_handle_deprecated_args`: grpc_port = SGLANG_GRPC_PORT or port + 10000, and a grpc_port over
# 65535 is a ValueError at start-up (seen on this machine: port 57255 -> "SGLANG_GRPC_PORT (67255) must be between
# 1 and 65535"), so the port llmcompare picks for it is at most 55535
MAX_PORT = 65535 - 10000
# srt/managers/scheduler.py `init_req_max_new_tokens`: max_new_tokens = min(asked, max_req_len - prompt - 1), with
# max_req_len = context_len - 1 (srt/managers/tp_worker.py): a request may have at most context_len - 2 tokens of
# prompt and output. One asking for more is served, silently 1-2 tokens short (seen on an H100, session 26: every
# ShareGPT-like request with prompt + output = --context-length 2048 received 2 tokens fewer than asked).
CONTEXT_RESERVE = 2
# its processes' titles (setproctitle, srt/managers/scheduler.py `run_scheduler_process`; seen in a profiled pass
# on an H100, reports/h100-sglang-c64): the server keeps its command line (`python -m sglang.launch_server ...`,
# or `sglang serve`); the scheduler, which runs the model, is `sglang::scheduler` (with tensor parallelism
# `sglang::scheduler_TP<rank>`); then `sglang::detokenizer` (and `sglang::detokenizer_router`)
PROCESS_ROLES = (("sglang::scheduler", "scheduler"), ("sglang::detokenizer", "detokenizer"),
                 ("launch_server", "api-server"), (" serve", "api-server"))
MARLIN_GROUPS = (-1, 32, 64, 128)  # srt/layers/quantization/marlin_utils.py MARLIN_SUPPORTED_GROUP_SIZES


def sglang_command(e: Engine, prefix: list[str], model: str, port: int, tokenizer: str | None) -> list[str]:
    """`prefix` runs SGLang's server (launch.command_prefix): [python, -m, sglang.launch_server], or the `sglang`
    console script, which takes the `serve` subcommand first."""
    cmd = list(prefix)
    if cmd[-1].rsplit("/", 1)[-1] == CONSOLE:
        cmd.append("serve")
    cmd += ["--model-path", model, "--host", e.host, "--port", str(port)]
    if tokenizer and tokenizer != model:
        cmd += ["--tokenizer-path", tokenizer]
    if e.served_model_name:
        cmd += ["--served-model-name", e.served_model_name]
    return cmd + list(e.args)


def on_cpu(args: list[str]) -> bool:
    """EngineKind.on_cpu: `--device cpu` (with SGLANG_USE_CPU_ENGINE=1) runs its CPU backend, from any torch build
    (docs/engines.md: the CUDA build of torch 2.11.0 served on this project's CPU machine)."""
    return (arg_value(args, "--device") or "").lower() == "cpu"


# srt/layers/quantization/awq/awq.py: "The model is convertible to {} during runtime. Using {} kernel."
_CONVERTED = re.compile(r"The model is convertible to (\w+) during runtime\. Using (\w+) kernel\.")
# the same file, with --quantization awq: "... however you specified quantization=awq explicitly, so forcing awq."
_FORCED = re.compile(r"you specified quantization=(\w+) explicitly, so forcing (\w+)")
# srt/managers/scheduler.py (tp rank 0): "max_total_num_tokens=..., max_running_requests=..., context_len=..."
_CONTEXT = re.compile(r"max_running_requests=(\d+), context_len=(\d+)")
# srt/entrypoints/engine.py logs f"{server_args=}": the dataclass repr, attention_backend='fa3' or None
_ATTENTION = re.compile(r"server_args=ServerArgs\(.*?\battention_backend=('?)(\w+)\1[,)]")
# srt/mem_cache/registry.py: "Tree cache initialized: source=%s impl=%s ..." (RadixCache: the prefix cache is on)
_TREE_CACHE = re.compile(r"Tree cache initialized: source=\S+ impl=(\w+)")


def sglang_log(text: str) -> LogFacts:
    """What an SGLang server's log says. Its log has no version line (the version is asked of its environment)."""
    facts = LogFacts()
    if m := _CONVERTED.search(text):
        facts.kernels["quantization"] = m.group(2)  # awq_marlin: gemm_backends' sglang-marlin
    elif m := _FORCED.search(text):
        facts.kernels["quantization"] = m.group(2)  # awq: dequantize + torch.matmul, no kernel-bench backend
    if m := _CONTEXT.search(text):
        facts.max_model_len = int(m.group(2))
        facts.notes.append(f"max_running_requests={m.group(1)}")
    if m := _ATTENTION.search(text):
        facts.notes.append(f"attention_backend={m.group(2)}")
    if m := _TREE_CACHE.search(text):
        facts.notes.append(f"tree cache {m.group(1)}")
    return facts


def predict_kernel(gpu: Gpu | None, config: dict | None, args: list[str], env: dict[str, str],
                   cpu_build: bool) -> KernelChoice:
    """EngineKind.predict_kernel: SGLang's rule for an AWQ checkpoint (see the module's docstring)."""
    if config is None:
        return KernelChoice(None, "not predicted: the model's config.json is not available yet")
    quant = config.get("quantization_config")
    if not quant:
        return KernelChoice(None, "unquantized model: no int4 GEMM kernel is chosen")
    method = str(quant.get("quant_method", "")).lower()
    asked = (arg_value(args, "--quantization") or "").lower()
    if method != "awq":
        return KernelChoice(None, f"not predicted for quant_method {method!r} with --quantization {asked or 'auto'}")
    if asked == "awq":
        return KernelChoice("awq", "--quantization awq forces SGLang's AWQ dequantize + torch.matmul path; "
                            "awq_marlin (or no --quantization) runs Marlin")
    if asked and asked not in AWQ_METHODS:
        return KernelChoice(None, f"--quantization {asked} for an AWQ checkpoint: not predicted")
    if cpu_build:  # srt/layers/quantization/awq/awq.py warns "Only CUDA, HIP and XPU support AWQ currently."
        return KernelChoice(None, "SGLang's CPU backend (--device cpu): its AWQ path runs on CUDA, HIP and XPU only")
    if gpu is None:
        return KernelChoice(None, "no GPU seen: cannot tell")
    where = f"{gpu.name}, compute capability {gpu.capability:.1f}"
    if quant.get("bits") != 4 or quant.get("group_size") not in MARLIN_GROUPS or not quant.get("zero_point"):
        return KernelChoice("awq", f"not Marlin-compatible (bits, group_size, zero_point): the AWQ dequantize path "
                            f"({where})")
    if gpu.sm < 80:
        return KernelChoice("awq", f"Marlin needs compute capability 8.0 in SGLang: the AWQ dequantize path ({where})")
    return KernelChoice("awq_marlin", f"SGLang's JIT Marlin (gptq_marlin_gemm), no Machete path, also on Hopper "
                        f"({where}); compiled by nvcc at first use")
