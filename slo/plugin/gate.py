"""The gate's per-process state (one `Gate` per Locust environment, `gate_for`): the SLO file,
baseline and alert settings read from the options, what was measured so far, the run's facts for
the report, and the report as of now (`snapshot`)."""

from __future__ import annotations

import json
import sys
import time
from typing import Any

import gevent
from locust.runners import MasterRunner, WorkerRunner
from slogate.slo.gate.baseline import BaselineError, load_baseline
from slogate.slo.gate.early_stop import REGRESSIONS, unknown_names, waits_for
from slogate.slo.gate.facts import ABORTED, BY_HAND, INTERRUPTED, RUN_TIME, Breach, RunStop, WorkloadFacts, utc_iso
from slogate.slo.gate.judge import judge
from slogate.slo.gate.metrics import MetricsStore
from slogate.slo.gate.regression import Baseline
from slogate.slo.gate.report import Report, RunInfo, public_command, public_url
from slogate.slo.gate.server_figures import ServerFigures
from slogate.slo.gate.spec import SloSpec, SloSpecError, goodput_targets, load_spec, with_overrides
from slogate.slo.outputs.charts import live_chart_data
from slogate.slo.outputs.publish import AlertSettings
from slogate.slo.outputs.slack import NotifyPolicyError
from slogate.slo.outputs.vllm_export import ExportError
from slogate.slo.plugin import settings, target
from slogate.slo.plugin.listener import RecordListener
from slogate.slo.plugin.loop_lag import LoopLagMonitor
from slogate.slo.plugin.scraper import Scraper
from slogate.slo.plugin.settings import Settings

CONFIG_ERRORS = (SloSpecError, BaselineError, NotifyPolicyError, ExportError)
# The master's goodput targets travel to the workers in Locust's spawn message (which carries every
# custom option), so workers count good requests without reading the SLO file themselves.
GOODPUT_OPTION = "slogate_goodput_targets"
RUN_TIME_SLACK_S = 3.0  # a run this close to its --run-time ran it whole (Locust starts its timer before test_start)


class Gate:
    """Per-process state of the gate; one per Locust environment."""

    def __init__(self, environment: Any) -> None:
        self.environment = environment
        self.listener = RecordListener()
        self.merged = MetricsStore()  # master only: what the workers sent
        self.settings: Settings | None = None  # the options, typed: built by `configure` (init, each test_start)
        self.spec: SloSpec | None = None
        self.baseline: Baseline | None = None
        self.alerts = AlertSettings()
        self.exports: list[tuple[str, str]] = []
        self.problems: list[str] = []
        self.workload = WorkloadFacts()
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
        # --slo-stop-when-decided: what keeps the run to its run time, and the stop.
        self.waiting_for: list[str] = []
        self.stopped: RunStop | None = None
        self.planned_s: float | None = None  # --run-time, when the run has one
        self.ended_at: float | None = None  # when the load stopped (test_stop)
        self.signal: str | None = None  # the signal that interrupted the run (plugin/control.py)
        self.stopped_by_hand = False  # the web UI's Stop ended the run
        self.loop_monitor = LoopLagMonitor(lambda: self.listener.store)
        self.server: ServerFigures | None = None
        # The journal (slo/plugin/journal.py): its file, its greenlet, and what it has not written yet.
        self.journal: Any = None
        self.journal_greenlet: Any = None
        self.pending = MetricsStore()
        self.last_words = ""  # the verdict's headline and the reports' place, printed at Locust's very end
        # The most users asked for or running at once in this run: the report's `users` (read at the
        # end, Locust's own count is 0 once they have stopped). Each spawn's end tells it too, so
        # that a stage of a load shape shorter than the journal's period counts.
        self.peak_users = 0
        events = getattr(environment, "events", None)
        if events is not None:
            events.spawning_complete.add_listener(self.note_users)

    @property
    def is_master(self) -> bool:
        return isinstance(self.environment.runner, MasterRunner)

    @property
    def is_worker(self) -> bool:
        return isinstance(self.environment.runner, WorkerRunner)

    def configure(self, with_baseline: bool) -> None:
        """Read the options (`Settings`), the SLO file, the baseline and the alert policy; raises
        SloSpecError, BaselineError, NotifyPolicyError or ExportError (usage errors) before any load."""
        self.settings = Settings.from_parsed(settings.parsed(self.environment))
        options = self.settings.gate
        spec = load_spec(options.slo_file) if options.slo_file else None
        self.spec = spec and with_overrides(spec, min_samples=options.min_samples, warmup_s=options.warmup_s)
        baseline_path = options.baseline if with_baseline else None
        self.baseline = load_baseline(baseline_path) if baseline_path else None
        self.alerts = self.settings.alerts
        self.exports = list(self.settings.reports.exports)
        self.configure_early_stop(with_baseline)

    def configure_early_stop(self, with_baseline: bool) -> None:
        """What `--slo-stop-when-decided` waits for; SloSpecError for a `--slo-not-blocking` name
        that is no objective of the SLO file."""
        early = self.early_stop
        if not early.stop_when_decided or self.spec is None:
            return
        unknown = unknown_names(self.spec, early.not_blocking)
        if unknown:
            names = ", ".join(o.name for o in self.spec.objectives)
            raise SloSpecError(
                f"--slo-not-blocking: {unknown[0]!r} is not an objective of {self.spec.source} "
                f"(objectives: {names}; or {REGRESSIONS!r} for the baseline's rules)"
            )
        self.waiting_for = waits_for(self.spec, early.not_blocking, with_baseline and self.baseline is not None)

    def reread_options(self) -> None:
        """A worker's options as its master sent them with this run's spawn message (already checked there)."""
        self.settings = Settings.from_parsed(settings.parsed(self.environment))

    @property
    def slo_options(self) -> settings.GateOptions:
        return self.settings.gate if self.settings is not None else settings.GateOptions()

    @property
    def early_stop(self) -> settings.EarlyStopOptions:
        return self.settings.early_stop if self.settings is not None else settings.EarlyStopOptions()

    @property
    def reports(self) -> settings.ReportOptions:
        return self.settings.reports if self.settings is not None else settings.ReportOptions()

    @property
    def run_options(self) -> settings.RunOptions:
        return self.settings.run if self.settings is not None else settings.RunOptions()

    def run_stop(self, ended: float, final: bool) -> RunStop | None:
        """Why the run ended, as far as known: decided early, aborted on a breach, interrupted by a
        signal, or (at the end) its whole --run-time run, or stopped by hand in the web UI."""
        if self.breach is not None:  # a fail, whatever was decided while the run was ending
            return RunStop(ABORTED, round(self.breach.after_s, 3), self.planned_s)
        if self.stopped is not None:
            return self.stopped
        ended = self.ended_at or ended
        if self.signal is not None and self.started_at is not None:
            return RunStop(INTERRUPTED, round(ended - self.started_at, 3), self.planned_s, signal=self.signal)
        ran = None if self.started_at is None else ended - self.started_at
        if final and self.planned_s and ran is not None and ran >= self.planned_s - RUN_TIME_SLACK_S:
            return RunStop(RUN_TIME, round(ran, 3), self.planned_s)
        if final and ran is not None and self.stopped_by_hand:
            return RunStop(BY_HAND, round(ran, 3), self.planned_s)
        return None

    def note_stop_by_hand(self) -> None:
        """The web UI's Stop was asked for (slo/plugin/web_ui.py): the run ends as the user decided."""
        if self.started_at is not None and self.stopped is None and self.breach is None:
            self.stopped_by_hand = True
            self.ended_at = self.ended_at or time.time()

    @property
    def interval_s(self) -> float:
        return self.reports.interval_s

    def goodput_targets(self) -> dict[str, dict[str, float]] | None:
        """From the SLO file; a worker takes the master's (sent with the spawn message)."""
        if not self.is_worker:
            return goodput_targets(self.spec)
        shipped = settings.carried(self.environment, GOODPUT_OPTION)
        return json.loads(shipped) if shipped else goodput_targets(self.spec)

    def note_users(self, user_count: int = 0, **_: Any) -> None:
        """Locust's `spawning_complete` (a master's: the users of every worker)."""
        self.peak_users = max(self.peak_users, user_count)

    def users(self) -> int | None:
        """The most users of this run so far: the spawn target (Locust's `target_user_count`, which
        outlives the stop) or the users running, whichever was higher at any look."""
        runner = self.environment.runner
        if runner is None:
            return self.peak_users or None
        now = max(getattr(runner, "user_count", 0) or 0, getattr(runner, "target_user_count", 0) or 0)
        self.peak_users = max(self.peak_users, now)
        return self.peak_users

    def start_listening(self) -> None:
        self.peak_users = 0
        targets = self.goodput_targets()
        if not self.is_worker:
            settings.carry(self.environment, GOODPUT_OPTION, json.dumps(targets) if targets else "")
        self.listener.start(self.warmup_s, self.interval_s, targets)

    def live_chart(self) -> dict[str, Any]:
        """The web UI's TTFT-over-time chart: the time series so far and the SLO targets."""
        return live_chart_data(self.metrics(), self.spec, self.started_at)

    @property
    def warmup_s(self) -> float:
        if self.spec is not None:
            return self.spec.warmup_s
        override = self.slo_options.warmup_s
        return 0.0 if override is None else override

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
            users=self.users(),
            slo_file=self.spec.source if self.spec else None,
            processes=max(1, len(workers)) if self.is_master else 1,
            cpu_warning=bool(
                getattr(runner, "cpu_warning_emitted", False) or getattr(runner, "worker_cpu_warning_emitted", False)
            ),
            max_client_lag_ms=self.slo_options.max_client_lag_ms,
            problems=problems,
            command=public_command(["locust", *sys.argv[1:]]),
            aborted=self.breach,
            stopped=self.run_stop(ended, final),
        )

    def snapshot(self, final: bool = False) -> Report:
        """The report as of now, without side effects (the web UI polls this while the run goes on);
        `final` adds the baseline comparison and the lost-worker check."""
        server = self.scraper.metrics.summary() if self.scraper is not None else self.server
        return judge(self.spec, self.metrics(), self.run_info(final), server, self.baseline if final else None)

    def start_scraper(self) -> None:
        interval = self.reports.server_metrics_interval_s
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


def every_gate() -> list[Gate]:
    """The gates of this process (one per Locust environment; tests make several)."""
    return list(_gates.values())
