#!/usr/bin/env bash
# Create .venv with slogate and its dev tools (idempotent). vLLM itself goes into its own venv,
# installed on first use by `slogate setup-cpu`, `slogate serve-local` or `slogate demo`.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
fresh=0
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
  fresh=1
fi
log=.venv/setup.log
: >"$log"
if [ "$fresh" = 1 ]; then
  # A current pip: the venv's own (23.2 with Python 3.11) spends much of an install matching wheel tags
  # against the package indexes' links (78 -> 68 s on 2 cores); not fatal where it cannot be had.
  .venv/bin/python -m pip install --quiet --upgrade pip >>"$log" 2>&1 || true
fi
if ! .venv/bin/python -m pip install --quiet -e '.[dev,docs]' >>"$log" 2>&1; then
  grep -v "^WARNING: Location" "$log" | tail -20 >&2
  echo "slogate: error: installing slogate into .venv failed (full log: $log)" >&2
  exit 4
fi
