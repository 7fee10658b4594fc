#!/usr/bin/env bash
# The whole test suite: notebooks and package in sync, every notebook executed, then pytest.
#   VENV=path       the environment made by scripts/setup.sh (default .venv)
#   TEST_WORKERS=n  pytest processes (default 2; each test file runs whole in one of them, so its module fixtures
#                   are built once; 1 runs everything in this process)
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
bin="$VENV/bin"
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 MPLBACKEND=Agg PYTHONHASHSEED=0

echo "== 1/3 notebooks and exported package in sync (nbdev-export + nbdev-clean leave no diff)"
"$bin/nbdev-export"
"$bin/nbdev-clean"
drift=$(git status --porcelain -- nbs reward_auditor)
if [ -n "$drift" ]; then
  echo "Notebooks and package are out of sync; run nbdev-export && nbdev-clean and commit:" >&2
  echo "$drift" >&2
  git --no-pager diff --stat -- nbs reward_auditor >&2
  exit 1
fi

echo "== 2/3 nbdev-test: every notebook executed"
"$bin/nbdev-test" --n-workers 2 --timing

echo "== 3/3 pytest"
workers=${TEST_WORKERS:-2}
if [ "$workers" -gt 1 ]; then
  "$bin/python" -m pytest tests -n "$workers" --dist loadfile --durations=15 "$@"
else
  "$bin/python" -m pytest tests --durations=15 "$@"
fi
