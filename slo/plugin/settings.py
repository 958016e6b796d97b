"""The gate's options as typed values: one frozen dataclass per concern (the SLO file and its
overrides, early stop and abort, reports and live metrics, Slack alerts, Locust's own run options),
read from Locust's parsed options and checked in one place. The gate builds them at `init` and again
at each `test_start` (the web UI form may change options between runs); nothing else reads Locust's
parsed options. Sentinels become None (`--slo-warmup-s -1`: the SLO file's warm-up).

What the master passes to its workers rides on the parsed options, which Locust's spawn message
carries whole (`carry`, `carried`): attributes that are no command-line option, so no form shows them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from slogate.slo.gate.early_stop import DEFAULT_CONFIDENCE
from slogate.slo.gate.intervals import DEFAULT_INTERVAL_S
from slogate.slo.gate.self_check import MAX_LOOP_LAG_P99_MS
from slogate.slo.gate.spec import SloSpecError
from slogate.slo.gate.window import DEFAULT_WINDOW_S
from slogate.slo.outputs.publish import AlertSettings
from slogate.slo.outputs.slack import DEFAULT_BUDGET_S, DEFAULT_NOTIFY, parse_notify
from slogate.slo.outputs.vllm_export import parse_exports


@dataclass(frozen=True)
class GateOptions:
    """What to judge: `--slo-file`, its overrides, `--slo-baseline` and the run's self-checks."""

    slo_file: str | None = None
    min_samples: int | None = None  # None: the SLO file's
    warmup_s: float | None = None  # None: the SLO file's (or 0 without one)
    baseline: str | None = None
    unreachable_s: float = 15.0
    max_client_lag_ms: float = MAX_LOOP_LAG_P99_MS


@dataclass(frozen=True)
class EarlyStopOptions:
    """`--slo-abort-on-fail` with its window, `--slo-stop-when-decided` (or `-failed`) with its confidence and
    exceptions."""

    abort_on_fail: bool = False
    window_s: float = DEFAULT_WINDOW_S
    stop_when_decided: bool = False
    stop_when_failed: bool = False  # --slo-stop-when-failed: the same bounds, only a fail ends the run
    confidence: float = DEFAULT_CONFIDENCE
    not_blocking: tuple[str, ...] = ()
    correlated: bool = False  # --slo-correlated-requests: percentiles decided on batches (slo/gate/correlation.py)


@dataclass(frozen=True)
class ReportOptions:
    """Where the reports go and what feeds them besides the requests."""

    report_dir: str = "slogate-report"  # "": none (tests)
    interval_s: float = DEFAULT_INTERVAL_S  # 0: no time series
    server_metrics_interval_s: float = 0.0  # 0: no scraping
    metrics_port: int = 0  # 0: no /slo/metrics of its own
    exports: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class RunOptions:
    """Locust's own options the gate and the load library go by."""

    headless: bool = False
    run_time_s: float | None = None
    stop_timeout_s: float = 0.0
    web_host: str = ""
    master: bool = False
    expect_workers: int = 1
    num_users: int | None = None


@dataclass(frozen=True)
class Settings:
    """Every option of the gate, by concern."""

    gate: GateOptions
    early_stop: EarlyStopOptions
    reports: ReportOptions
    alerts: AlertSettings
    run: RunOptions

    @classmethod
    def from_parsed(cls, opts: Any) -> Settings:
        """Read and check `opts` (Locust's parsed options; absent ones take their defaults): SloSpecError,
        NotifyPolicyError or ExportError, one line, for a value no run can use."""
        return cls(_gate(opts), _early_stop(opts), _reports(opts), _alerts(opts), run_options(opts))


def _get(opts: Any, name: str, default: Any) -> Any:
    value = getattr(opts, name, default)
    return default if value is None else value


def _gate(opts: Any) -> GateOptions:
    warmup = _get(opts, "slo_warmup_s", -1.0)
    return GateOptions(
        slo_file=_get(opts, "slo_file", "") or None,
        min_samples=int(_get(opts, "slo_min_samples", 0)) or None,
        warmup_s=float(warmup) if warmup >= 0 else None,
        baseline=_get(opts, "slo_baseline", "") or None,
        unreachable_s=float(_get(opts, "slo_unreachable_s", 15.0)),
        max_client_lag_ms=_get(opts, "max_client_lag_ms", MAX_LOOP_LAG_P99_MS),
    )


def _early_stop(opts: Any) -> EarlyStopOptions:
    abort_on_fail = bool(_get(opts, "slo_abort_on_fail", False))
    window_s = getattr(opts, "slo_window_s", DEFAULT_WINDOW_S)
    if abort_on_fail and (not isinstance(window_s, int | float) or window_s <= 0):
        raise SloSpecError(f"--slo-window-s: must be > 0, got {window_s!r}")
    if abort_on_fail and _interval_s(opts) <= 0:
        raise SloSpecError("--slo-abort-on-fail judges the time series: --slo-interval-s must be > 0")
    if abort_on_fail and not _get(opts, "slo_file", ""):
        raise SloSpecError("--slo-abort-on-fail judges the SLO file's objectives: give --slo-file")
    confidence = getattr(opts, "slo_confidence", DEFAULT_CONFIDENCE)
    if not isinstance(confidence, int | float) or not 0 < confidence < 1:
        raise SloSpecError(f"--slo-confidence: must be in (0, 1), e.g. 0.99, got {confidence!r}")
    not_blocking = tuple(n.strip() for n in (_get(opts, "slo_not_blocking", "")).split(",") if n.strip())
    stop_when_decided = bool(_get(opts, "slo_stop_when_decided", False))
    stop_when_failed = bool(_get(opts, "slo_stop_when_failed", False))  # waits for no pass: not_blocking is moot
    if not (stop_when_decided or stop_when_failed) and not_blocking:
        raise SloSpecError("--slo-not-blocking names what --slo-stop-when-decided does not wait for: give both")
    if stop_when_decided and not _get(opts, "slo_file", ""):
        raise SloSpecError("--slo-stop-when-decided decides the SLO file's objectives: give --slo-file")
    if stop_when_failed and stop_when_decided:
        raise SloSpecError("--slo-stop-when-failed is --slo-stop-when-decided without its passes: give one of them")
    if stop_when_failed and not _get(opts, "slo_file", ""):
        raise SloSpecError("--slo-stop-when-failed decides the SLO file's objectives: give --slo-file")
    correlated = bool(_get(opts, "slo_correlated_requests", False))
    if correlated and not (stop_when_decided or stop_when_failed):
        raise SloSpecError(
            "--slo-correlated-requests is how --slo-stop-when-decided (or -failed) decides percentiles: give both"
        )
    if correlated and _interval_s(opts) <= 0:
        raise SloSpecError("--slo-correlated-requests measures the time series: --slo-interval-s must be > 0")
    return EarlyStopOptions(
        abort_on_fail,
        float(window_s) if abort_on_fail else DEFAULT_WINDOW_S,
        stop_when_decided,
        stop_when_failed,
        float(confidence),
        not_blocking,
        correlated,
    )


def _interval_s(opts: Any) -> float:
    return max(0.0, float(_get(opts, "slo_interval_s", DEFAULT_INTERVAL_S)))


def _reports(opts: Any) -> ReportOptions:
    return ReportOptions(
        report_dir=report_dir(opts),
        interval_s=_interval_s(opts),
        server_metrics_interval_s=float(_get(opts, "server_metrics_interval", 0) or 0),
        metrics_port=int(_get(opts, "slo_metrics_port", 0) or 0),
        exports=tuple(parse_exports(getattr(opts, "export", None))),
    )


def _alerts(opts: Any) -> AlertSettings:
    return AlertSettings(
        _get(opts, "slack_channel", "") or None,
        parse_notify(_get(opts, "slack_notify", DEFAULT_NOTIFY)),
        _get(opts, "slack_timeout_s", DEFAULT_BUDGET_S),
    )


def run_options(opts: Any) -> RunOptions:
    """Locust's own options (no check: Locust's parser made them)."""
    run_time = getattr(opts, "run_time", None)
    num_users = getattr(opts, "num_users", None)
    return RunOptions(
        headless=bool(getattr(opts, "headless", False)),
        run_time_s=float(run_time) if run_time else None,
        stop_timeout_s=float(getattr(opts, "stop_timeout", 0) or 0),
        web_host=getattr(opts, "web_host", "") or "",
        master=bool(getattr(opts, "master", False)),
        expect_workers=max(1, int(getattr(opts, "expect_workers", 1) or 1)),
        num_users=None if num_users is None else int(num_users),
    )


def report_dir(opts: Any) -> str:
    """`--slo-report-dir`, which even a refused configuration writes its error report to ("": none)."""
    return getattr(opts, "slo_report_dir", None) or ""


def parsed(environment: Any) -> Any:
    """Locust's parsed options of `environment`: None for an environment without a command line."""
    return getattr(environment, "parsed_options", None)


def take_over_run_time(environment: Any) -> None:
    """A headless `--run-time` is enforced by the gate (slo/plugin/hooks.py): Locust's own timer
    must not see it."""
    environment.parsed_options.run_time = None


def carry(environment: Any, name: str, value: Any) -> None:
    """Pass `value` to the workers with the next spawn message (a master's; harmless elsewhere)."""
    opts = parsed(environment)
    if opts is not None:
        setattr(opts, name, value)


def carried(environment: Any, name: str, default: Any = None) -> Any:
    """What the master passed (`carry`) or this process set, else `default`."""
    return getattr(parsed(environment), name, default)
