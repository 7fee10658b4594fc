#!/usr/bin/env bash
# A short GPU check, run from the repository root on a machine with a CUDA GPU:
#
#   bash bench/gpu_check.sh
#
# Prints numbers only; nothing is asserted about speed.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python}
export PYTHONPATH="$PWD:$PWD/tests:${PYTHONPATH:-}" TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1

# throughput: token-budget batches vs the previous fixed 16 rows, tokenizing ahead vs in series (about 3 minutes)
timeout 240 "$PY" bench/gpu_throughput.py --pairs 2000
