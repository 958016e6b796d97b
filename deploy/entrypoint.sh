#!/bin/sh
# slogate's container entrypoint (deploy/Dockerfile). A worker is exec'd as plain Locust. Otherwise
# (master or single process) Locust runs as a child; afterwards the reports in --slo-report-dir are
# printed between markers, so `kubectl logs` alone carries them (deploy/run-gate.sh cuts them out
# again), then one last line `slogate: exit code N`, and the container exits with Locust's code N:
# the gate's 0 pass, 1 fail, 2 usage, 3 inconclusive.
set -u
report_dir=slogate-report
prev=
for a in "$@"; do
    case "$a" in
        --worker) exec locust "$@" ;;
        --slo-report-dir=*) report_dir="${a#--slo-report-dir=}" ;;
    esac
    if [ "$prev" = "--slo-report-dir" ]; then report_dir="$a"; fi
    prev="$a"
done
locust "$@" &
child=$!
trap 'kill -TERM "$child" 2>/dev/null' TERM INT
wait "$child"
rc=$?
if [ "$rc" -gt 128 ]; then  # wait was interrupted by the trap: wait for Locust itself
    wait "$child"
    rc=$?
fi
for f in slo-summary.md slo-report.json slo-junit.xml; do
    if [ -f "$report_dir/$f" ]; then
        echo "----- BEGIN slogate $f -----"
        cat "$report_dir/$f"
        echo
        echo "----- END slogate $f -----"
    fi
done
echo "slogate: exit code $rc"
exit "$rc"
