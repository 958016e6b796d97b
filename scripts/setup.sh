#!/usr/bin/env bash
# Create .venv with slogate and its dev tools (idempotent). vLLM itself goes into its own venv,
# installed on first use by `slogate setup-cpu`, `slogate serve-local` or `slogate demo`.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
log=.venv/setup.log
if ! .venv/bin/python -m pip install --quiet -e '.[dev,docs]' >"$log" 2>&1; then
  grep -v "^WARNING: Location" "$log" | tail -20 >&2
  echo "slogate: error: installing slogate into .venv failed (full log: $log)" >&2
  exit 4
fi
