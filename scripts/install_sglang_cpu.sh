#!/usr/bin/env bash
# Makes SGLang 0.5.15 runnable on its CPU backend, on a machine without a GPU, in its own environment: the recipe
# that served the tiny test model on this project's CPU machine on 2026-12-04 (tests/data/sglang-0.5.15-cpu).
# Not `llmcompare setup sglang`: sglang 0.5.15 as published needs CUDA 13 packages (sglang-kernel, flashinfer,
# cuda-python, cutlass-dsl) and no CPU build of it is on PyPI; here sglang goes in with --no-deps, then its
# pure-Python dependencies, and torch==2.11.0 (sglang's pin; PyPI's Linux wheel is a CUDA build, ~5 GB with its
# nvidia-* libraries, which runs on a CPU). Without sgl_kernel SGLang takes its native-torch CPU paths.
# Usage: scripts/install_sglang_cpu.sh [VENV_DIR]   (default: ~/.cache/llmcompare/envs/sglang-cpu-0.5.15)
#   $PYTHON: the interpreter the environment is made from (default python3.11; sglang's wheel is cp311 and up)
set -euo pipefail
VENV=${1:-${LLMCOMPARE_HOME:-$HOME/.cache/llmcompare}/envs/sglang-cpu-0.5.15}
[ -x "$VENV/bin/python" ] || "${PYTHON:-python3.11}" -m venv "$VENV"
PIP=("$VENV/bin/python" -m pip install -q)
"${PIP[@]}" torch==2.11.0 torchvision==0.26.0
"${PIP[@]}" --no-deps sglang==0.5.15
# sglang 0.5.15's Requires-Dist without the CUDA-only ones (cuda-python, flash-attn-4, flashinfer_*,
# nvidia-cutlass-dsl, nvidia-mathdx, sgl-deep-gemm, sglang-kernel, tilelang, tokenspeed_mla, quack-kernels)
"${PIP[@]}" torch==2.11.0 aiohttp anthropic apache-tvm-ffi==0.1.11 blobfile==3.0.0 compressed-tensors datasets \
  distro easydict einops fastapi gguf interegular IPython "llguidance>=0.7.11,<0.8.0" "mistral_common>=1.11.5" \
  modelscope msgspec ninja numpy nvidia-ml-py openai==2.6.1 openai-harmony==0.0.4 orjson outlines==0.1.11 \
  packaging partial_json_parser pillow prometheus-client psutil pybase64 pydantic python-multipart \
  "pyzmq>=25.1.2" requests scipy sentencepiece setproctitle tiktoken torchao==0.17.0 tqdm transformers==5.12.1 \
  uvicorn uvloop watchfiles xgrammar==0.2.1 zstandard torchaudio==2.11.0 soundfile==0.13.1 timm==1.0.16 \
  smg-grpc-servicer "kernels>=0.14.1,<0.15" "torch_memory_saver>=0.0.9.post1" py-spy
"$VENV/bin/python" -c 'import importlib.metadata as m, sglang.launch_server; print("sglang", m.version("sglang"))'
echo "$VENV/bin/python"
