"""The run's background watchers (greenlets the gate starts at `test_start` and kills at
`test_stop`): the target never answers, --slo-abort-on-fail's window judge, the trimming of
Locust's per-second counts on long runs, and, on a worker, its master gone."""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import Any

import gevent
from locust.runners import STATE_SPAWNING
from slogate.slo.gate.correlation import batchable
from slogate.slo.gate.early_stop import certain_verdict, look
from slogate.slo.gate.facts import DECIDED, RunStop, percent
from slogate.slo.gate.metrics import ClassMetrics, MetricsStore
from slogate.slo.gate.record import ALL, ErrorKind
from slogate.slo.gate.self_check import assess
from slogate.slo.gate.window import first_breach, objectives_on_tags, unwindowed_note
from slogate.slo.plugin import target
from slogate.slo.plugin.control import abort_run, end_run, quit_orphan
from slogate.slo.plugin.gate import Gate
from slogate.slo.plugin.listener import LOCUST_RATE_KEEP_S, trim_rate_counts
from slogate.slo.plugin.run_state import Run

log = logging.getLogger("slogate")
BREACH_CHECK_S = 2.0  # how often --slo-abort-on-fail judges the window
DECISION_CHECK_S = 1.0  # how often --slo-stop-when-decided looks (its bounds hold at any look)
# A worker on another machine whose master has not answered its heartbeats (sent every second) for
# this long stops its load (Locust's own limit is 60 s). Not shorter: a master's loop can stall for a
# second or two on a loaded machine (a report built, a collection), and a healthy run must not lose
# its workers. A forked worker (`--processes`) sees its master's death at once (`forked_by`).
MASTER_SILENCE_S = 5.0
MASTER_CHECK_S = 0.2
PROBE_AFTER = 1 / 3  # of --slo-unreachable-s with no request ended: then the target is probed


def start_watchers(gate: Gate) -> None:
    """The master's (or single process's) watchers for this run, as its options ask."""
    early = gate.early_stop
    run = gate.run
    run.watch(
        gevent.spawn(watch_reachability, gate, gate.settings.gate.unreachable_s),
        gevent.spawn(trim_locust_rate_counts, gate.environment),
    )
    if (early.stop_when_decided or early.stop_when_failed) and gate.spec is not None:
        run.watch(gevent.spawn(watch_decisions, gate, run))
        note = early_stop_note(
            early.confidence, gate.waiting_for, early.not_blocking, early.correlated, early.stop_when_failed
        )
        (log.warning if gate.waiting_for else log.info)("slogate: %s", note)  # waiting defeats the early stop
    if early.abort_on_fail and gate.spec is not None:
        run.watch(gevent.spawn(watch_breaches, gate, run, early.window_s))
        note = unwindowed_note(objectives_on_tags(gate.spec))
        if note:
            log.warning("slogate: %s", note)


def early_stop_note(
    confidence: float,
    waiting_for: list[str],
    not_blocking: tuple[str, ...],
    correlated: bool = False,
    failed_only: bool = False,
) -> str:
    """The one line a run with --slo-stop-when-decided (or `failed_only`, -failed) starts with: what it waits for."""
    at = f"at {percent(confidence)} confidence"
    if failed_only:
        line = f"--slo-stop-when-failed: the run stops once an SLO is decided failed {at}"
    else:
        line = f"--slo-stop-when-decided: the run stops once every SLO is decided {at}"
    if correlated:
        line += " (latency percentiles on batches as long as the requests' measured correlation)"
    if waiting_for:
        line += (
            f"; {', '.join(waiting_for)} cannot be decided before the end and keep the run to its --run-time "
            "(--slo-not-blocking NAMES judges them at the stop instead)"
        )
    elif not_blocking:
        line += f"; {', '.join(not_blocking)} judged at the stop, not waited for"
    return line


def watch_decisions(gate: Gate, run: Run) -> None:
    """--slo-stop-when-decided: end `run` at the first look where its verdict is certain (none
    while Locust is still spawning users: the ramp is not the steady load the bounds assume);
    --slo-stop-when-failed: only where it is certainly a fail."""
    while gate.spec is not None and run.started_at is not None:
        gevent.sleep(DECISION_CHECK_S)
        if run.breach is not None or run.stopped is not None:
            return  # already ending
        if getattr(gate.environment.runner, "state", None) == STATE_SPAWNING:
            continue
        metrics = gate.metrics()
        early = gate.early_stop
        looks = look(gate.spec, metrics, early.confidence, client_delay_ms(gate, metrics), early.correlated)
        verdict = certain_verdict(looks, gate.waiting_for, early.not_blocking, early.stop_when_failed)
        if verdict is not None:
            after = round(time.time() - run.started_at, 3)
            batched = early.correlated and any(batchable(o, metrics) for o in gate.spec.objectives)
            stop = RunStop(DECIDED, after, run.planned_s, verdict, early.confidence, tuple(looks), correlated=batched)
            run.decide(stop)
            log.info("slogate: %s", stop.line())
            end_run(gate.environment)
            return


def client_delay_ms(gate: Gate, metrics: MetricsStore) -> float:
    """What the load generator's own delay could have added to a latency (the self-check), 0 if none."""
    run = gate.run_info()
    saturation = assess(metrics, run.cpu_warning, run.processes, run.max_client_lag_ms)
    return saturation.client_delay_ms if saturation else 0.0


def watch_breaches(gate: Gate, run: Run, window_s: float) -> None:
    """--slo-abort-on-fail: stop `run` (a fail) at the first objective that breaches beyond noise
    over the last `window_s` seconds. Objectives on a name the run turns out to measure as a tag
    (a trace's `class`) are named once, as those on conversation tags were at the start."""
    noted = {o.name for o in objectives_on_tags(gate.spec)} if gate.spec is not None else set()
    while gate.spec is not None and run.started_at is not None:
        gevent.sleep(BREACH_CHECK_S)
        metrics = gate.metrics()
        late = [
            o
            for o in objectives_on_tags(gate.spec, metrics.tags.keys() - metrics.classes.keys())
            if o.name not in noted
        ]
        if late:
            log.warning("slogate: %s", unwindowed_note(late))
            noted.update(o.name for o in late)
        if run.stopped is not None:
            return  # decided: ending
        breach = first_breach(
            gate.spec, metrics.intervals, time.time(), run.started_at, window_s, client_delay_ms(gate, metrics)
        )
        if breach is not None:
            run.abort(breach)
            log.error("slogate: %s", breach.message)
            end_run(gate.environment)
            return


def unreachable_reason(total: ClassMetrics, waited_s: float, limit_s: float) -> str | None:
    """Why to stop a run whose target never answered: no request succeeded in `limit_s` and some
    were refused, timed out or failed the TLS handshake (a slow server that answers at all is
    measured, not stopped)."""
    if limit_s <= 0 or waited_s < limit_s or total.successes:
        return None
    kinds = total.errors_by_kind
    tls = kinds.get(ErrorKind.TLS, 0)
    refused = kinds.get(ErrorKind.CONNECT, 0) + kinds.get(ErrorKind.TIMEOUT, 0) + tls
    if not refused:
        return None
    handshakes = (
        f", {tls} failed the TLS handshake (the target's certificate does not verify: --ca-bundle FILE names the CA "
        "that signed it)"
        if tls
        else ""
    )
    return (
        f"target unreachable: no request succeeded in {waited_s:.0f} s, {refused} refused or timed out"
        f"{handshakes} (--slo-unreachable-s {limit_s:g})"
    )


def trim_locust_rate_counts(environment: Any) -> None:
    """Every minute, Locust's per-second counts trimmed to the last minute (`trim_rate_counts`)."""
    while True:
        gevent.sleep(LOCUST_RATE_KEEP_S)
        trim_rate_counts(environment.stats, time.time() - LOCUST_RATE_KEEP_S)


def watch_reachability(gate: Gate, limit_s: float) -> None:
    """Stop a run early when the target does not answer (instead of waiting out --run-time):
    requests refused or timed out (`unreachable_reason`), or nothing at all back, not even to a
    probe of its own (`silence_reason`: the requests would time out only at --request-timeout).
    The probe goes out only once a third of the limit has passed with no request ended at all: a
    target that answers anything, an error included, is never called more than the load calls it."""
    if limit_s <= 0:
        return
    started = time.monotonic()
    url, headers = target.resolve(gate.environment)
    probe: gevent.Greenlet | None = None
    try:
        while True:
            if probe is None or probe.ready():
                gevent.sleep(1.0)
            else:
                probe.join(timeout=1.0)  # its answer, or its silence, is known at once
            elapsed = time.monotonic() - started
            waited = elapsed - gate.warmup_s  # warm-up requests are not in the store
            total = gate.metrics().get(ALL)
            if probe is None and url and elapsed >= limit_s * PROBE_AFTER and not (total.requests or total.failures):
                probe = gevent.spawn(target.probe, url, limit_s - elapsed, headers)
            value = probe.value if probe is not None else None
            reason = silence_reason(value, total, elapsed, limit_s) or unreachable_reason(total, waited, limit_s)
            if reason:
                abort_run(gate.environment, reason)
                return
    finally:
        if probe is not None:
            probe.kill(block=False)


def silence_reason(probe: str | None, total: ClassMetrics, elapsed_s: float, limit_s: float) -> str | None:
    """Why to stop a run whose target took connections and answered nothing (or took none) for
    `limit_s`: no request succeeded, and the probe (`target.probe`) got not a byte back."""
    if probe not in (target.SILENT, target.NO_CONNECTION) or total.successes or elapsed_s < limit_s:
        return None
    what = "accepted connections but answered nothing" if probe == target.SILENT else "accepted no connection"
    return (
        f"target unreachable: it {what} in {limit_s:g} s (no request succeeded, GET /v1/models got not a byte) "
        f"(--slo-unreachable-s {limit_s:g})"
    )


def forked_by() -> int | None:
    """The pid of the Locust process that forked this worker (`--processes`), else None. A fork
    keeps the command line: a worker whose parent's is its own was forked by it, and is orphaned
    the moment its parent pid changes. A worker started on its own (`--worker`, from a shell that
    may well exit) has only the heartbeats."""
    parent = os.getppid()
    try:
        same = Path(f"/proc/{parent}/cmdline").read_bytes() == Path("/proc/self/cmdline").read_bytes()
    except OSError:  # no /proc (not Linux)
        return None
    return parent if same else None


def watch_master(gate: Gate) -> None:
    """A worker's load, while it runs, stops once its master is gone: at once for the forked workers
    of `--processes` (their parent pid changes), and for any worker once the master has not answered
    a heartbeat for `MASTER_SILENCE_S` (Locust's own check waits 60 s): a master killed outright
    (SIGKILL, the OOM killer, its machine gone) closes no connection a worker could see. Only time
    this greenlet was awake on schedule counts as silence: a worker whose own loop stalled may have
    the master's answers waiting unread."""
    runner = gate.environment.runner
    parent = forked_by()
    heard = runner.last_heartbeat_timestamp
    silent_s, last = 0.0, time.monotonic()
    while True:
        gevent.sleep(MASTER_CHECK_S)
        now = time.monotonic()
        step, last = now - last, now
        if parent is not None and os.getppid() != parent:
            gone = "its master process is gone"
        elif runner.last_heartbeat_timestamp != heard:
            heard, silent_s = runner.last_heartbeat_timestamp, 0.0
            continue
        else:
            silent_s += min(step, 2 * MASTER_CHECK_S)
            if silent_s <= MASTER_SILENCE_S:
                continue
            gone = f"the master has not answered for {silent_s:.0f} s"
        log.error("slogate: %s: this worker stops its load and exits", gone)
        gevent.spawn(quit_orphan, gate.environment)  # not from here: the stop kills this greenlet
        return
