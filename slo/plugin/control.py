"""Ending a run from inside it: stopped because its figures cannot mean anything (`abort_run`),
ended before its --run-time with every worker's last samples (`end_run`), or refused before any
load for a bad option (`usage_exit`, exit 2)."""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import gevent
from locust.rpc import Message
from slogate.slo.gate import exitcodes
from slogate.slo.gate.facts import WorkloadFacts
from slogate.slo.gate.judge import usage_error
from slogate.slo.gate.report import RunInfo, public_url
from slogate.slo.outputs.render import write_reports
from slogate.slo.plugin import settings
from slogate.slo.plugin.gate import Gate, gate_for

log = logging.getLogger("slogate")
BAD_CONFIG = "bad configuration"


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
