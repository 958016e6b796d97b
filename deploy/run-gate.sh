#!/usr/bin/env bash
# Run the slogate gate on Kubernetes and exit with the master's exit code: 0 pass, 1 fail,
# 2 usage error, 3 inconclusive (also: no result before the deadline).
#
#   deploy/run-gate.sh [extra helm args, e.g. --set image.tag=$GIT_SHA]
#
# Environment (defaults in brackets):
#   SLOGATE_MODE        helm | operator                                     [helm]
#   SLOGATE_RELEASE     Helm release / fullnameOverride; in operator mode the
#                       LocustTest's metadata.name                          [ttft-gate]
#   SLOGATE_NAMESPACE   namespace                                           [default]
#   SLOGATE_TIMEOUT_S   give up (exit 3) after this many seconds            [3600]
#   SLOGATE_POLL_S      seconds between status polls                        [10]
#   SLOGATE_OUT         where the log and reports are written locally      [slogate-report]
#   SLOGATE_CHART       chart reference                                     [deliveryhero/locust]
#   SLOGATE_VALUES      Helm values file                                    [deploy/helm/values.yaml]
#   SLOGATE_MANIFEST    operator manifest                                   [deploy/operator/locusttest.yaml]
#
# Steps: apply the run (helm upgrade --install of chart 0.35.0, or kubectl apply), wait for the
# master Job `<release>-master` to complete or fail, save its log, cut the reports the image's
# entrypoint printed there into $SLOGATE_OUT, print the summary, clean up (helm uninstall, or
# kubectl delete), exit with the master's code.
set -uo pipefail

MODE="${SLOGATE_MODE:-helm}"
NAME="${SLOGATE_RELEASE:-ttft-gate}"
NS="${SLOGATE_NAMESPACE:-default}"
TIMEOUT_S="${SLOGATE_TIMEOUT_S:-3600}"
POLL_S="${SLOGATE_POLL_S:-10}"
OUT="${SLOGATE_OUT:-slogate-report}"
CHART="${SLOGATE_CHART:-deliveryhero/locust}"
CHART_VERSION="0.35.0"
VALUES="${SLOGATE_VALUES:-deploy/helm/values.yaml}"
MANIFEST="${SLOGATE_MANIFEST:-deploy/operator/locusttest.yaml}"
JOB="$NAME-master"
LOG="$OUT/master.log"

say() { echo "run-gate: $*" >&2; }
k() { kubectl -n "$NS" "$@"; }

cleanup() {
    say "cleaning up"
    if [ "$MODE" = helm ]; then
        helm uninstall "$NAME" -n "$NS" --wait=false >/dev/null 2>&1 || true
        k delete job "$JOB" --ignore-not-found --wait=false >/dev/null 2>&1 || true
    else
        k delete -f "$MANIFEST" --ignore-not-found --wait=false >/dev/null 2>&1 || true
    fi
}

case "$MODE" in helm|operator) ;; *) say "SLOGATE_MODE must be helm or operator, got '$MODE'"; exit 2 ;; esac
mkdir -p "$OUT" || exit 2
: > "$LOG"
trap cleanup EXIT
trap 'exit 3' TERM INT

if [ "$MODE" = helm ]; then
    # A previous run's finished Job would make `helm upgrade` fail (a Job's template is immutable).
    k delete job "$JOB" --ignore-not-found >/dev/null 2>&1 || true
    helm upgrade --install "$NAME" "$CHART" --version "$CHART_VERSION" -n "$NS" \
        -f "$VALUES" --set fullnameOverride="$NAME" "$@" >&2 || { say "helm failed"; exit 2; }
else
    k apply -f "$MANIFEST" >&2 || { say "kubectl apply failed"; exit 2; }
fi

# Follow the master's log from its start: in operator mode the Job and its pod are deleted the
# moment they finish, so the log is the only record of the exit code and the reports.
follower=""
start_follow() {
    # kubectl itself in the background (not a function: $! must be kubectl's pid, to stop it).
    kubectl -n "$NS" logs -f "job/$JOB" --pod-running-timeout="${TIMEOUT_S}s" >> "$LOG" 2>/dev/null &
    follower=$!
}
code_from_log() { sed -n 's/^slogate: exit code \([0-9][0-9]*\)$/\1/p' "$LOG" | tail -n 1; }

deadline=$(( $(date +%s) + TIMEOUT_S ))
state=""
while :; do
    status="$(k get job "$JOB" -o 'jsonpath={.status.succeeded}/{.status.failed}' 2>/dev/null)" && seen=1 || seen=0
    if [ "$seen" = 1 ] && [ -z "$follower" ]; then start_follow; fi
    case "$status" in
        [1-9]*/*) state=complete; break ;;
        */[1-9]*) state=failed; break ;;
    esac
    # The Job is gone (the operator's ttlSecondsAfterFinished is 0) and the log has the exit code.
    if [ "$seen" = 0 ] && [ -n "$follower" ] && [ -n "$(code_from_log)" ]; then state=ended; break; fi
    if [ "$(date +%s)" -ge "$deadline" ]; then state=timeout; break; fi
    sleep "$POLL_S"
done
say "master job $JOB: $state"

if [ -n "$follower" ]; then
    # Give the follower a moment to drain the last lines, then take the whole log once more if the
    # Job is still there (it is in helm mode: ttlSecondsAfterFinished keeps it).
    for _ in 1 2 3 4 5; do [ -n "$(code_from_log)" ] && break; sleep 1; done
    kill "$follower" 2>/dev/null; wait "$follower" 2>/dev/null
fi
if [ -z "$(code_from_log)" ]; then
    k logs "job/$JOB" > "$LOG.full" 2>/dev/null && [ -s "$LOG.full" ] && mv "$LOG.full" "$LOG"
    rm -f "$LOG.full"
fi

# The reports, as the entrypoint printed them between BEGIN/END markers.
for f in slo-summary.md slo-report.json slo-junit.xml; do
    awk -v f="$f" '$0 == "----- END slogate " f " -----" {p=0} p {print} $0 == "----- BEGIN slogate " f " -----" {p=1}' \
        "$LOG" > "$OUT/$f"
    [ -s "$OUT/$f" ] || rm -f "$OUT/$f"
done
[ -f "$OUT/slo-summary.md" ] && cat "$OUT/slo-summary.md"

code="$(code_from_log)"
if [ -z "$code" ]; then
    # No marker (the container was killed, or an image without the entrypoint): ask the pod.
    code="$(k get pods -l "job-name=$JOB" \
        -o 'jsonpath={.items[0].status.containerStatuses[0].state.terminated.exitCode}' 2>/dev/null)"
fi
if [ "$state" = timeout ]; then
    say "no result within ${TIMEOUT_S}s: inconclusive (exit 3)"
    code=3
elif ! [[ "$code" =~ ^[0-3]$ ]]; then
    say "master exit code '${code:-unknown}' is not a gate code: inconclusive (exit 3)"
    code=3
elif [ ! -f "$OUT/slo-report.json" ] && [ "$code" != 2 ]; then
    # Locust ended without the gate judging (e.g. no workers within --expect-workers-max-wait):
    # neither a pass nor an SLO failure. (2, a usage error, stands: Locust's own parser has no report.)
    say "master exit code $code but no slo-report.json in its log: inconclusive (exit 3)"
    code=3
fi
say "gate exit code $code (log and reports in $OUT/)"
exit "$code"
