"""The trace's zero in a distributed run, in-process with stand-ins for the runners: the master
releases the workers once every shard index is ready, answers a late worker, stops waiting when
the run stops; a worker that never gets the zero ends the run with one line, and one that gets it
puts it on its own clock once it has it."""

from __future__ import annotations

import time
from types import SimpleNamespace
from typing import Any

import gevent
import pytest
from locust.env import Environment
from slogate.locustfiles.load import trace_user
from slogate.slo.plugin.gate import gate_for


class FakeMaster:
    def __init__(self) -> None:
        self.sent: list[tuple[str, Any, str | None]] = []

    def send_message(self, msg_type: str, data: Any = None, client_id: str | None = None) -> None:
        self.sent.append((msg_type, data, client_id))


class FakeEnvironment:
    """A master's environment: its runner and options (a SimpleNamespace cannot be weakly referenced)."""

    def __init__(self, expect_workers: int) -> None:
        self.runner = FakeMaster()
        self.parsed_options = SimpleNamespace(expect_workers=expect_workers)


def ready(environment: Any, worker_index: int, node_id: str) -> None:
    trace_user._on_ready(environment, SimpleNamespace(data=worker_index, node_id=node_id))


def poll_until(condition: Any, timeout_s: float = 5.0) -> bool:
    with gevent.Timeout(timeout_s, False):
        while not condition():
            gevent.sleep(0.01)
    return bool(condition())


@pytest.fixture
def master() -> FakeEnvironment:
    return FakeEnvironment(expect_workers=2)


def test_the_zero_waits_for_every_shard_index_not_for_any_two_workers(master: Any) -> None:
    releaser = gevent.spawn(trace_user._release_workers, master)
    ready(master, 0, "w0")
    ready(master, 5, "w-extra")  # index 5 of 2: no share; its READY must not stand for index 1
    gevent.sleep(trace_user._POLL_S)  # several of the master's polls
    assert not trace_user._zero(master).ready() and master.runner.sent == []
    ready(master, 1, "w1")
    assert poll_until(trace_user._zero(master).ready)
    releaser.join(timeout=5)
    (sent,) = master.runner.sent
    assert sent == ("slogate_trace_zero", trace_user._zero(master).get(), None)  # to every worker


def test_a_worker_ready_after_the_release_gets_the_same_zero(master: Any) -> None:
    ready(master, 0, "w0")
    ready(master, 1, "w1")
    trace_user._release_workers(master)
    zero = trace_user._zero(master).get()
    ready(master, 2, "late")
    assert master.runner.sent[-1] == ("slogate_trace_zero", zero, "late")


def test_a_stopped_run_stops_the_master_waiting_for_its_workers(master: Any) -> None:
    releaser = gevent.spawn(trace_user._release_workers, master)
    trace_user.trace_run(master).watchers.append(releaser)
    gevent.sleep(0)
    trace_user._stop_watching(master)
    assert poll_until(lambda: releaser.dead)
    ready(master, 0, "w0")
    ready(master, 1, "w1")
    gevent.sleep(trace_user._POLL_S)
    assert master.runner.sent == []  # nothing sent into the next run


def test_a_worker_without_its_zero_ends_the_run_with_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    env = Environment()
    monkeypatch.setattr(trace_user, "ZERO_WAIT_S", 0.05)
    with pytest.raises(gevent.GreenletExit):  # not an Exception: Locust logs no traceback for it
        trace_user.wait_for_zero(env)
    assert gate_for(env).run.problems == ["no trace zero came from the master within 0.05 s"]


def test_every_new_run_waits_for_a_new_zero(master: Any) -> None:
    """A web-UI rerun: the first run's zero must not start the second run's schedule (its
    requests would all be overdue at once), on the master and on every worker."""
    master.parsed_options.trace = ""  # the reset comes before anything a run with a trace needs
    ready(master, 0, "w0")
    ready(master, 1, "w1")
    trace_user._release_workers(master)
    assert trace_user._zero(master).ready()
    trace_user._end_with_the_trace(master)  # test_start of the next run
    assert not trace_user._zero(master).ready()


def test_a_worker_puts_the_zero_on_its_clock_after_waiting_for_it() -> None:
    """The zero comes as a wall-clock time: converted with clock readings from before the wait, a
    worker's whole schedule would move earlier by its wait (its first requests all overdue at once)."""
    worker = FakeEnvironment(expect_workers=2)  # a worker's environment needs only its trace state here
    perf, wall = time.perf_counter(), time.time()  # a stall between them may only make `zero` look late
    gevent.get_hub().loop.update_now()  # gevent's timers count from the loop's cached time
    gevent.spawn_later(0.3, trace_user._zero(worker).set, wall + 1.0)  # the master's zero comes 0.3 s on
    zero = trace_user.zero_on_this_clock(worker)
    assert time.perf_counter() - perf >= 0.25  # it waited
    # The same instant on the perf clock; a stall between the readings may only make it late.
    assert perf + 1.0 - 0.01 <= zero <= perf + 1.0 + 0.25, zero - perf
