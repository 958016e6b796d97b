#!/usr/bin/env bash
# The logic of the composite GitHub Action (action.yml): install slogate, run the gate, and hand
# the verdict and exit code to the workflow. Tested by tests/cli/test_action.py with fake `pip` and
# `slogate` executables (no network).
#
# Inputs (environment): INPUT_HOST (required), INPUT_SLO_FILE, INPUT_CONFIG, INPUT_LOCUST_ARGS
# (shell-quoted), INPUT_BASELINE, INPUT_REPORT_DIR (default slogate-report), INPUT_ARTIFACT_NAME,
# INPUT_SLOGATE_SPEC (what pip installs; default: the action's own checkout, SLOGATE_ACTION_PATH).
# Outputs ($GITHUB_OUTPUT): verdict, exit-code, report-dir. The gate itself appends its Markdown
# summary to $GITHUB_STEP_SUMMARY; this script adds a line when there is no report, and where the
# full report is. It always exits 0: the action's last step fails the job with the gate's code,
# after the report has been uploaded.
set -uo pipefail

host="${INPUT_HOST:-}"
slo_file="${INPUT_SLO_FILE:-}"
config="${INPUT_CONFIG:-}"
baseline="${INPUT_BASELINE:-}"
report_dir="${INPUT_REPORT_DIR:-slogate-report}"
artifact="${INPUT_ARTIFACT_NAME:-slogate-report}"
spec="${INPUT_SLOGATE_SPEC:-}"
[ -n "$spec" ] || spec="${SLOGATE_ACTION_PATH:-.}"
outputs="${GITHUB_OUTPUT:-/dev/null}"
summary="${GITHUB_STEP_SUMMARY:-}"
python="$(command -v python3 || command -v python || echo python3)"

set_outputs() {  # verdict exit-code
    {
        echo "verdict=$1"
        echo "exit-code=$2"
        echo "report-dir=$report_dir"
    } >>"$outputs"
}

stop() {  # message exit-code: the gate did not run; record it and let the last step fail the job
    echo "::error title=slogate::$1"
    set_outputs error "$2"
    if [ -n "$summary" ]; then
        printf '## slogate: ERROR (exit %s)\n\n%s\n' "$2" "$1" >>"$summary"
    fi
    exit 0
}

# The host as it may be shown: without user:password@ (a Basic credential stays out of the log).
public_host() {
    printf '%s' "$1" | sed -E 's#^([a-zA-Z][a-zA-Z0-9+.-]*://)[^/@]*@#\1#'
}

[ -n "$host" ] || stop "input 'host' is required" 2
for pair in "slo-file:$slo_file" "config:$config" "baseline:$baseline"; do
    name="${pair%%:*}"
    path="${pair#*:}"
    if [ -n "$path" ] && [ ! -f "$path" ]; then
        stop "input '$name': no such file: $path" 2
    fi
done

# Locust options: split like a shell would (quotes kept), never evaluated.
split="$(mktemp)"
trap 'rm -f "$split" "$split.err"' EXIT
if ! "$python" -c 'import shlex, sys; sys.stdout.write("".join(a + "\0" for a in shlex.split(sys.argv[1])))' \
    "${INPUT_LOCUST_ARGS:-}" >"$split" 2>"$split.err"; then
    stop "input 'locust-args' cannot be split: $(tail -n 1 "$split.err")" 2
fi
extra=()
mapfile -d '' -t extra <"$split"
if [ -n "$baseline" ]; then
    extra+=(--slo-baseline "$baseline")
fi

echo "::group::pip install $spec"
if ! pip install --disable-pip-version-check --quiet "$spec"; then
    echo "::endgroup::"
    stop "pip install $spec failed" 4
fi
echo "::endgroup::"
command -v slogate >/dev/null || stop "slogate is not on PATH after pip install $spec" 4

argv=(slogate run --host "$host" --report-dir "$report_dir")
[ -n "$slo_file" ] && argv+=(--slo-file "$slo_file")
[ -n "$config" ] && argv+=(--config "$config")
argv+=(-- "${extra[@]}")

shown=("${argv[@]}")
shown[3]="$(public_host "$host")"
echo "slogate: ${shown[*]}"
"${argv[@]}"
code=$?

report="$report_dir/slo-report.json"
verdict=""
if [ -f "$report" ]; then
    verdict="$("$python" -c 'import json, sys; print(json.load(open(sys.argv[1])).get("verdict", ""))' "$report" 2>/dev/null)"
fi
if [ -z "$verdict" ]; then
    verdict=error
    echo "::error title=slogate::no report in $report_dir (exit $code)"
    if [ -n "$summary" ]; then
        printf '## slogate: no report (exit %s)\n\nThe gate wrote no %s; see the job log.\n' "$code" "$report" >>"$summary"
    fi
elif [ -n "$summary" ]; then
    printf '\nFull report (HTML with charts, JSON, JUnit, HdrHistogram interval log): artifact `%s`.\n' \
        "$artifact" >>"$summary"
fi
set_outputs "$verdict" "$code"
case "$code" in
    0) echo "slogate: verdict $verdict (exit 0)" ;;
    *) echo "::error title=slogate::verdict $verdict (exit $code)" ;;
esac
exit 0
