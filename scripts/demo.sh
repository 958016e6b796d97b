#!/usr/bin/env bash
# One command on a fresh machine: set up, serve the CPU demo model with vLLM, run a short gated
# headless load (shared and unique prefixes), print the verdict and per-class TTFT table, leave
# the reports in ./slogate-report/, stop the server. Extra arguments go to `slogate demo`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/slogate demo "$@"
