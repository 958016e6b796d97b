"""Locust integration: SLO options, the listener, and the verdict when the run ends.

Importing this module (a locustfile does `import slogate.slo.locust_plugin`) registers:
- `--slo-file`, `--slo-report-dir`, `--slo-warmup-s`, `--slo-min-samples`, `--slo-interval-s`
  (command line, `locust.conf` and the web UI form) and `--export FORMAT FILE`;
- the request listener on every load-generating process;
- distributed plumbing: workers ship their histograms in `report_to_master` and flush the rest
  at `test_stop`; the master merges and is the only process that judges and writes reports;
- with `--slo-abort-on-fail`, a watcher that stops the run once an objective fails beyond noise
  over the last `--slo-window-s` (slo/window.py): a fail, exit 1, the report saying when and why;
- the verdict in `quitting` (module level, so after Locust's own handlers and its final worker
  reports), which sets the process exit code: 0 pass, 1 fail, 2 usage, 3 inconclusive;
- credentials in the host URL (`http://user:pass@host`) taken out of it at `init`, at each
  `test_start` and from the web UI form, before any page, log line or report can show them; they
  become an Authorization header (slo/target.py).
"""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import Any

import gevent
from locust import events
from locust.rpc import Message
from locust.runners import MasterRunner, WorkerRunner
from slogate.slo import exitcodes, target, web_ui
from slogate.slo.baseline import BaselineError, load_baseline
from slogate.slo.html_report import live_chart_data
from slogate.slo.intervals import DEFAULT_INTERVAL_S
from slogate.slo.judge import judge, usage_error
from slogate.slo.listener import LOCUST_RATE_KEEP_S, RecordListener, trim_rate_counts
from slogate.slo.loop_lag import LoopLagMonitor
from slogate.slo.metrics import ClassMetrics, MetricsStore
from slogate.slo.publish import AlertSettings, publish
from slogate.slo.record import ALL, ErrorKind
from slogate.slo.regression import Baseline
from slogate.slo.render import write_reports
from slogate.slo.report import Report, RunInfo, public_command, public_url, utc_iso
from slogate.slo.self_check import MAX_LOOP_LAG_P99_MS, assess
from slogate.slo.server_metrics import Scraper
from slogate.slo.slack import DEFAULT_BUDGET_S, DEFAULT_NOTIFY, NOTIFY_CHOICES, NotifyPolicyError, parse_notify
from slogate.slo.spec import SloSpec, SloSpecError, goodput_targets, load_spec, with_overrides
from slogate.slo.vllm_export import EXPORT_FORMATS, ExportError, parse_exports
from slogate.slo.window import DEFAULT_WINDOW_S, Breach, first_breach, objectives_on_tags, unwindowed_note

log = logging.getLogger("slogate")
CONFIG_ERRORS = (SloSpecError, BaselineError, NotifyPolicyError, ExportError)
BAD_CONFIG = "bad configuration"
WIRE_KEY = "slogate"
FLUSH_MESSAGE = "slogate_flush"
BREACH_CHECK_S = 2.0  # how often --slo-abort-on-fail judges the window
# The master's goodput targets travel to the workers in Locust's spawn message (which carries every
# custom option), so workers count good requests without reading the SLO file themselves.
GOODPUT_OPTION = "slogate_goodput_targets"


class Gate:
    """Per-process state of the gate; one per Locust environment."""

    def __init__(self, environment: Any) -> None:
        self.environment = environment
        self.listener = RecordListener()
        self.merged = MetricsStore()  # master only: what the workers sent
        self.spec: SloSpec | None = None
        self.baseline: Baseline | None = None
        self.alerts = AlertSettings()
        self.exports: list[tuple[str, str]] = []
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
        # The run's own greenlets, killed at its stop: the one that stops a run whose target never
        # answers, the one that trims Locust's per-second counts, --slo-abort-on-fail's window judge.
        self.watchers: list[Any] = []
        self.breach: Breach | None = None
        self.loop_monitor = LoopLagMonitor(lambda: self.listener.store)
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
        return {
            "metrics": self.listener.take().to_wire(),
            "model": self.model,
            "workload": self.workload,
            "problems": self.problems,
        }

    def configure(self, with_baseline: bool) -> None:
        """Read the SLO file, the baseline and the alert policy from the options; raises
        SloSpecError, BaselineError or NotifyPolicyError (usage errors) before any load."""
        opts = self.options
        path = getattr(opts, "slo_file", None)
        spec = load_spec(path) if path else None
        self.spec = spec and with_overrides(
            spec, min_samples=getattr(opts, "slo_min_samples", 0), warmup_s=getattr(opts, "slo_warmup_s", -1)
        )
        baseline_path = getattr(opts, "slo_baseline", "") if with_baseline else ""
        self.baseline = load_baseline(baseline_path) if baseline_path else None
        self.alerts = AlertSettings(
            getattr(opts, "slack_channel", "") or None,
            parse_notify(getattr(opts, "slack_notify", DEFAULT_NOTIFY)),
            getattr(opts, "slack_timeout_s", DEFAULT_BUDGET_S),
        )
        self.exports = parse_exports(getattr(opts, "export", None))
        if getattr(opts, "slo_abort_on_fail", False):
            window_s = getattr(opts, "slo_window_s", None)
            if not isinstance(window_s, int | float) or window_s <= 0:
                raise SloSpecError(f"--slo-window-s: must be > 0, got {window_s!r}")
            if self.interval_s <= 0:
                raise SloSpecError("--slo-abort-on-fail judges the time series: --slo-interval-s must be > 0")
            if spec is None:
                raise SloSpecError("--slo-abort-on-fail judges the SLO file's objectives: give --slo-file")

    @property
    def interval_s(self) -> float:
        value = getattr(self.options, "slo_interval_s", DEFAULT_INTERVAL_S)
        return max(0.0, float(DEFAULT_INTERVAL_S if value is None else value))

    def goodput_targets(self) -> dict[str, dict[str, float]] | None:
        """From the SLO file; a worker takes the master's (sent with the spawn message)."""
        if not self.is_worker:
            return goodput_targets(self.spec)
        shipped = getattr(self.options, GOODPUT_OPTION, None)
        return json.loads(shipped) if shipped else goodput_targets(self.spec)

    def start_listening(self) -> None:
        targets = self.goodput_targets()
        if not self.is_worker and self.options is not None:
            setattr(self.options, GOODPUT_OPTION, json.dumps(targets) if targets else "")
        self.listener.start(self.warmup_s, self.interval_s, targets)

    def live_chart(self) -> dict[str, Any]:
        """The web UI's TTFT-over-time chart: the time series so far and the SLO targets."""
        return live_chart_data(self.metrics(), self.spec, self.started_at)

    @property
    def warmup_s(self) -> float:
        if self.spec is not None:
            return self.spec.warmup_s
        override = getattr(self.options, "slo_warmup_s", -1)
        return override if override is not None and override >= 0 else 0.0

    def metrics(self) -> MetricsStore:
        """Everything measured so far: merged worker data on a master, the local store otherwise."""
        if self.is_master:
            return self.merged
        return self.listener.store

    def run_info(self, final: bool = False) -> RunInfo:
        ended = time.time()
        runner = self.environment.runner
        workers = self.workers_started | self.workers_reporting
        problems = list(self.problems)
        lost = sorted(workers - self.workers_flushed) if final and self.is_master else []
        if lost:
            problems.append(
                f"{len(lost)} of {len(workers)} workers stopped reporting before the end "
                "(killed or disconnected): their samples since their last report (up to 3 s) are missing"
            )
        return RunInfo(
            source="locust",
            target=public_url(self.environment.host),
            model=self.model,
            workload=self.workload,
            started_at=utc_iso(self.started_at),
            ended_at=utc_iso(ended),
            duration_s=None if self.started_at is None else round(ended - self.started_at, 3),
            warmup_s=self.warmup_s,
            mode="master" if self.is_master else "local",
            workers=len(workers) if self.is_master else 1,
            workers_complete=len(self.workers_flushed) if self.is_master else 1,
            users=getattr(runner, "user_count", None),
            slo_file=self.spec.source if self.spec else None,
            processes=max(1, len(workers)) if self.is_master else 1,
            cpu_warning=bool(
                getattr(runner, "cpu_warning_emitted", False) or getattr(runner, "worker_cpu_warning_emitted", False)
            ),
            max_client_lag_ms=getattr(self.options, "max_client_lag_ms", MAX_LOOP_LAG_P99_MS),
            problems=problems,
            command=public_command(["locust", *sys.argv[1:]]),
            aborted=self.breach.to_json() if self.breach is not None else None,
        )

    def snapshot(self, final: bool = False) -> Report:
        """The report as of now, without side effects (the web UI polls this while the run goes on);
        `final` adds the baseline comparison and the lost-worker check."""
        server = self.scraper.metrics.summary() if self.scraper is not None else self.server
        return judge(self.spec, self.metrics(), self.run_info(final), server, self.baseline if final else None)

    def start_scraper(self) -> None:
        interval = getattr(self.options, "server_metrics_interval", 0) or 0
        self.server = None
        if interval > 0 and self.environment.host:
            url, headers = target.resolve(self.environment)
            self.scraper = Scraper(url, interval, headers)
            self.scraper.start()

    def restart_server_counters(self) -> None:
        """The server's counters start once the workload is primed and the warm-up is over, so
        that its TTFT and hit rate cover what the client judges (not the priming prefills)."""
        if self.scraper is None or self.started_at is None:
            return
        delay = max(0.0, self.started_at + self.warmup_s - time.time())
        gevent.spawn_later(delay, self.scraper.restart)

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
    _stop(gate)


def _stop(gate: Gate) -> None:
    runner = gate.environment.runner
    if runner is not None and not gate.is_worker:
        # In a greenlet of its own: called from a user's greenlet, which quit() kills, it would
        # otherwise die half-way and leave the run going until --run-time.
        gevent.spawn(runner.quit)


def end_run(environment: Any) -> None:
    """End the run before its --run-time: a master stops its workers, so that their last samples
    arrive, then quits; a single process quits. A worker ends nothing (its master does)."""
    gate = gate_for(environment)
    if gate.is_master:
        gevent.spawn(_end_gracefully, environment.runner)
    else:
        _stop(gate)


def _watch_breaches(gate: Gate, window_s: float) -> None:
    """--slo-abort-on-fail: stop the run (a fail) at the first objective that breaches beyond noise
    over the last `window_s` seconds. Objectives on a name the run turns out to measure as a tag
    (a trace's `class`) are named once, as those on conversation tags were at the start."""
    noted = {o.name for o in objectives_on_tags(gate.spec)} if gate.spec is not None else set()
    while gate.spec is not None and gate.started_at is not None:
        gevent.sleep(BREACH_CHECK_S)
        metrics, run = gate.metrics(), gate.run_info()
        late = [
            o
            for o in objectives_on_tags(gate.spec, metrics.tags.keys() - metrics.classes.keys())
            if o.name not in noted
        ]
        if late:
            log.warning("slogate: %s", unwindowed_note(late))
            noted.update(o.name for o in late)
        saturation = assess(metrics, run.cpu_warning, run.processes, run.max_client_lag_ms)
        delay = saturation.client_delay_ms if saturation else 0.0
        breach = first_breach(gate.spec, metrics.intervals, time.time(), gate.started_at, window_s, delay)
        if breach is not None:
            gate.breach = breach
            log.error("slogate: %s", breach.message)
            end_run(gate.environment)
            return


def unreachable_reason(total: ClassMetrics, waited_s: float, limit_s: float) -> str | None:
    """Why to stop a run whose target never answered: no request succeeded in `limit_s` and some
    were refused or timed out (a slow server that answers at all is measured, not stopped)."""
    if limit_s <= 0 or waited_s < limit_s or total.successes:
        return None
    refused = total.errors_by_kind.get(ErrorKind.CONNECT, 0) + total.errors_by_kind.get(ErrorKind.TIMEOUT, 0)
    if not refused:
        return None
    return (
        f"target unreachable: no request succeeded in {waited_s:.0f} s, {refused} refused or timed out "
        f"(--slo-unreachable-s {limit_s:g})"
    )


def _trim_locust_rate_counts(environment: Any) -> None:
    """Every minute, Locust's per-second counts trimmed to the last minute (`trim_rate_counts`)."""
    while True:
        gevent.sleep(LOCUST_RATE_KEEP_S)
        trim_rate_counts(environment.stats, time.time() - LOCUST_RATE_KEEP_S)


def _watch_reachability(gate: Gate, limit_s: float) -> None:
    """Stop a run early when the target does not answer (instead of waiting out --run-time)."""
    started = time.monotonic()
    while True:
        gevent.sleep(1.0)
        waited = time.monotonic() - started - gate.warmup_s  # warm-up requests are not in the store
        reason = unreachable_reason(gate.metrics().get(ALL), waited, limit_s)
        if reason:
            abort_run(gate.environment, reason)
            return


def note_workload(environment: Any, model: str, workload: dict[str, Any]) -> None:
    """Record what the load looked like, for the report (and for baselines to compare like with
    like). A user calls it once its workload is ready (shared prefixes primed)."""
    gate = gate_for(environment)
    first = gate.model is None
    gate.model, gate.workload = model, workload
    if first:
        gate.restart_server_counters()


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
        "--slo-unreachable-s",
        type=float,
        default=15.0,
        help="Stop (inconclusive) when no request has succeeded and some were refused or timed out "
        "for this long (0: never)",
    )
    parser.add_argument(
        "--slack-timeout-s",
        type=float,
        default=DEFAULT_BUDGET_S,
        help="Seconds the Slack alert may take, retries included; then one warning and the verdict stands",
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
        "--slo-interval-s",
        type=float,
        default=DEFAULT_INTERVAL_S,
        help="Seconds per interval of the time series (slo-intervals.hlog and the charts; 0: none)",
    )
    parser.add_argument(
        "--export",
        nargs=2,
        metavar=("FORMAT", "FILE"),
        default=None,
        include_in_web_ui=False,
        help=f"Also write the figures in another tool's format: {', '.join(EXPORT_FORMATS)} "
        "(`vllm bench serve` result keys)",
    )
    parser.add_argument(
        "--slo-min-samples",
        type=int,
        default=0,
        help="Samples needed per SLO (default: min_samples of the SLO file)",
    )
    parser.add_argument(
        "--slo-abort-on-fail",
        action="store_true",
        default=False,
        help="Stop the run (fail, exit 1) once a latency SLO fails beyond noise over the last --slo-window-s",
    )
    parser.add_argument(
        "--slo-window-s",
        type=float,
        default=DEFAULT_WINDOW_S,
        help="Seconds of the sliding window --slo-abort-on-fail judges",
    )


@events.init.add_listener
def _on_init(environment: Any, runner: Any = None, **_: Any) -> None:
    target.strip_environment(environment)  # first: before the web UI renders the host or a log names it
    gate = gate_for(environment)
    if environment.parsed_options is None:
        return
    try:
        gate.configure(with_baseline=not gate.is_worker)
    except CONFIG_ERRORS as e:
        _usage_error(gate, str(e))
    if environment.web_ui is not None:
        web_ui.install(
            environment.web_ui,
            gate.snapshot,
            lambda host: target.remember(environment, host) or "",
            series=gate.live_chart,
        )
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


def usage_exit(environment: Any, message: str) -> None:
    """For the locustfiles' own option checks: the same one line, error report and exit 2 as a bad
    SLO file, before any load is sent."""
    _usage_error(gate_for(environment), message)


def _usage_error(gate: Gate, message: str) -> None:
    """A bad SLO file, baseline or option: one line on stderr, an error report, exit 2 before any
    load is sent."""
    sys.stderr.write(f"slogate: error: {message}\n")
    report_dir = getattr(gate.options, "slo_report_dir", None)
    if report_dir and not gate.is_worker:
        write_reports(usage_error(message, RunInfo(target=public_url(gate.environment.host))), report_dir)
    sys.exit(exitcodes.USAGE)


@events.test_start.add_listener
def _on_test_start(environment: Any, **_: Any) -> None:
    target.strip_environment(environment)  # the host may have changed since init (web UI, API)
    gate = gate_for(environment)
    if environment.parsed_options is not None and not gate.is_worker:
        try:  # the web UI form may have changed the options since init
            gate.configure(with_baseline=True)
        except CONFIG_ERRORS as e:
            abort_run(environment, f"{BAD_CONFIG}: {e}")
    gate.started_at = time.time()
    gate.model = None  # set again by the users (or workers) once their workload is primed
    gate.problems = [p for p in gate.problems if p.startswith(BAD_CONFIG)]
    gate.merged = MetricsStore()
    gate.workers_reporting.clear()
    gate.workers_flushed.clear()
    gate.workers_started = set(environment.runner.clients) if gate.is_master else set()
    if gate.run_time_s:
        log.info("slogate: the run ends after %s s, once every worker has sent its last samples", gate.run_time_s)
        gevent.spawn_later(gate.run_time_s, _end_gracefully, environment.runner)
        gate.run_time_s = None  # once
    gate.judged = False
    gate.breach = None
    gate.start_listening()
    if not gate.is_master:
        gate.loop_monitor.start()
    if not gate.is_worker and environment.parsed_options is not None:
        gate.start_scraper()
        gate.watchers += [
            gevent.spawn(_watch_reachability, gate, environment.parsed_options.slo_unreachable_s),
            gevent.spawn(_trim_locust_rate_counts, environment),
        ]
        if environment.parsed_options.slo_abort_on_fail and gate.spec is not None:
            gate.watchers.append(gevent.spawn(_watch_breaches, gate, environment.parsed_options.slo_window_s))
            note = unwindowed_note(objectives_on_tags(gate.spec))
            if note:
                log.warning("slogate: %s", note)


@events.reset_stats.add_listener
def _on_reset_stats(**_: Any) -> None:
    for gate in _gates.values():
        gate.merged = MetricsStore()
        gate.start_listening()


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
    for watcher in gate.watchers:
        watcher.kill(block=False)
    gate.watchers.clear()
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
    # stop() drops workers that do not stop within --stop-timeout from the master's list, so
    # quit() would never tell them: they would linger (60 s) after the run. Tell every worker.
    workers = [client.id for client in runner.clients.all]
    runner.stop()
    for worker in workers:
        runner.server.send_to_client(Message("quit", None, worker))
    runner.quit()


def _on_worker_flush(gate: Gate, msg: Any) -> None:
    _merge_from_worker(gate, msg.node_id, msg.data)
    gate.workers_flushed.add(msg.node_id)


def _merge_from_worker(gate: Gate, client_id: str, payload: dict[str, Any]) -> None:
    gate.merged.merge(MetricsStore.from_wire(payload["metrics"]))
    gate.workers_reporting.add(client_id)
    if payload.get("model"):
        first = not gate.model
        # The latest workload a worker noted: a user may note it again with more facts (a trace's,
        # once its prompts are calibrated) after a report carried the first note.
        gate.model, gate.workload = payload["model"], payload.get("workload") or gate.workload
        if first:
            gate.restart_server_counters()  # this worker has primed its prefixes
    for problem in payload.get("problems") or []:
        abort_run(gate.environment, problem)  # a worker that could not reach the target ends the run


@events.quitting.add_listener
def _on_quitting(environment: Any, **_: Any) -> None:
    gate = gate_for(environment)
    if gate.is_worker or gate.judged or environment.parsed_options is None:
        return
    gate.judged = True
    gate.stop_scraper()
    report = gate.snapshot(final=True)
    publish(report, environment.parsed_options.slo_report_dir, gate.alerts, gate.exports)
    environment.process_exit_code = report.exit_code
