#!/usr/bin/env bash
# On the lent H200, once scripts/gpu/bundle.py's parts are installed (/tmp/llmc): serve-bench or kernel-bench of
# llmcompare/scenarios/qwen-awq-h200.yaml, results under $OUT (the device's return folder) or runs/.
#   bash scripts/gpu/h200.sh serve turbomind turbomind-0.17   # makes the model first if /tmp/llmc/models lacks it
#   bash scripts/gpu/h200.sh serve vllm vllm-marlin
#   bash scripts/gpu/h200.sh overhead turbomind --pairs 3 --set load.concurrency=[64]   # /metrics sampling's cost
#   bash scripts/gpu/h200.sh kernels                          # vLLM and the newest lmdeploy in one worker
#   bash scripts/gpu/h200.sh kernels --backends turbomind --python turbomind=/tmp/llmc/site/bin/python-lmdeploy-0.17.0
#     (another engine version: the python wrapper of its site, which puts that site first; env.sh's LLMC_PY_*)
# SCENARIO=name picks another scenario (default qwen-awq-h200).
set -euo pipefail
cd "$(dirname "$0")/../.."
source /tmp/llmc/env.sh
export PYTHONPATH=$PWD:$LLMC_TOOLS_SITE PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TQDM_MININTERVAL=10
what=$1; shift
case $what in
  serve) exec python3 -m llmcompare.cli serve-bench "${SCENARIO:-qwen-awq-h200}" --engines "$@" --output-dir "${OUT:-runs}" ;;
  overhead) exec python3 scripts/metrics_overhead.py "${SCENARIO:-qwen-awq-h200}" "$@" --output-dir "${OUT:-runs}" ;;
  kernels) PYTHONPATH=$PYTHONPATH:$LLMC_SITE_VLLM:$LLMC_SITE_LMDEPLOY:$LLMC_SITE_COMMON LD_LIBRARY_PATH=$LLMC_CU12_LD_PATH \
           python3 -m llmcompare.cli kernel-bench "${SCENARIO:-qwen-awq-h200}" --output-dir "${OUT:-runs}" "$@" ;;
  *) echo "usage: $0 serve ENGINE... [--set K=V...] | overhead ENGINE [--pairs N] [--set K=V...] | kernels" >&2; exit 2 ;;
esac
