"""Trace replay in Locust: `--trace FILE` (Mooncake JSONL) sent open loop at the trace's times.

`TraceReplayUser` sends its process's share of the trace (`trace.shard`: worker i of n takes every
n-th request from the i-th and keeps its time; n is the master's `--expect-workers`, which
`--processes` sets) at `(timestamp - --trace-start-s) / --trace-speedup` after the trace's zero,
each measured from that scheduled time as the open-loop user measures its arrivals. The zero is
one wall-clock instant for every process, chosen once every process is ready to send (has loaded
the trace and calibrated its prompts, which takes a round trip per `/tokenize` call): a single
process takes it when it is ready; in a distributed run each worker tells the master it is
ready, and the master sends every worker the zero once the workers of every shard index below
`--expect-workers` are (or after `READY_WAIT_S`, with those that are; a worker ready later gets
the same zero, and its late requests count their lateness). Prompts are built block by block
(`trace_prompts.PromptBuilder`, token-exact through `/tokenize`), with `output_length` as `max_tokens`
and `ignore_eos`. One user per process replays (`-u` at least the number of workers); a
process's further users send nothing.

The run ends when the trace does: the master (or the only process) watches the records arrive and
ends the run once every scheduled request is accounted for (answered, failed or dropped). The
trace is loaded and checked in full at `init` (options.py): a bad line stops the run before any
load, with one line naming the file and line, and exit 2.
"""

from __future__ import annotations

import logging
import time
import weakref
from dataclasses import dataclass, field, replace
from typing import Any

import gevent
from gevent.event import AsyncResult
from locust import events, task
from locust.runners import MasterRunner, WorkerRunner
from slogate.locustfiles.load import replay, server, trace, trace_prompts
from slogate.locustfiles.load.open_loop import OpenLoopSender
from slogate.locustfiles.load.options import workload_options
from slogate.slo.gate.facts import TraceFacts, WorkloadFacts
from slogate.slo.plugin import target
from slogate.slo.plugin.control import BAD_CONFIG, abort_run, end_run, note_workload
from slogate.slo.plugin.gate import gate_for

log = logging.getLogger("slogate.trace")

_POLL_S = 0.2  # how often the master checks whether the trace's requests are all accounted for
READY, ZERO = "slogate_trace_ready", "slogate_trace_zero"  # worker -> master, master -> workers
ZERO_LEAD_S = 0.2  # from the zero's choice to the zero: time for its message to reach the workers
READY_WAIT_S = 120.0  # the master starts the trace without the workers not ready by then
ZERO_WAIT_S = READY_WAIT_S + 60  # a worker gives up on its master's zero after this


@dataclass
class TraceRun:
    """One process's replay of one run (a web UI rerun starts a new one at `test_start`)."""

    zero: AsyncResult = field(default_factory=AsyncResult)  # the trace's zero, wall clock
    ready: set[int] = field(default_factory=set)  # the master: the shard indexes ready to send
    watchers: list[gevent.Greenlet] = field(default_factory=list)  # the master: the zero and the trace's end
    replaying: bool = False  # a user of this process has taken the replay
    facts: TraceFacts | None = None  # the trace's facts, once calibrated


# Per environment (process), held weakly: an environment gone takes its replay with it.
_runs: weakref.WeakKeyDictionary[Any, TraceRun] = weakref.WeakKeyDictionary()


def trace_run(environment: Any) -> TraceRun:
    """This process's replay of the current run."""
    run = _runs.get(environment)
    if run is None:
        run = _runs[environment] = TraceRun()
    return run


def _zero(environment: Any) -> AsyncResult:
    return trace_run(environment).zero


def _on_ready(environment: Any, msg: Any, **_: Any) -> None:
    """A worker is ready (its message carries its worker index): counted toward the release; one
    ready after the zero was sent gets it at once."""
    trace_run(environment).ready.add(int(msg.data))
    zero = _zero(environment)
    if zero.ready():
        environment.runner.send_message(ZERO, zero.get(), client_id=msg.node_id)


def _on_zero(environment: Any, msg: Any, **_: Any) -> None:
    _zero(environment).set(msg.data)


@events.init.add_listener
def _register_messages(environment: Any, **_: Any) -> None:
    runner = environment.runner
    if isinstance(runner, MasterRunner):
        runner.register_message(READY, _on_ready)
    elif isinstance(runner, WorkerRunner):
        runner.register_message(ZERO, _on_zero)


def _release_workers(environment: Any) -> None:
    """On the master: the zero, once every expected worker is ready (or after READY_WAIT_S)."""
    expected = workload_options(environment).run.expect_workers
    waited_until = time.monotonic() + READY_WAIT_S

    def ready() -> int:  # shard indexes below `expected` (a worker past them has no share)
        return sum(1 for index in trace_run(environment).ready if index < expected)

    while ready() < expected and time.monotonic() < waited_until:
        gevent.sleep(_POLL_S / 4)
    if ready() < expected:
        log.warning("slogate: %d of %d workers ready to replay after %.0f s; starting", ready(), expected, READY_WAIT_S)
    zero = time.time() + ZERO_LEAD_S
    environment.runner.send_message(ZERO, zero)
    _zero(environment).set(zero)


def wait_for_zero(environment: Any) -> float:
    """The trace's zero (wall clock) once this process has it; a worker that never gets it (its
    master gone) ends the run with one line instead of waiting, or dying with a traceback."""
    try:
        return _zero(environment).get(timeout=ZERO_WAIT_S)
    except gevent.Timeout:
        abort_run(environment, f"no trace zero came from the master within {ZERO_WAIT_S:g} s")
        raise gevent.GreenletExit from None


def zero_on_this_clock(environment: Any) -> float:
    """The trace's zero on this process's `perf_counter` clock, once it has the zero; across machines
    as good as their clocks' sync. Both clocks are read after the wait, the wall clock first: a stall
    between the readings can only put the zero late by it, never send a request early."""
    zero = wait_for_zero(environment)
    wall = time.time()
    return time.perf_counter() + (zero - wall)


# How long after the last request was due (plus --request-timeout) the run waits for records that
# may never come (a stats reset, a worker that left) before it ends inconclusive.
_GRACE_S = 30.0


@events.test_start.add_listener
def _end_with_the_trace(environment: Any, **_: Any) -> None:
    """On the master (or the only process): end the run once every scheduled request is recorded."""
    _runs[environment] = TraceRun()  # every process: a new run (web UI) waits for a new zero, replays again
    run_options = workload_options(environment)
    options = run_options.trace
    if options is None or isinstance(environment.runner, WorkerRunner):
        return
    scheduled = replay.load_schedule(options)
    last_due = max((s.send_at_s for s in scheduled), default=0.0)
    patience = last_due + run_options.config.request_timeout_s + _GRACE_S
    watchers = trace_run(environment).watchers
    watchers.append(gevent.spawn(_watch_trace_end, environment, len(scheduled), patience))
    if isinstance(environment.runner, MasterRunner):
        watchers.append(gevent.spawn(_release_workers, environment))


@events.test_stop.add_listener
def _stop_watching(environment: Any, **_: Any) -> None:
    """A run stopped otherwise (web UI, --run-time, an abort): its greenlets must not act on the next one."""
    current = gevent.getcurrent()  # the watcher itself, when it is what ended the run
    watchers = trace_run(environment).watchers
    for greenlet in watchers:
        if greenlet is not current:
            greenlet.kill(block=False)
    watchers.clear()


def _watch_trace_end(environment: Any, requests: int, patience_s: float) -> None:
    """End the run once `requests` are recorded; inconclusive if some are not `patience_s` after the zero."""
    gate = gate_for(environment)
    zero = _zero(environment)
    while True:
        gevent.sleep(_POLL_S)
        store = gate.metrics()
        total = store.get("all")
        recorded = total.requests + total.dropped + store.warmup_excluded
        if recorded >= requests:
            break
        if zero.ready() and time.time() > zero.get() + patience_s:
            abort_run(
                environment,
                f"the trace's requests were due and answered or timed out by now, but {requests - recorded} of "
                f"{requests} were never recorded (a stats reset, or a worker that left?)",
            )
            return
    log.info("slogate: the trace's %d requests are done; ending the run", requests)
    end_run(environment)  # a master first waits for every worker's last samples


class TraceReplayUser(OpenLoopSender):
    """Sends this process's share of the trace at its times; see the module docstring."""

    replays_trace = True  # options.py: --trace needs this user, and this user needs --trace

    def workload_facts(self) -> WorkloadFacts:
        """The workload with the trace's facts: the same from every user of the process (a user
        that only idles must not note the workload without them)."""
        trace_facts = trace_run(self.environment).facts
        return replace(super().workload_facts(), trace=trace_facts) if trace_facts else super().workload_facts()

    def on_start(self) -> None:
        super().on_start()
        self.share: list[trace.ScheduledRequest] = []
        replay_run = trace_run(self.environment)
        if replay_run.replaying:
            return  # one user per process replays; the others send nothing
        replay_run.replaying = True
        options = workload_options(self.environment).trace
        assert options is not None  # checked at init
        scheduled = replay.load_schedule(options)
        host, headers = target.resolve(self.environment)
        model = self.workload.model
        try:
            self.builder = trace_prompts.PromptBuilder.calibrate(
                lambda text: server.count_tokens(host, headers, model, text),
                options.block_tokens,
                self.workload.config.prompt_nonce,
            )
        except trace_prompts.PromptError as e:
            abort_run(self.environment, f"{BAD_CONFIG}: {e}")
            raise gevent.GreenletExit from None
        runner = self.environment.runner
        index, count = getattr(runner, "worker_index", 0), 1
        if isinstance(runner, WorkerRunner):  # the master's --expect-workers (--processes) reaches its workers
            count = workload_options(self.environment).run.expect_workers
        self.share = trace.shard(scheduled, index, count) if index < count else []
        replay_run.facts = replay.trace_facts(options, scheduled, self.builder.exact)
        note_workload(self.environment, model, self.workload_facts())
        if isinstance(runner, WorkerRunner):
            runner.send_message(READY, index)  # and wait for the master's zero (module docstring)
        else:
            _zero(self.environment).set(time.time())
        self.started = zero_on_this_clock(self.environment)

    @task
    def send_share(self) -> None:
        for scheduled in self.share:
            req = replay.trace_request(self.workload, self.builder, scheduled)
            self._dispatch(req, self.started + scheduled.send_at_s)
        self.pool.join()
        while True:  # the master ends the run once every process's share is recorded
            gevent.sleep(3600)
