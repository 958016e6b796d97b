"""The state of one run (`Run`): a new one at each `test_start` (slo/plugin/gate.py `Gate.start_run`),
the previous one dropped with it, so that a web-UI rerun starts clean. It holds what the run measured
(the listener's store on a process that generates load, the workers' samples merged on a master, its
journal), the workers seen, its workload, its problems, why and when it stopped, its greenlets and
the server's figures. Other modules change it through its methods only; the configuration the run
goes by (options, SLO file, baseline) stays in the `Gate`."""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

import gevent
from slogate.slo.gate.facts import ABORTED, BY_HAND, INTERRUPTED, RUN_TIME, Breach, RunStop, WorkloadFacts
from slogate.slo.gate.metrics import MetricsStore
from slogate.slo.gate.server_figures import ServerFigures
from slogate.slo.plugin.journal import Journal
from slogate.slo.plugin.listener import RecordListener
from slogate.slo.plugin.loop_lag import LoopLagMonitor
from slogate.slo.plugin.scraper import Scraper

RUN_TIME_SLACK_S = 3.0  # a run this close to its --run-time ran it whole (Locust starts its timer before test_start)


class Run:
    """One run: started at `started_at` (None: the gate's state before its first run), planned for
    `planned_s` (--run-time, when it has one), with `workers` connected at its start (a master's)."""

    def __init__(
        self, started_at: float | None = None, planned_s: float | None = None, workers: Iterable[str] = ()
    ) -> None:
        self.started_at = started_at
        self.planned_s = planned_s
        self.ended_at: float | None = None  # when the load stopped (test_stop, a signal, the web UI's Stop)
        self.listener = RecordListener()  # a process that generates load: its records
        self.merged = MetricsStore()  # a master: what its workers sent
        self.journal = Journal()  # slo/plugin/journal.py
        self.loop_monitor = LoopLagMonitor(lambda: self.listener.store)
        self.model: str | None = None  # set by the users (or workers) once their workload is primed
        self.workload = WorkloadFacts()
        self.problems: list[str] = []
        self.workers_started = set(workers)
        self.workers_reporting: set[str] = set()
        self.workers_flushed: set[str] = set()  # workers whose final samples arrived
        self.shipped_last_samples = False  # its test_stop ran (a worker: its final samples went to the master)
        # The most users asked for or running at once: the report's `users` (read at the end,
        # Locust's own count is 0 once they have stopped). Each spawn's end tells it too, so that a
        # stage of a load shape shorter than the journal's period counts.
        self.peak_users = 0
        # The run's own greenlets, killed at its stop (slo/plugin/watchers.py).
        self.watchers: list[Any] = []
        self.breach: Breach | None = None  # --slo-abort-on-fail's
        self.stopped: RunStop | None = None  # --slo-stop-when-decided's
        self.signal: str | None = None  # the signal that interrupted the run (slo/plugin/signals.py)
        self.stopped_by_hand = False  # the web UI's Stop ended the run
        self.judged = False
        self.scraper: Scraper | None = None
        self.server: ServerFigures | None = None  # the scraper's figures, once it has stopped
        self.last_words = ""  # the verdict's headline and the reports' place, printed at Locust's very end

    # ---------------------------------------------------------------- measurements

    def measure_anew(
        self, warmup_s: float, interval_s: float, goodput_targets: dict[str, dict[str, float]] | None
    ) -> None:
        """Start measuring from nothing: at the run's start, and again at a stats reset."""
        self.peak_users = 0
        self.merged = MetricsStore()
        self.listener.start(warmup_s, interval_s, goodput_targets)

    def metrics(self, master: bool) -> MetricsStore:
        """Everything measured so far: merged worker data on a master, the local store otherwise."""
        return self.merged if master else self.listener.store

    def take_in(self, worker: str, samples: MetricsStore) -> None:
        """A master takes in a worker's samples (slo/plugin/wire.py)."""
        self.merged.merge(samples)
        self.journal.take_in(samples)
        self.workers_reporting.add(worker)

    def mark_flushed(self, worker: str) -> None:
        """`worker`'s last samples have arrived."""
        self.workers_flushed.add(worker)

    def mark_last_samples_shipped(self) -> None:
        """Its `test_stop` ran: a worker's last samples went to the master (or were sent for a master gone)."""
        self.shipped_last_samples = True

    def note_workload(self, model: str, workload: WorkloadFacts) -> bool:
        """What the load looked like; True the first time (the workload is primed)."""
        first = self.model is None
        self.model, self.workload = model, workload
        return first

    def note_users(self, users: int) -> None:
        self.peak_users = max(self.peak_users, users)

    def add_problem(self, problem: str) -> bool:
        """A reason the run's figures cannot mean anything; False if already known."""
        if problem in self.problems:
            return False
        self.problems.append(problem)
        return True

    # ---------------------------------------------------------------- its end

    def decide(self, stop: RunStop) -> None:
        """--slo-stop-when-decided: every objective decided."""
        self.stopped = stop

    def abort(self, breach: Breach) -> None:
        """--slo-abort-on-fail: an objective breached beyond noise."""
        self.breach = breach

    def end(self) -> None:
        """The load stops now (unless it already did)."""
        self.ended_at = self.ended_at or time.time()

    def interrupt(self, signal_name: str) -> None:
        """A signal interrupted the run (slo/plugin/signals.py `watch_signals`)."""
        self.signal = signal_name
        self.end()

    def stop_by_hand(self) -> None:
        """The web UI's Stop was asked for: the run ends as the user decided (unless it was ending already)."""
        if self.started_at is not None and self.stopped is None and self.breach is None:
            self.stopped_by_hand = True
            self.end()

    def mark_judged(self) -> None:
        """The run is being judged (`quitting`): a signal no longer interrupts it."""
        self.judged = True

    def leave_last_words(self, words: str) -> None:
        """What to print at Locust's very end (`take_last_words`)."""
        self.last_words = words

    def take_last_words(self) -> str:
        words, self.last_words = self.last_words, ""
        return words

    def why_stopped(self, ended: float, final: bool) -> RunStop | None:
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

    def drop(self) -> None:
        """Nothing of this run goes on: a new run replaces it (its load stopped at its test_stop already)."""
        self.stop_watchers()
        self.loop_monitor.stop()
        self.stop_scraper()
        self.journal.close()

    # ---------------------------------------------------------------- its greenlets and the server's figures

    def watch(self, *greenlets: Any) -> None:
        """Greenlets of this run, killed at its stop (`stop_watchers`)."""
        self.watchers.extend(greenlets)

    def stop_watchers(self) -> None:
        for watcher in self.watchers:
            watcher.kill(block=False)
        self.watchers.clear()

    def start_scraper(self, url: str, interval_s: float, headers: dict[str, str]) -> None:
        self.scraper = Scraper(url, interval_s, headers)
        self.scraper.start()

    def restart_server_counters(self, warmup_s: float) -> None:
        """The server's counters start once the workload is primed and the warm-up is over, so
        that its TTFT and hit rate cover what the client judges (not the priming prefills)."""
        if self.scraper is None or self.started_at is None:
            return
        delay = max(0.0, self.started_at + warmup_s - time.time())
        gevent.spawn_later(delay, self.scraper.restart)

    def stop_scraper(self) -> None:
        if self.scraper is not None:
            self.server = self.scraper.stop().summary()
            self.scraper = None

    def server_figures(self) -> ServerFigures | None:
        """The server's figures so far (while scraping) or at the load's stop."""
        return self.scraper.metrics.summary() if self.scraper is not None else self.server
