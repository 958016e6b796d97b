"""The judge: measurements and run facts in, one typed `Report` out.

It knows nothing of Locust or gevent (a test checks that): the live gate (slo/plugin/),
`slogate judge` on a saved report or a `vllm bench serve` result, and the web UI's live view all
call `judge`, so one run gives one verdict whoever asks.
"""

from __future__ import annotations

from dataclasses import replace

from slogate.slo.gate.early_stop import DEFAULT_CONFIDENCE, look
from slogate.slo.gate.evaluate import ObjectiveResult, evaluate
from slogate.slo.gate.facts import CUT_SHORT, DECIDED, Breach, RunStop
from slogate.slo.gate.metrics import MetricsStore
from slogate.slo.gate.record import ALL, ErrorKind
from slogate.slo.gate.regression import Baseline, RegressionCheck, check
from slogate.slo.gate.report import Report, RunInfo
from slogate.slo.gate.self_check import assess
from slogate.slo.gate.sequential import FAIL
from slogate.slo.gate.server_figures import ServerFigures
from slogate.slo.gate.spec import SloSpec
from slogate.slo.gate.verdict import Outcome, RegressionStatus, Verdict


class UnknownClass(ValueError):
    """An SLO names a request class these measurements cannot have; str() is one line."""


def check_classes(spec: SloSpec, available: list[str], source: str) -> None:
    """Refuse (before judging, or before any load) an SLO on a class the workload cannot produce."""
    missing = sorted(spec.classes - set(available))
    if missing:
        raise UnknownClass(
            f"{spec.source}: class {missing[0]!r} is not measured by {source}; "
            f"classes available: {', '.join(available)}"
        )


def dropped_sends(measurements: MetricsStore) -> list[str]:
    """Open-loop sends dropped at --max-in-flight: they could only have been slower, so they make a
    pass doubtful, never a failure."""
    dropped = measurements.get(ALL).dropped
    if not dropped:
        return []
    return [
        f"{dropped} scheduled requests were dropped: every --max-in-flight slot was busy at their send time "
        "(raise --max-in-flight, or the server cannot keep up with the arrival rate)"
    ]


def measurement_problems(measurements: MetricsStore) -> list[str]:
    """Facts in the measurements themselves that make any figure doubtful."""
    problems = []
    total = measurements.get(ALL)
    kinds = total.errors_by_kind
    if (
        total.requests
        and not total.successes
        and kinds.get(ErrorKind.CONNECT, 0) + kinds.get(ErrorKind.TLS, 0) == (total.requests)
    ):
        tls = kinds.get(ErrorKind.TLS, 0)
        how = "failed to connect" if not tls else f"failed to connect ({tls} the TLS handshake: see --ca-bundle)"
        problems.append(f"target unreachable: all {total.requests} requests {how}")
    return problems


def with_ttft_gap(server: ServerFigures | None, measurements: MetricsStore) -> ServerFigures | None:
    """The server figures plus the client-server TTFT gap: time outside the engine (network, HTTP
    server, and any queueing before the engine). The client's mean is over the requests that
    finished: those in flight at the stop are in its TTFT histogram with the time they had waited,
    a lower bound the server does not share (it may count their first token after the stop)."""
    if server is None:
        return None
    total = measurements.get(ALL)
    ttft, unfinished = total.latency["ttft"], total.unfinished_ttft
    client_mean = ttft.mean_ms()
    if client_mean is not None and unfinished is not None and unfinished.count:
        finished = ttft.count - unfinished.count  # both means are over the same bucket middles: exact
        unfinished_sum = (unfinished.mean_ms() or 0.0) * unfinished.count
        client_mean = (client_mean * ttft.count - unfinished_sum) / finished if finished else None
    server_mean = server.server_ttft.mean if server.server_ttft else None
    if client_mean is None or server_mean is None:
        return server
    return replace(server, client_server_ttft_gap_ms=round(client_mean - server_mean, 3))


def fold_regression(verdict: Verdict, reasons: list[str], regression: RegressionCheck) -> Verdict:
    """The verdict once the baseline has spoken (appends to `reasons`).

    A regression fails the run (exit 1) unless the action is `warn`; an inconclusive comparison
    makes an otherwise passing run inconclusive (exit 3); a baseline of another workload is
    refused (exit 2 for a run that would otherwise pass): comparing with it would mean nothing.
    """
    status = regression.status
    if status == RegressionStatus.REFUSED:
        reasons.append(f"baseline refused: {regression.refused_reason}")
        return Verdict.ERROR if verdict == Verdict.PASS else verdict
    if status == RegressionStatus.OK:
        return verdict
    if regression.action == "warn":
        reasons.append(f"regression check: {status} (warn only)")
        return verdict
    if status == RegressionStatus.REGRESSION:
        reasons.append(f"regression against the baseline: {regression.names(status)}")
        return Verdict.FAIL if verdict in (Verdict.PASS, Verdict.INCONCLUSIVE) else verdict
    reasons.append(f"regression check inconclusive (change within the noise): {regression.names(status)}")
    return Verdict.INCONCLUSIVE if verdict == Verdict.PASS else verdict


def fold_abort(verdict: Verdict, reasons: list[str], aborted: Breach | None) -> Verdict:
    """The verdict of a run `--slo-abort-on-fail` stopped (`run.aborted`, slo/gate/window.py `Breach`): a
    fail (exit 1) whose first reason says when and why; a usage error stays one (prepends to
    `reasons`). Applied here, from the run's facts, so a saved aborted report judged again fails too."""
    if aborted is None:
        return verdict
    reasons.insert(0, aborted.message)
    return verdict if verdict == Verdict.ERROR else Verdict.FAIL


def fold_interrupted(
    verdict: Verdict, reasons: list[str], stopped: RunStop | None, spec: SloSpec, measurements: MetricsStore
) -> Verdict:
    """The verdict of a run cut short before its run time (a signal, or killed and judged from its
    journal): too early to judge, so
    inconclusive (exit 3), unless an objective had already failed beyond noise (the anytime-valid
    bounds of slo/gate/early_stop.py, at the default confidence), then a fail (exit 1). A usage
    error stays one. Applied here, from the run's facts, so a saved interrupted report judged again
    gives the same verdict (prepends to `reasons`)."""
    if stopped is None or stopped.reason not in CUT_SHORT or verdict == Verdict.ERROR:
        return verdict
    failed = [lk.name for lk in look(spec, measurements, DEFAULT_CONFIDENCE) if lk.state == FAIL]
    what = stopped.line().rstrip(".")
    if failed:
        reasons.insert(0, f"{what}: {', '.join(failed)} had already failed beyond noise")
        return Verdict.FAIL
    reasons.insert(0, f"{what}: too early to judge (its figures so far decide nothing)")
    return Verdict.INCONCLUSIVE


def rows_of_a_run_cut_short(
    results: list[ObjectiveResult], verdict: Verdict, stopped: RunStop | None
) -> list[ObjectiveResult]:
    """The objectives' rows of a run cut short and judged too early (inconclusive): an objective
    over its target so far had not failed beyond noise (or the verdict would be a fail), so its row
    says what the verdict says, not enough data (`insufficient_data`), rather than `fail`."""
    if verdict != Verdict.INCONCLUSIVE or stopped is None or stopped.reason not in CUT_SHORT:
        return results
    return [replace(r, result=Outcome.INSUFFICIENT) if r.result == Outcome.FAIL else r for r in results]


def note_early_decision(verdict: Verdict, reasons: list[str], stopped: RunStop | None) -> None:
    """A run decided early (`--slo-stop-when-decided`) on the requests that had ended, whose figures
    at the stop (with the requests then in flight, their waits as lower bounds) say otherwise: the
    verdict on every figure stands, and a reason says so (appends to `reasons`)."""
    if stopped is None or stopped.reason != DECIDED or verdict not in (Verdict.PASS, Verdict.FAIL):
        return
    if stopped.verdict != str(verdict):
        reasons.append(
            f"decided {stopped.verdict} after {stopped.after_s:.0f} s on the requests ended by then; the figures "
            f"at the stop, with the requests then in flight, say {verdict}"
        )


def judge(
    spec: SloSpec | None,
    measurements: MetricsStore,
    run: RunInfo,
    server: ServerFigures | None = None,
    baseline: Baseline | None = None,
) -> Report:
    """The verdict on a run. Without a spec the run is measured, not gated (`ungated`, exit 0),
    unless something made its figures doubtful (`inconclusive`, exit 3). A run stopped by
    `--slo-abort-on-fail` (`run.aborted`) fails whatever its figures say."""
    problems = [*run.problems, *measurement_problems(measurements)]
    doubts = dropped_sends(measurements)
    saturation = assess(measurements, run.cpu_warning, run.processes, run.max_client_lag_ms, run.target)
    server = with_ttft_gap(server, measurements)
    if spec is None:
        problems += doubts
        reasons = [*problems, *([saturation.message] if saturation else [])]
        verdict = Verdict.INCONCLUSIVE if problems else Verdict.UNGATED
        reasons = reasons or ["no SLO file: measured, not gated"]
        verdict = fold_abort(verdict, reasons, run.aborted)
        return Report(
            verdict, reasons, run, measurements, server=server,
            saturated=saturation is not None,
        )  # fmt: skip
    evaluation = evaluate(spec, measurements, problems, server, saturation, doubts)
    verdict, reasons = evaluation.status, list(evaluation.reasons)
    regression = None
    if baseline is not None:
        regression = check(spec.regressions, spec.regression_action, baseline, measurements, run.model, run.workload)
        verdict = fold_regression(verdict, reasons, regression)
    verdict = fold_abort(verdict, reasons, run.aborted)
    verdict = fold_interrupted(verdict, reasons, run.stopped, spec, measurements)
    note_early_decision(verdict, reasons, run.stopped)
    results = rows_of_a_run_cut_short(evaluation.results, verdict, run.stopped)
    return Report(
        verdict, reasons, run, measurements, results, server, regression, saturation is not None,
        baseline_measurements=baseline.measurements if baseline is not None else None,
    )  # fmt: skip


def usage_error(message: str, run: RunInfo | None = None, measurements: MetricsStore | None = None) -> Report:
    """The report of a run that could not be judged: bad SLO file, result file or baseline (exit 2)."""
    return Report(Verdict.ERROR, [message], run or RunInfo(), measurements or MetricsStore())
