"""The gate of one Locust environment (`gate_for`): its configuration, built from the options (the
SLO file, baseline, alert and report settings), and its current run (`Run`, slo/plugin/run_state.py,
a new one at each `test_start`), with the report as of now (`snapshot`)."""

from __future__ import annotations

import json
import sys
import time
import weakref
from typing import Any

from locust.runners import MasterRunner, WorkerRunner
from slogate.slo.gate.baseline import BaselineError, load_baseline
from slogate.slo.gate.early_stop import REGRESSIONS, unknown_names, waits_for
from slogate.slo.gate.facts import utc_iso
from slogate.slo.gate.judge import judge
from slogate.slo.gate.metrics import MetricsStore
from slogate.slo.gate.regression import Baseline
from slogate.slo.gate.report import Report, RunInfo, public_command, public_url
from slogate.slo.gate.spec import SloSpec, SloSpecError, goodput_targets, load_spec, with_overrides
from slogate.slo.outputs.charts import live_chart_data
from slogate.slo.outputs.publish import AlertSettings
from slogate.slo.outputs.slack import NotifyPolicyError
from slogate.slo.outputs.vllm_export import ExportError
from slogate.slo.plugin import settings, target
from slogate.slo.plugin.run_state import Run
from slogate.slo.plugin.settings import Settings

CONFIG_ERRORS = (SloSpecError, BaselineError, NotifyPolicyError, ExportError)
# The master's goodput targets travel to the workers in Locust's spawn message (which carries every
# custom option), so workers count good requests without reading the SLO file themselves.
GOODPUT_OPTION = "slogate_goodput_targets"


class Gate:
    """The gate of one Locust environment: configuration (`configure`, at `init` and each
    `test_start`) and the current run (`run`: before the first one, a run not started)."""

    def __init__(self, environment: Any) -> None:
        self.environment = environment
        self.settings: Settings | None = None  # the options, typed: built by `configure` (init, each test_start)
        self.spec: SloSpec | None = None
        self.baseline: Baseline | None = None
        self.alerts = AlertSettings()
        self.exports: list[tuple[str, str]] = []
        self.waiting_for: list[str] = []  # --slo-stop-when-decided: what keeps the run to its run time
        self.run_time_s: float | None = None  # --run-time as given (a master takes it over and enforces it)
        self._run_time_to_enforce: float | None = None  # a headless master's --run-time: the gate ends that run
        self.run = Run()
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

    def take_over_run_time(self) -> None:
        """At `init`: --run-time as given (the report's plan), and, headless, the gate ends the run
        itself (slo/plugin/hooks.py): Locust's own timer no longer sees it. Locust's timer ends a
        master's run before the workers' last samples arrive, and it is set on gevent's loop clock
        as it stood before the start's imports and init listeners: it fired 1.3-1.5 s early, so a
        `-t 2s` run sent for 0.3-0.7 s."""
        run_time_s = self.run_options.run_time_s
        if self.is_worker or not run_time_s:
            return
        self.run_time_s = run_time_s
        if self.run_options.headless and getattr(self.environment, "shape_class", None) is None:
            # (a LoadTestShape ends the run itself: Locust lets its shape run out whatever --run-time says)
            self._run_time_to_enforce = run_time_s
            settings.take_over_run_time(self.environment)

    def run_time_to_enforce(self) -> float | None:
        """The run time a headless run (master or single process) ends after, once (its first run)."""
        run_time_s, self._run_time_to_enforce = self._run_time_to_enforce, None
        return run_time_s

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

    @property
    def interval_s(self) -> float:
        return self.reports.interval_s

    @property
    def warmup_s(self) -> float:
        if self.spec is not None:
            return self.spec.warmup_s
        override = self.slo_options.warmup_s
        return 0.0 if override is None else override

    def goodput_targets(self) -> dict[str, dict[str, float]] | None:
        """From the SLO file; a worker takes the master's (sent with the spawn message)."""
        if not self.is_worker:
            return goodput_targets(self.spec)
        shipped = settings.carried(self.environment, GOODPUT_OPTION)
        return json.loads(shipped) if shipped else goodput_targets(self.spec)

    def start_run(self) -> Run:
        """A new run, starting now (`test_start`, once configured): the previous one is dropped.
        Its plan is --run-time (a headless run's as given at the start, the gate enforcing it; elsewhere
        as the options say now, a web UI rerun's form included)."""
        self.run.drop()
        as_given = self.is_master or self.settings is None or self.run_options.headless
        planned_s = self.run_time_s if as_given else self.run_options.run_time_s
        workers = self.environment.runner.clients if self.is_master else ()
        self.run = Run(time.time(), planned_s, workers)
        self.start_listening()
        return self.run

    def start_listening(self) -> None:
        """The run's measurements start (again, at a stats reset) from nothing."""
        targets = self.goodput_targets()
        if not self.is_worker:
            settings.carry(self.environment, GOODPUT_OPTION, json.dumps(targets) if targets else "")
        self.run.measure_anew(self.warmup_s, self.interval_s, targets)

    def on_request(self, context: dict[str, Any] | None = None, **_: Any) -> None:
        """Locust's `request` event, on a process that generates load: to the current run's listener."""
        self.run.listener.on_request(context)

    def note_users(self, user_count: int = 0, **_: Any) -> None:
        """Locust's `spawning_complete` (a master's: the users of every worker)."""
        self.run.note_users(user_count)

    def users(self) -> int | None:
        """The most users of this run so far: the spawn target (Locust's `target_user_count`, which
        outlives the stop) or the users running, whichever was higher at any look."""
        runner = self.environment.runner
        if runner is None:
            return self.run.peak_users or None
        self.run.note_users(max(getattr(runner, "user_count", 0) or 0, getattr(runner, "target_user_count", 0) or 0))
        return self.run.peak_users

    def note_stop_by_hand(self) -> None:
        """The web UI's Stop was asked for (slo/plugin/web_ui.py): the run ends as the user decided."""
        self.run.stop_by_hand()

    def restart_server_counters(self) -> None:
        self.run.restart_server_counters(self.warmup_s)

    def start_scraper(self) -> None:
        """The server's /metrics, scraped while the run goes (--slo-server-metrics-interval-s)."""
        interval = self.reports.server_metrics_interval_s
        if interval > 0 and self.environment.host:
            url, headers = target.resolve(self.environment)
            self.run.start_scraper(url, interval, headers)

    def live_chart(self) -> dict[str, Any]:
        """The web UI's TTFT-over-time chart: the time series so far and the SLO targets."""
        return live_chart_data(self.metrics(), self.spec, self.run.started_at)

    def metrics(self) -> MetricsStore:
        """Everything the run measured so far: merged worker data on a master, the local store otherwise."""
        return self.run.metrics(self.is_master)

    def run_info(self, final: bool = False) -> RunInfo:
        ended = time.time()
        run = self.run
        runner = self.environment.runner
        workers = run.workers_started | run.workers_reporting
        problems = list(run.problems)
        lost = sorted(workers - run.workers_flushed) if final and self.is_master else []
        if lost:
            problems.append(
                f"{len(lost)} of {len(workers)} workers stopped reporting before the end "
                "(killed or disconnected): their samples since their last report (up to 3 s) are missing"
            )
        return RunInfo(
            source="locust",
            target=public_url(self.environment.host),
            model=run.model,
            workload=run.workload,
            started_at=utc_iso(run.started_at),
            ended_at=utc_iso(ended),
            duration_s=None if run.started_at is None else round(ended - run.started_at, 3),
            warmup_s=self.warmup_s,
            mode="master" if self.is_master else "local",
            workers=len(workers) if self.is_master else 1,
            workers_complete=len(run.workers_flushed) if self.is_master else 1,
            users=self.users(),
            slo_file=self.spec.source if self.spec else None,
            processes=max(1, len(workers)) if self.is_master else 1,
            cpu_warning=bool(
                getattr(runner, "cpu_warning_emitted", False) or getattr(runner, "worker_cpu_warning_emitted", False)
            ),
            max_client_lag_ms=self.slo_options.max_client_lag_ms,
            problems=problems,
            command=public_command(["locust", *sys.argv[1:]]),
            aborted=run.breach,
            stopped=run.why_stopped(ended, final),
        )

    def snapshot(self, final: bool = False) -> Report:
        """The report as of now, without side effects (the web UI polls this while the run goes on);
        `final` adds the baseline comparison and the lost-worker check."""
        server = self.run.server_figures()
        return judge(self.spec, self.metrics(), self.run_info(final), server, self.baseline if final else None)


# Each environment's gate: an attribute of the environment (it lives and dies with it); the set of
# them for Locust's events that name no environment (`reset_stats`, `report_to_master`, `quit`...).
GATE_ATTR = "slogate_gate"
_gates: weakref.WeakSet[Gate] = weakref.WeakSet()


def gate_for(environment: Any) -> Gate:
    gate = getattr(environment, GATE_ATTR, None)
    if gate is None:
        gate = Gate(environment)
        setattr(environment, GATE_ATTR, gate)
        _gates.add(gate)
    return gate


def every_gate() -> list[Gate]:
    """The gates of this process (one per Locust environment; tests make several)."""
    return list(_gates)
