#!/usr/bin/env bash
# Makes (or finds, checks and keeps) SGLang 0.5.15 for its CPU backend, in its own environment, so tests can talk
# to a real SGLang server on a machine without a GPU (tests/test_sglang_cpu.py). A thin call of
# `llmcompare setup sglang-cpu==0.5.15` (engines/sglang.py: sglang with --no-deps, then its dependencies less the
# CUDA-only ones; torch==2.11.0 from PyPI, a CUDA build that runs on a CPU; 6.1 GB; ~2 min here).
# Usage: scripts/install_sglang_cpu.sh [VENV_DIR]   (default: ~/.cache/llmcompare/envs/sglang-cpu-0.5.15)
#   $PYTHON: the interpreter the environment is made from (default: the one llmcompare runs on; sglang's wheel
#   is cp311 and up)
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/python -c 'import llmcompare.engines.environments' 2>/dev/null || .venv/bin/python -m pip install -q -e .
VENV=${1:-}
exec .venv/bin/python -m llmcompare.cli setup sglang-cpu==0.5.15 ${VENV:+--path "$VENV"} ${PYTHON:+--python "$PYTHON"}
