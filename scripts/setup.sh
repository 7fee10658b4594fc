#!/usr/bin/env bash
# Set up a virtual environment with reward_auditor and all its extras.
#   VENV=path   where the environment goes (default .venv)
#   TORCH_SPEC  the torch requirement installed first (default torch==2.13.0; use a CUDA build on a GPU box)
#   --no-apt    skip the optional Debian packages (apertium for LC/SLC, WordNet for ST, chromium for the page checks)
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
TORCH_SPEC=${TORCH_SPEC:-torch==2.13.0}
want_apt=1
for arg in "$@"; do [ "$arg" = "--no-apt" ] && want_apt=0; done

debs="apertium apertium-eng-spa wordnet-base wordnet-sense-index chromium"
if [ "$want_apt" = 1 ]; then
  missing=$(for d in $debs; do dpkg -s "$d" >/dev/null 2>&1 || echo "$d"; done)
  if [ -n "$missing" ]; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
      echo "setup: installing Debian packages: $missing"
      DEBIAN_FRONTEND=noninteractive apt-get update -qq
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing >/dev/null
    else
      echo "setup: optional Debian packages missing ($missing); LC/SLC and ST need them:" >&2
      echo "       sudo apt-get install $debs" >&2
    fi
  fi
fi

[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
"$VENV/bin/python" -m pip install -q --upgrade pip
# torch first, pinned, so pip does not pull a multi-GB CUDA build on a CPU machine.
"$VENV/bin/python" -m pip install -q "$TORCH_SPEC"
"$VENV/bin/python" -m pip install -q -e ".[all]"
# papermill reports run on this environment's own kernel.
"$VENV/bin/python" -m ipykernel install --sys-prefix --name python3 >/dev/null
echo "setup: ready in $VENV ($("$VENV/bin/python" -c 'import reward_auditor; print("reward_auditor", reward_auditor.__version__)'))"
