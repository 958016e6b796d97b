"""The gate's Locust event handlers: configure at `init`, start listening, watching and the
journal at `test_start`, ship and merge worker samples, flush at `test_stop`, and judge in
`quitting` (module level, so after Locust's own handlers and its final worker reports), which sets
the process exit code: 0 pass, 1 fail, 2 usage, 3 inconclusive, 4 the report could not be written."""

from __future__ import annotations

import logging
import sys
from typing import Any

import gevent
from locust import events
from slogate.slo.outputs.publish import publish, write_failed
from slogate.slo.outputs.render import headline
from slogate.slo.plugin import settings, target, web_ui
from slogate.slo.plugin.cancel_drain import wait_for_let_go
from slogate.slo.plugin.control import BAD_CONFIG, abort_run, check_report_dir, end_gracefully, quit_run, refuse
from slogate.slo.plugin.gate import CONFIG_ERRORS, every_gate, gate_for
from slogate.slo.plugin.journal import close_journal, flush_journal, pause_journal, start_journal
from slogate.slo.plugin.metrics_server import start_metrics_server, stop_metrics_server
from slogate.slo.plugin.signals import (
    finish_load_on_signal,
    route_workers_ctrl_c,
    ship_last_samples_before_quitting,
    watch_signals,
)
from slogate.slo.plugin.watchers import start_watchers, watch_master
from slogate.slo.plugin.wire import FLUSH_MESSAGE, WIRE_KEY, merge_from_worker, on_worker_flush, worker_payload

log = logging.getLogger("slogate")


@events.init.add_listener
def on_init(environment: Any, runner: Any = None, **_: Any) -> None:
    target.strip_environment(environment)  # first: before the web UI renders the host or a log names it
    gate = gate_for(environment)
    if settings.parsed(environment) is None:  # an environment without a command line (tests, a library)
        return
    try:
        gate.configure(with_baseline=not gate.is_worker)
    except CONFIG_ERRORS as e:
        refuse(gate, str(e))
    if not gate.is_worker:
        check_report_dir(gate)  # a report that cannot be written is found before any load
    if environment.web_ui is not None:
        web_ui.install(
            environment.web_ui,
            gate.snapshot,
            lambda host: target.remember(environment, host) or "",
            series=gate.live_chart,
            on_stop=gate.note_stop_by_hand,
        )
    if not gate.is_worker and gate.run_options.headless:  # a web UI run is stopped by hand
        watch_signals(gate)
        environment.events.quitting.add_listener(lambda **_: finish_load_on_signal(gate))
    if gate.is_worker:  # from `init` on, after Locust's own listeners: before them at `quitting`, fired in reverse
        environment.events.quitting.add_listener(lambda **_: ship_last_samples_before_quitting(gate))
        route_workers_ctrl_c(environment.events)
    # Locust's own --run-time on a master quits 0.5 s after telling the workers, before their last
    # samples arrive (and loses them outright with --stop-timeout): a headless master ends it itself
    # (`on_test_start`): stop, which waits for every worker to stop and so for its final flush, then quit.
    # A single headless process ends it itself too, timed from a fresh clock (Gate.take_over_run_time).
    gate.take_over_run_time()
    if gate.is_master:
        runner.register_message(FLUSH_MESSAGE, lambda environment, msg, **_: on_worker_flush(gate, msg))
    else:
        environment.events.request.add_listener(gate.on_request)


@events.test_start.add_listener
def on_test_start(environment: Any, **_: Any) -> None:
    """A new run (`Gate.start_run`: a web UI rerun starts from nothing), as configured now."""
    target.strip_environment(environment)  # the host may have changed since init (web UI, API)
    gate = gate_for(environment)
    configured = settings.parsed(environment) is not None
    refused = None
    if configured and not gate.is_worker:
        try:  # the web UI form may have changed the options since init
            gate.configure(with_baseline=True)
        except CONFIG_ERRORS as e:
            refused = f"{BAD_CONFIG}: {e}"
    elif configured:
        gate.reread_options()  # as the master's spawn message brought them
    run = gate.start_run()
    if refused:
        abort_run(environment, refused)
    run_time_s = gate.run_time_to_enforce()
    if run_time_s:
        gevent.get_hub().loop.update_now()  # the loop's clock, stale by the work since its last turn
        workers = ", once every worker has sent its last samples" if gate.is_master else ""
        log.info("slogate: the run ends after %s s (--run-time)%s", run_time_s, workers)
        gevent.spawn_later(run_time_s, end_gracefully if gate.is_master else quit_run, environment.runner)
    if not gate.is_master:
        run.loop_monitor.start()
    if gate.is_worker:
        run.watch(gevent.spawn(watch_master, gate))
    if not gate.is_worker and configured:
        gate.start_scraper()
        start_watchers(gate)
        start_metrics_server(gate)
        start_journal(gate, gate.reports.report_dir)


@events.reset_stats.add_listener
def on_reset_stats(**_: Any) -> None:
    for gate in every_gate():
        gate.start_listening()
        writer = gate.run.journal.writer
        if writer is not None:  # the measurements start again: so does the journal
            start_journal(gate, writer.path.parent)


@events.report_to_master.add_listener
def on_report_to_master(client_id: str, data: dict[str, Any], **_: Any) -> None:
    for gate in every_gate():
        if gate.is_worker:
            data[WIRE_KEY] = worker_payload(gate)


@events.test_stop.add_listener
def on_test_stop(environment: Any, **_: Any) -> None:
    gate = gate_for(environment)
    run = gate.run
    try:
        run.end()
        wait_for_let_go(gate)  # --cancel-fraction: the server's running requests back to 0?
        run.stop_scraper()
        run.loop_monitor.stop()
        run.stop_watchers()
        flush_journal(gate)
        pause_journal(gate)
        if gate.is_worker and environment.runner is not None:
            # Ship what is left now: the message reaches the master before this worker's
            # `client_stopped`, so the master's figures are complete when its own test_stop fires.
            environment.runner.send_message(FLUSH_MESSAGE, worker_payload(gate))
    finally:  # what a worker's `ship_last_samples_before_quitting` waits for, whatever failed (a master gone)
        run.mark_last_samples_shipped()


@events.worker_report.add_listener
def on_worker_report(client_id: str, data: dict[str, Any], **_: Any) -> None:
    for gate in every_gate():
        if gate.is_master and WIRE_KEY in data:
            merge_from_worker(gate, client_id, data[WIRE_KEY])


@events.quitting.add_listener
def on_quitting(environment: Any, **_: Any) -> None:
    gate = gate_for(environment)
    run = gate.run
    if gate.is_worker or run.judged or gate.settings is None:
        return
    if run.started_at is None and not gate.run_options.headless:
        return  # a web UI closed before any run: nothing to judge, and an earlier run's report stays
    run.mark_judged()  # after a signal, the load has stopped (`finish_load_on_signal`)
    run.stop_scraper()
    stop_metrics_server(gate)
    report = gate.snapshot(final=True)
    flush_journal(gate, complete=True)
    journal = close_journal(gate)
    report_dir = gate.reports.report_dir
    try:
        publish(report, report_dir, gate.alerts, gate.exports)
    except OSError as e:  # the journal, written in full, stays: `slogate judge` writes the reports once there is room
        kept = (
            f"the run's journal {journal} is there for `slogate judge`"
            if journal is not None and journal.exists()  # not in a directory removed meanwhile
            else "the run's journal could not be written either"
        )
        environment.process_exit_code = write_failed(report, report_dir, e, kept)
        return
    if journal is not None:
        journal.unlink(missing_ok=True)  # the reports hold all it did
    environment.process_exit_code = report.exit_code
    run.leave_last_words(f"{headline(report)}\nslogate: reports in {report_dir}/\n")


@events.quit.add_listener
def on_quit(**_: Any) -> None:
    """The verdict again, as the very last lines: Locust prints its tables after `quitting`, and a
    CI log should end with the verdict, not with percentiles."""
    for gate in every_gate():
        words = gate.run.take_last_words()
        if words:
            sys.stdout.write(words)
            sys.stdout.flush()
