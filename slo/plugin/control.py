"""Ending a run from inside it: stopped because its figures cannot mean anything (`abort_run`),
ended before its --run-time with every worker's last samples (`end_run`), or refused before any
load for a bad option (`usage_exit`, exit 2)."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
import tempfile
from pathlib import Path
from typing import Any

import gevent
import greenlet
from locust.rpc import Message
from locust.runners import STATE_INIT, STATE_RUNNING, STATE_SPAWNING, STATE_STOPPED
from slogate.slo.gate import exitcodes
from slogate.slo.gate.facts import WorkloadFacts
from slogate.slo.gate.journal import JOURNAL_NAME
from slogate.slo.gate.judge import usage_error
from slogate.slo.gate.report import JSON_NAME, RunInfo, public_url
from slogate.slo.outputs.render import write_reports
from slogate.slo.plugin import settings
from slogate.slo.plugin.gate import Gate, gate_for
from slogate.slo.plugin.journal import flush_journal

log = logging.getLogger("slogate")
BAD_CONFIG = "bad configuration"
INTERRUPT_EXITS = {"SIGTERM": 128 + signal.SIGTERM, "SIGINT": 128 + signal.SIGINT}  # 143, 130: as shells say


def abort_run(environment: Any, reason: str) -> None:
    """Stop the run because its figures cannot mean anything (e.g. the target is unreachable).
    The verdict becomes inconclusive with this reason."""
    gate = gate_for(environment)
    if gate.run.add_problem(reason):
        log.error("slogate: %s", reason)
    _stop(gate)


def _stop(gate: Gate) -> None:
    runner = gate.environment.runner
    if runner is not None and not gate.is_worker:
        # In a greenlet of its own: called from a user's greenlet, which quit() kills, it would
        # otherwise die half-way and leave the run going until --run-time.
        gevent.spawn(runner.quit)


def quit_orphan(environment: Any) -> None:
    """A worker whose master is gone (slo/plugin/watchers.py `watch_master`): its users stopped at
    once (nobody will ever collect their samples, and a load nobody watches must not go on), then
    the process quits, exit 3: the run it was part of is not judged."""
    environment.stop_timeout = 0  # no grace for requests in flight: stop_users kills the users
    environment.process_exit_code = exitcodes.INCONCLUSIVE
    environment.runner.quit()


def end_run(environment: Any) -> None:
    """End the run before its --run-time: a master stops its workers, so that their last samples
    arrive, then quits; a single process quits. A worker ends nothing (its master does)."""
    gate = gate_for(environment)
    if gate.is_master:
        gevent.spawn(end_gracefully, environment.runner)
    else:
        _stop(gate)


def quit_run(runner: Any) -> None:
    """A single process's end of run at --run-time, as Locust's own timer ends a headless run."""
    log.info("slogate: --run-time reached, shutting down")
    runner.quit()


def end_gracefully(runner: Any) -> None:
    """A master's end of run: stop every worker (each flushes its last samples), then quit."""
    stop_workers(runner)
    runner.quit()


def stop_workers(runner: Any, timeout_s: float | None = None) -> None:
    """A master stops every worker, each flushing its last samples, waiting `timeout_s` at most
    (None: as long as Locust's stop() does), then tells each to quit."""
    # stop() drops workers that do not stop within --stop-timeout from the master's list, so
    # quit() would never tell them: they would linger (60 s) after the run. Tell every worker.
    workers = [client.id for client in runner.clients.all]
    with gevent.Timeout(timeout_s, False):
        runner.stop()
    for worker in workers:
        runner.server.send_to_client(Message("quit", None, worker))


def watch_signals(gate: Gate) -> None:
    """SIGTERM (a cancelled CI job, `timeout`, an evicted pod) or SIGINT (Ctrl-C) before the run's
    end: recorded, so the report says the run was interrupted (inconclusive, or a fail already
    certain; slo/gate/judge.py) while Locust shuts down as it always does and writes it. A Ctrl-C
    while Locust writes the report of a run that has ended lets it finish. A second signal ends
    the process at once (exit 143 or 130, as shells expect).

    SIGTERM: a gevent watcher, run before Locust's own (registered after this one). SIGINT: a
    Python handler in place of the default one, raising the KeyboardInterrupt Locust shuts down on
    in the main greenlet, where Locust waits for the run (a gevent watcher would replace that)."""
    signalled_while_writing = False  # a signal came while the report of an ended run was written

    def interrupted(name: str) -> bool:
        """Record the signal; True when Locust is to shut down on it, False when it already does."""
        nonlocal signalled_while_writing
        run = gate.run
        if run.signal is not None or signalled_while_writing:
            with contextlib.suppress(Exception):  # whatever happens, the process exits now
                flush_journal(gate, block=True)
            sys.stderr.write(f"slogate: second {name}: exiting now; {what_is_left(gate)}\n")
            os._exit(INTERRUPT_EXITS[name])
        if run.judged:
            signalled_while_writing = True
            log.warning("slogate: %s: the run has ended; writing its report (a second %s exits now)", name, name)
            return False
        if run.started_at is not None:
            run.interrupt(name)
            log.warning("slogate: %s: the run is interrupted; writing the report (a second %s exits now)", name, name)
        return True

    gevent.signal_handler(signal.SIGTERM, interrupted, "SIGTERM")
    previous = signal.getsignal(signal.SIGINT)
    hub = gevent.get_hub()
    main = hub.parent

    def interrupt_main() -> None:
        if not gate.run.judged:  # Locust still waits for the run, not already writing its report
            main.throw(KeyboardInterrupt)

    def on_sigint(signum: int, frame: Any) -> None:
        if not interrupted("SIGINT"):
            return
        if previous is not signal.default_int_handler:
            if callable(previous):
                previous(signum, frame)
            return
        if greenlet.getcurrent() is main:
            raise KeyboardInterrupt
        # The signal lands in whichever greenlet runs (the hub, a user's): raised there, the
        # KeyboardInterrupt kills that greenlet with a printed traceback before gevent passes it on
        # to the main greenlet. Deliver it there directly, from the hub's loop.
        hub.loop.run_callback(interrupt_main)

    signal.signal(signal.SIGINT, on_sigint)


def what_is_left(gate: Gate) -> str:
    """At a second signal: where the run's figures are, as they are on disk now (the reports of an
    ended run may be written and its journal removed already, or the journal never written)."""
    report_dir = gate.reports.report_dir
    if report_dir and (Path(report_dir) / JOURNAL_NAME).is_file():
        return f"`slogate judge {report_dir}` judges the run's journal"
    if report_dir and gate.run.judged and (Path(report_dir) / JSON_NAME).is_file():
        return f"the reports are in {report_dir}/"
    return "no journal of the run could be written: nothing is left to judge"


def note_workload(environment: Any, model: str, workload: WorkloadFacts | dict[str, Any]) -> None:
    """Record what the load looked like, for the report (and for baselines to compare like with
    like). A user calls it once its workload is ready (shared prefixes primed)."""
    gate = gate_for(environment)
    if gate.run.note_workload(model, WorkloadFacts.coerce(workload)):
        gate.restart_server_counters()


def usage_exit(environment: Any, message: str) -> None:
    """For the locustfiles' own option checks: the same one line, error report and exit 2 as a bad
    SLO file, before any load is sent."""
    refuse(gate_for(environment), message)


def refuse(gate: Gate, message: str) -> None:
    """A bad SLO file, baseline or option: one line on stderr, an error report (where it can be
    written), exit 2 before any load is sent."""
    sys.stderr.write(f"slogate: error: {message}\n")
    report_dir = settings.report_dir(settings.parsed(gate.environment))  # the settings may be what was refused
    if report_dir and not gate.is_worker:
        with contextlib.suppress(OSError):  # an unwritable report directory is what was refused
            write_reports(usage_error(message, RunInfo(target=public_url(gate.environment.host))), report_dir)
    sys.exit(exitcodes.USAGE)


PROBE_BYTES = 64 * 1024  # a journal's header and first entries: a disk without room for these is full


def check_report_dir(gate: Gate) -> None:
    """Refuse (exit 2) a --slo-report-dir that cannot be written, before any load: a run whose
    report would be lost is not worth its GPU minutes. Bytes are written and synced, not just a
    file created: on a full disk creating a file still succeeds, writing to it does not."""
    report_dir = gate.reports.report_dir
    if not report_dir:
        return
    try:
        Path(report_dir).mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=report_dir, buffering=0) as probe:
            probe.write(bytes(PROBE_BYTES))
            os.fsync(probe.fileno())
    except OSError as e:
        refuse(gate, f"the report directory {report_dir}: cannot write there ({e.strerror or e})")


FINISH_MARGIN_S = 10.0  # beyond --stop-timeout: the workers' stop and their last reports


def finish_load_on_signal(gate: Gate) -> None:
    """At `quitting` on a signal (a headless run interrupted), stop the load before the run is
    judged: Locust judges first and stops after, and a master's own `quitting` listener gives its
    workers 0.5 s to send their last samples (a loaded machine's workers missed that: CI, 2026-12-07).
    Every worker sends its last samples, every request in flight ends within --stop-timeout or is
    recorded as unfinished (unless a stop was under way already: then Locust's quit follows at once).
    Bounded by about --stop-timeout plus a margin; a second signal ends the wait at once. Listening
    from `init` on, after the master's listener, it runs before it (Locust fires `quitting` in
    reverse)."""
    runner = gate.environment.runner
    if gate.run.signal is None or runner is None or runner.state in (STATE_INIT, STATE_STOPPED):
        return
    timeout_s = gate.run_options.stop_timeout_s + FINISH_MARGIN_S
    if gate.is_master:
        stop_workers(runner, timeout_s)
        return
    with gevent.Timeout(timeout_s, False):
        runner.stop()


MASTERS_STOP_WAIT_S = 2.0  # a signal to the process group reaches the master too: its "stop" follows at once


def ship_last_samples_before_quitting(gate: Gate) -> None:
    """At a worker's `quitting` (a signal: to the process group, as a terminal's Ctrl-C and `slogate
    run` send it, or to the worker alone), its last samples go to the master first: Locust's own
    listener, which runs next, tells the master this worker quit, and the master drops what comes
    after (both workers' samples were lost so). The master, signalled too, sends "stop" at once, and
    a worker stopping itself as well would stop its users twice (Locust raises): it waits for that
    stop, stopping itself only where none comes. Bounded by --stop-timeout plus a margin."""
    runner, run = gate.environment.runner, gate.run
    if runner is None or run.started_at is None or run.shipped_last_samples:
        return
    with gevent.Timeout(MASTERS_STOP_WAIT_S, False):
        while runner.state in (STATE_SPAWNING, STATE_RUNNING):
            gevent.sleep(0.05)
    with gevent.Timeout((gate.environment.stop_timeout or 0) + FINISH_MARGIN_S, False):
        if runner.state in (STATE_SPAWNING, STATE_RUNNING):
            runner.stop()
        while not run.shipped_last_samples:  # shipped in its `test_stop`, in whichever greenlet stopped it
            gevent.sleep(0.05)
