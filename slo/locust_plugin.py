"""Locust integration: SLO options, the listener, and the verdict when the run ends.

Importing this module (a locustfile does `import slogate.slo.locust_plugin`) registers:
- `--slo-file`, `--slo-report-dir`, `--slo-warmup-s`, `--slo-min-samples` (command line,
  `locust.conf` and the web UI form);
- the request listener on every load-generating process;
- distributed plumbing: workers ship their histograms in `report_to_master` and flush the rest
  at `test_stop`; the master merges and is the only process that judges and writes reports;
- the verdict in `quitting` (module level, so after Locust's own handlers and its final worker
  reports), which sets the process exit code: 0 pass, 1 fail, 2 usage, 3 inconclusive.
"""

from __future__ import annotations

import logging
import sys
import time
from pathlib import Path
from typing import Any

import gevent
from locust import events
from locust.runners import MasterRunner, WorkerRunner
from slogate.slo import exitcodes, regression, self_check, web_ui
from slogate.slo.baseline import BaselineError, load_baseline
from slogate.slo.evaluate import evaluate
from slogate.slo.listener import RecordListener
from slogate.slo.metrics import MetricsStore
from slogate.slo.record import ErrorKind
from slogate.slo.report import build_report, public_url, write_reports
from slogate.slo.self_check import MAX_LOOP_LAG_P99_MS, LoopLagMonitor, assess
from slogate.slo.server_metrics import Scraper
from slogate.slo.slack import (
    DEFAULT_NOTIFY,
    NOTIFY_CHOICES,
    SlackNotifier,
    build_message,
    ci_run_url,
    reasons_to_notify,
)
from slogate.slo.spec import SloSpec, SloSpecError, load_spec

log = logging.getLogger("slogate")
WIRE_KEY = "slogate"
FLUSH_MESSAGE = "slogate_flush"


class Gate:
    """Per-process state of the gate; one per Locust environment."""

    def __init__(self, environment: Any) -> None:
        self.environment = environment
        self.listener = RecordListener()
        self.merged = MetricsStore()  # master only: what the workers sent
        self.spec: SloSpec | None = None
        self.problems: list[str] = []
        self.workload: dict[str, Any] = {}
        self.model: str | None = None
        self.started_at: float | None = None
        self.workers_reporting: set[str] = set()
        self.workers_started: set[str] = set()  # master: workers connected when the test started
        self.workers_flushed: set[str] = set()  # master: workers whose final samples arrived
        self.run_time_s: float | None = None  # master: --run-time, which the gate enforces itself
        self.judged = False
        self.scraper: Scraper | None = None
        self.loop_monitor = LoopLagMonitor(lambda: self.listener.store.loop_lag)
        self.server: dict[str, Any] | None = None

    @property
    def options(self) -> Any:
        return self.environment.parsed_options

    @property
    def is_master(self) -> bool:
        return isinstance(self.environment.runner, MasterRunner)

    @property
    def is_worker(self) -> bool:
        return isinstance(self.environment.runner, WorkerRunner)

    def worker_payload(self) -> dict[str, Any]:
        """What a worker ships to the master: the samples since its last report, and its workload."""
        return {"metrics": self.listener.take().to_wire(), "model": self.model, "workload": self.workload}

    def load_spec(self) -> None:
        path = getattr(self.options, "slo_file", None)
        self.spec = load_spec(path) if path else None

    @property
    def warmup_s(self) -> float:
        override = getattr(self.options, "slo_warmup_s", -1)
        if override is not None and override >= 0:
            return override
        return self.spec.warmup_s if self.spec else 0.0

    def effective_spec(self) -> SloSpec | None:
        spec = self.spec
        min_samples = getattr(self.options, "slo_min_samples", 0)
        if spec is not None and min_samples:
            spec = SloSpec(spec.objectives, min_samples, spec.warmup_s, spec.source)
        return spec

    def metrics(self) -> MetricsStore:
        """Everything measured so far: merged worker data on a master, the local store otherwise."""
        if self.is_master:
            return self.merged
        return self.listener.store

    def run_info(self) -> dict[str, Any]:
        ended = time.time()
        runner = self.environment.runner
        return {
            "target": public_url(self.environment.host),
            "model": self.model,
            "workload": self.workload,
            "started_at": _iso(self.started_at),
            "ended_at": _iso(ended),
            "duration_s": None if self.started_at is None else round(ended - self.started_at, 3),
            "warmup_s": self.warmup_s,
            "mode": "master" if self.is_master else "local",
            "workers": len(self.workers_started | self.workers_reporting) if self.is_master else 1,
            "workers_complete": len(self.workers_flushed) if self.is_master else 1,
            "users": getattr(runner, "user_count", None),
            "slo_file": self.spec.source if self.spec else None,
        }

    def snapshot(self, final: bool = False) -> dict[str, Any]:
        """The report as of now, without side effects (the web UI polls this while the run goes on)."""
        metrics = self.metrics()
        problems = list(self.problems)
        workers = self.workers_started | self.workers_reporting
        lost = sorted(workers - self.workers_flushed) if final and self.is_master else []
        if lost:
            problems.append(
                f"{len(lost)} of {len(workers)} workers stopped reporting before the end "
                "(killed or disconnected): their samples since their last report (up to 3 s) are missing"
            )
        runner = self.environment.runner
        cpu_warning = bool(
            getattr(runner, "cpu_warning_emitted", False) or getattr(runner, "worker_cpu_warning_emitted", False)
        )
        processes = max(1, len(self.workers_started | self.workers_reporting)) if self.is_master else 1
        max_lag = getattr(self.options, "max_client_lag_ms", MAX_LOOP_LAG_P99_MS)
        saturation = assess(metrics, cpu_warning, processes, max_lag)
        total = metrics.get("all")
        if total.dropped:
            problems.append(
                f"{total.dropped} scheduled requests were dropped: every --max-in-flight slot was busy at their "
                "send time (raise --max-in-flight, or the server cannot keep up with the arrival rate)"
            )
        if total.requests and not total.successes and total.errors_by_kind.get(ErrorKind.CONNECT) == total.requests:
            problems.append(f"target unreachable: all {total.requests} requests failed to connect")
        server = self.scraper.metrics.summary() if self.scraper is not None else self.server
        spec = self.effective_spec()
        verdict = evaluate(spec, metrics, problems, server, saturation) if spec else None
        if verdict is None and saturation is not None:
            problems.append(saturation.message)
        extra = (
            None
            if verdict
            else {"verdict": "ungated", "exit_code": None, "reasons": problems or ["no --slo-file: nothing was gated"]}
        )
        report = build_report(verdict, metrics, run=self.run_info(), extra=extra, server=server)
        report["self_check"] = {**self_check.summary(metrics), "saturated": saturation is not None}
        return report

    def judge(self) -> dict[str, Any]:
        """The final report: the SLO verdict with any regression check folded in, and its exit code."""
        self.stop_scraper()
        report = self.snapshot(final=True)
        baseline_path = getattr(self.options, "slo_baseline", "")
        spec = self.effective_spec()
        if spec is not None and baseline_path:
            regression.judge(report, load_baseline(baseline_path), spec.regressions, spec.regression_action)
        return report

    def alert(self, report: dict[str, Any]) -> None:
        """Send the Slack message the policy asks for; records the outcome (never the secret)."""
        notifier = SlackNotifier.from_env(getattr(self.options, "slack_channel", "") or None)
        if notifier is None:
            return
        policy = {p.strip() for p in (getattr(self.options, "slack_notify", "") or "").split(",") if p.strip()}
        baseline_verdict = (report.get("regression") or {}).get("baseline_verdict")
        reasons = reasons_to_notify(report, policy, baseline_verdict)
        if not reasons:
            report["alerts"] = {"slack": {"sent": False, "detail": "nothing to notify under --slack-notify"}}
            return
        result = notifier.send(build_message(report, ci_run_url()))
        report["alerts"] = {
            "slack": {"sent": result.ok, "attempts": result.attempts, "detail": result.detail, "for": reasons}
        }
        if not result.ok:
            log.warning(
                "slogate: Slack notification failed after %d attempt(s) (%s); the verdict stands",
                result.attempts,
                result.detail,
            )

    def start_scraper(self) -> None:
        interval = getattr(self.options, "server_metrics_interval", 0) or 0
        self.server = None
        if interval > 0 and self.environment.host:
            self.scraper = Scraper(self.environment.host, interval)
            self.scraper.start()

    def stop_scraper(self) -> None:
        if self.scraper is not None:
            self.server = self.scraper.stop().summary()
            self.scraper = None


_gates: dict[int, Gate] = {}


def gate_for(environment: Any) -> Gate:
    gate = _gates.get(id(environment))
    if gate is None:
        gate = _gates[id(environment)] = Gate(environment)
    return gate


def abort_run(environment: Any, reason: str) -> None:
    """Stop the run because its figures cannot mean anything (e.g. the target is unreachable).
    The verdict becomes inconclusive with this reason."""
    gate = gate_for(environment)
    if reason not in gate.problems:
        gate.problems.append(reason)
        log.error("slogate: %s", reason)
    runner = environment.runner
    if runner is not None and not gate.is_worker:
        runner.quit()


def note_workload(environment: Any, model: str, workload: dict[str, Any]) -> None:
    """Record what the load looked like, for the report (and for baselines to compare like with like)."""
    gate = gate_for(environment)
    gate.model, gate.workload = model, workload


def _iso(ts: float | None) -> str | None:
    return None if ts is None else time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))


@events.init_command_line_parser.add_listener
def _add_arguments(parser: Any) -> None:
    parser.add_argument("--slo-file", type=str, default="", help="YAML file of SLOs to gate the run on (slogate)")
    parser.add_argument(
        "--slo-report-dir",
        type=str,
        default="slogate-report",
        help="Where slo-report.json, slo-junit.xml and slo-summary.md go",
    )
    parser.add_argument(
        "--slo-warmup-s",
        type=float,
        default=-1.0,  # not None: the web UI form would turn a None default into a string
        help="Seconds at the start not judged (default: warmup_s of the SLO file)",
    )
    parser.add_argument("--slo-baseline", type=str, default="", help="A saved report to check for regressions against")
    parser.add_argument(
        "--slack-channel", type=str, default="", help="Channel for SLACK_BOT_TOKEN (a webhook needs none)"
    )
    parser.add_argument(
        "--slack-notify",
        type=str,
        default=DEFAULT_NOTIFY,
        help=f"When to alert Slack, comma-separated from {','.join(NOTIFY_CHOICES)}",
    )
    parser.add_argument(
        "--max-client-lag-ms",
        type=float,
        default=MAX_LOOP_LAG_P99_MS,
        help="Self-check: p99 event-loop/send lag above which the load generator counts as saturated",
    )
    parser.add_argument(
        "--server-metrics-interval",
        type=float,
        default=2.0,
        help="Seconds between scrapes of the target's /metrics (0: off)",
    )
    parser.add_argument(
        "--slo-min-samples",
        type=int,
        default=0,
        help="Samples needed per SLO (default: min_samples of the SLO file)",
    )


@events.init.add_listener
def _on_init(environment: Any, runner: Any = None, **_: Any) -> None:
    gate = gate_for(environment)
    if environment.parsed_options is None:
        return
    try:
        gate.load_spec()
    except SloSpecError as e:
        _usage_error(gate, str(e))
    if environment.web_ui is not None:
        web_ui.install(environment.web_ui, gate.snapshot)
    if gate.is_master:
        runner.register_message(FLUSH_MESSAGE, lambda environment, msg, **_: _on_worker_flush(gate, msg))
        opts = environment.parsed_options
        if opts.headless and opts.run_time:
            # Locust's own --run-time on a master quits 0.5 s after telling the workers, before their
            # last samples arrive (and loses them outright with --stop-timeout). End it ourselves:
            # stop, which waits for every worker to stop and so for its final flush, then quit.
            gate.run_time_s, opts.run_time = opts.run_time, None
    else:
        environment.events.request.add_listener(gate.listener.on_request)


def _usage_error(gate: Gate, message: str) -> None:
    """A bad SLO file: one line on stderr, an error report, exit 2 before any load is sent."""
    sys.stderr.write(f"slogate: error: {message}\n")
    report_dir = getattr(gate.options, "slo_report_dir", None)
    if report_dir:
        report = build_report(
            None,
            MetricsStore(),
            run={"target": public_url(gate.environment.host)},
            error=message,
            exit_code=exitcodes.USAGE,
        )
        write_reports(report, report_dir)
    sys.exit(exitcodes.USAGE)


@events.test_start.add_listener
def _on_test_start(environment: Any, **_: Any) -> None:
    gate = gate_for(environment)
    if environment.parsed_options is not None and not gate.is_worker:
        try:  # the web UI form may have changed --slo-file since init
            gate.load_spec()
        except SloSpecError as e:
            abort_run(environment, f"bad SLO file: {e}")
    gate.started_at = time.time()
    gate.problems = [p for p in gate.problems if p.startswith("bad SLO file")]
    gate.merged = MetricsStore()
    gate.workers_reporting.clear()
    gate.workers_flushed.clear()
    gate.workers_started = set(environment.runner.clients) if gate.is_master else set()
    if gate.run_time_s:
        log.info("slogate: the run ends after %s s, once every worker has sent its last samples", gate.run_time_s)
        gevent.spawn_later(gate.run_time_s, _end_gracefully, environment.runner)
        gate.run_time_s = None  # once
    gate.judged = False
    gate.listener.start(gate.warmup_s)
    if not gate.is_master:
        gate.loop_monitor.start()
    if not gate.is_worker and environment.parsed_options is not None:
        gate.start_scraper()


@events.reset_stats.add_listener
def _on_reset_stats(**_: Any) -> None:
    for gate in _gates.values():
        gate.merged = MetricsStore()
        gate.listener.start(gate.warmup_s)


@events.report_to_master.add_listener
def _on_report_to_master(client_id: str, data: dict[str, Any], **_: Any) -> None:
    for gate in _gates.values():
        if gate.is_worker:
            data[WIRE_KEY] = gate.worker_payload()


@events.test_stop.add_listener
def _on_test_stop(environment: Any, **_: Any) -> None:
    gate = gate_for(environment)
    gate.stop_scraper()
    gate.loop_monitor.stop()
    if gate.is_worker and environment.runner is not None:
        # Ship what is left now: the message reaches the master before this worker's
        # `client_stopped`, so the master's figures are complete when its own test_stop fires.
        environment.runner.send_message(FLUSH_MESSAGE, gate.worker_payload())


@events.worker_report.add_listener
def _on_worker_report(client_id: str, data: dict[str, Any], **_: Any) -> None:
    for gate in _gates.values():
        if gate.is_master and WIRE_KEY in data:
            _merge_from_worker(gate, client_id, data[WIRE_KEY])


def _end_gracefully(runner: Any) -> None:
    runner.stop()
    runner.quit()


def _on_worker_flush(gate: Gate, msg: Any) -> None:
    _merge_from_worker(gate, msg.node_id, msg.data)
    gate.workers_flushed.add(msg.node_id)


def _merge_from_worker(gate: Gate, client_id: str, payload: dict[str, Any]) -> None:
    gate.merged.merge(MetricsStore.from_wire(payload["metrics"]))
    gate.workers_reporting.add(client_id)
    if payload.get("model") and not gate.model:
        gate.model, gate.workload = payload["model"], payload.get("workload") or {}


@events.quitting.add_listener
def _on_quitting(environment: Any, **_: Any) -> None:
    gate = gate_for(environment)
    if gate.is_worker or gate.judged or environment.parsed_options is None:
        return
    gate.judged = True
    report_dir = Path(environment.parsed_options.slo_report_dir)
    try:
        report = gate.judge()
    except BaselineError as e:
        sys.stderr.write(f"slogate: error: {e}\n")
        report = build_report(None, gate.metrics(), run=gate.run_info(), error=str(e), exit_code=exitcodes.USAGE)
    gate.alert(report)
    paths = write_reports(report, report_dir)
    sys.stdout.write("\n" + paths["markdown"].read_text())
    sys.stdout.write(f"slogate: reports in {report_dir}/\n")
    sys.stdout.flush()
    if report.get("exit_code") is not None:
        environment.process_exit_code = report["exit_code"]
    elif gate.problems:
        environment.process_exit_code = exitcodes.INCONCLUSIVE
