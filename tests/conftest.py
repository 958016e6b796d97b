"""Shared fixtures: the fault server, the real vLLM CPU server, and a headless Locust runner.

Nothing here imports Locust or gevent: tests/gate/ and tests/outputs/ run unpatched, and the other folders'
conftest.py patch for gevent first (tests/gevent_patch.py). What imports sockets, TLS or asyncio (the fault
server, `free_port`, tests/session_vllm.py) is imported where used, after that patch.
"""

import contextlib
import json
import os
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

import pytest
from slogate.launch.locust_command import locust_argv, locustfile_path

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data"  # recorded streams, scrapes, reports, traces
LOCUSTFILE = locustfile_path("chat")


@pytest.fixture(scope="session")
def fault_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    from slogate.launch import fault_server as fault

    proc, url = fault.spawn(tmp_path_factory.mktemp("fault") / "requests.jsonl")
    yield url
    proc.terminate()
    proc.wait(timeout=10)


@pytest.fixture
def own_fault_server(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """A fault server of this test alone, with its log of answered requests (the ground truth)."""
    from slogate.launch import fault_server as fault

    log = tmp_path / "answered.jsonl"
    proc, url = fault.spawn(log)
    yield url, log
    proc.terminate()
    proc.wait(timeout=10)


@dataclass
class LocustRun:
    code: int
    stdout: str
    stderr: str
    report_dir: Path

    @property
    def report(self) -> dict[str, Any]:
        return json.loads((self.report_dir / "slo-report.json").read_text())


def server_log(
    log: Path, rows: int, timeout_s: float = 10, since: float = 0.0, outcome: str | None = None
) -> list[dict[str, Any]]:
    """The fault server's log (launch/fault_server.py) once it holds `rows` rows of requests that arrived
    at `since` (`time.time()`) or later (and ended with `outcome`, if given), or as it stands after
    `timeout_s`: it writes a request's row when it is done with it, which may be after the client is
    (the last bytes of a stream, a stall's end, a handshake the client refused)."""
    from slogate.launch.fault_server import read_log

    deadline = time.monotonic() + timeout_s
    while True:
        found = [row for row in read_log(log) if row["arrived"] >= since and outcome in (None, row.get("outcome"))]
        if len(found) >= rows or time.monotonic() > deadline:
            return found
        time.sleep(0.05)


def own_master_port(args: Sequence[str]) -> list[str]:
    """The options that give a run of `--processes` a master port of its own, not Locust's fixed 5557:
    runs of parallel tests overlap."""
    from slogate.launch.server import free_port

    if "--processes" not in args or "--master-bind-port" in args:
        return []
    port = str(free_port())
    return ["--master-bind-port", port, "--master-port", port]


def run_locust(
    host: str,
    report_dir: Path,
    *args: str,
    locustfile: str | Path = "chat",
    timeout: float = 180,
    env: dict | None = None,
) -> LocustRun:
    """A headless Locust run in a subprocess (forked from a process that has imported Locust and
    slogate: tests/locust_fork.py); `args` are more Locust and workload options.

    It ends when the Locust process does: output goes to files, not pipes, which the workers of
    `--processes` can hold open long after (with `--stop-timeout` they wait 60 s for the gone
    master's heartbeat); whatever is left of its process group then is killed.
    """
    from tests.locust_fork import forked

    extra = ["--only-summary", "--loglevel", "WARNING", *args, *own_master_port(args)]
    argv = forked(locust_argv(host, locustfile=locustfile, report_dir=report_dir, extra=extra))
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(
            argv,
            stdout=out,
            stderr=err,
            cwd=report_dir.parent,
            env={**os.environ, **(env or {})},
            start_new_session=True,
        )
        try:
            code = proc.wait(timeout=timeout)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        out.seek(0)
        err.seek(0)
        return LocustRun(code, out.read().decode(errors="replace"), err.read().decode(errors="replace"), report_dir)


@pytest.fixture
def locust_run(tmp_path: Path):
    def run(host: str, *args: str, **kw: Any) -> LocustRun:
        return run_locust(host, tmp_path / "report", *args, **kw)

    return run


def vllm_missing(why: str) -> NoReturn:
    """Skipped without vLLM, unless SLOGATE_REQUIRE_VLLM=1 (CI sets it): then a failure, never a silent skip."""
    if os.environ.get("SLOGATE_REQUIRE_VLLM") == "1":
        pytest.fail(f"vLLM required but not available: {why}")
    pytest.skip(f"vLLM not installed ({why}); run `slogate setup-cpu`")


def warm_up(url: str) -> None:
    """tests/session_vllm.py's warm-up, imported when called (it imports ssl: see this module's docstring)."""
    from tests import session_vllm

    session_vllm.warm_up(url)


class SessionVllm:
    """The session's vLLM CPU server (tests/session_vllm.py): started here, or adopted from the holder
    scripts/test.sh started before the parallel tests (SLOGATE_TEST_VLLM_STATE). A test may kill it and
    start it again on the same port (tests/launch/test_server_restart.py): its URL stays, and what is
    stopped at the end is the process running then. Each CPU start costs 20-40 s, so the suite starts one."""

    def __init__(self, log_dir: Path) -> None:
        from slogate.launch.installation import InstallError

        from tests import session_vllm

        state = os.environ.get(session_vllm.STATE_ENV)
        began = time.monotonic()
        try:
            if state:
                self.server, facts = session_vllm.adopt(Path(state), session_vllm.TEXT)
                self.plan, self.start_s = session_vllm.plan_again(session_vllm.TEXT, facts["port"]), facts["start_s"]
            else:
                launched = session_vllm.start_server(session_vllm.TEXT, log_dir / "log")
                self.server, self.plan = launched.server, launched.plan
                self.start_s = time.monotonic() - began  # how long a start takes on this machine
        except InstallError as e:
            vllm_missing(str(e))
        except RuntimeError as e:  # the holder's server did not start
            pytest.fail(str(e))
        self.log_dir, self.url = log_dir, self.server.url
        self.starts = 1

    def kill(self) -> float:
        """SIGTERM and at once SIGKILL to the server's process group (no graceful shutdown); returns when."""
        killed_at = time.time()
        self.server.stop(grace_s=0)
        return killed_at

    def start_again(self) -> float:
        """The same command on the same port; returns when `/health` answered again."""
        from slogate.launch.launcher import start

        self.starts += 1
        server = start(self.plan, self.log_dir / f"log.{self.starts}")
        self.server = server
        server.wait_healthy(self.plan.profile.health_timeout_s, poll_s=0.1)
        return time.time()


@pytest.fixture(scope="session")
def vllm_session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SessionVllm]:
    """The real vLLM CPU server with the tiny generated model, once per session (`SessionVllm`).

    Skipped when vLLM is not installed, unless SLOGATE_REQUIRE_VLLM=1 (CI sets it): then missing
    vLLM is a failure, never a silent skip. Not validated here: tests/launch/test_validate.py checks the
    built-in profiles with the installed parser.
    """
    session = SessionVllm(tmp_path_factory.mktemp("vllm"))
    try:
        warm_up(session.url)
        yield session
    finally:
        session.server.stop()


@pytest.fixture(scope="session")
def vllm_server(vllm_session: SessionVllm) -> str:
    """The session's vLLM CPU server's URL."""
    return vllm_session.url


# Tests that measure the machine as much as what they test: the load generator's self-check (an
# event-loop lag over 10 ms makes a run inconclusive) and runs of several processes or of the OpenAI
# SDK's users, timed to the second. Two of them at once on two cores fail for want of a core;
# scripts/test.sh runs them one at a time beside its parallel workers (whose Locust runs are forked:
# tests/locust_fork.py, so that they leave them the CPU).
SERIAL = (
    "tests/e2e/test_docs.py::test_runnable_examples_run_against_the_fault_server",
    "tests/plugin/test_early_stop.py::test_a_120_s_gate_ends_as_soon_as_its_verdict_is_certain",
    "tests/plugin/test_journal.py::test_a_killed_run_leaves_a_journal_that_slogate_judge_judges",
    "tests/plugin/test_journal.py::test_a_run_that_ends_removes_its_journal_and_a_signal_waits_for_the_workers",
    "tests/plugin/test_distributed.py::",
    "tests/plugin/test_credentials.py::test_headless_run_authenticates_every_call_and_leaks_nothing",
    "tests/load/test_conversations.py::test_open_loop_conversations_and_per_tag_reports",
    "tests/plugin/test_early_stop.py::test_an_slo_only_the_end_can_judge_keeps_the_run_to_its_run_time",
)
# Tests that need the machine to themselves (timing to tens of milliseconds, or a self-check that must
# see their own load alone): beside any other test they fail; scripts/test.sh runs them with the `vllm`
# ones, one at a time, nothing beside them.
ALONE = (
    # Its own hog must be what the self-check sees: beside other tests the machine was busy, its verdict
    # the same (inconclusive) but its advice not `--processes` (a fresh CI machine, 2026-12-06).
    "tests/load/test_open_loop.py::test_a_starved_generator_is_inconclusive_not_a_server_failure",
    # Two processes pace a trace to 20 ms (median): beside a fresh CI machine's tests, 46 ms.
    "tests/load/test_trace_replay.py::test_workers_each_send_their_share_and_the_master_merges_all",
    # Two worker processes must ship two 1 s intervals in a 4 s run: beside other workers they spawned late.
    "tests/gate/test_intervals.py::test_processes_ship_their_intervals_to_the_master",
    # A 3 s run 80x over its target: beside other workers its event loop stalled 200+ ms (p99), a client delay
    # that could explain the miss, so the run was inconclusive, not the fail it tests.
    "tests/plugin/test_headless_gate.py::test_pass_and_fail[5-",
    # A knee search in 5 s steps at 12-24 req/s: beside other workers a CI machine's stalls (p95 759 ms at 12
    # req/s) were a client delay that explained the fail just above the knee, so the step was inconclusive.
    "tests/launch/test_capacity.py::test_finds_the_fault_servers_known_knee_and_gates_on_it",
    # A test at 12 req/s decided by its early stop: beside other workers a CI machine's stalls put requests
    # over the target in clusters, and its one run of 90 s ended undecided (2026-12-07; alone: decided at 21 s).
    "tests/launch/test_capacity_interval.py::test_the_test_at_r_decides_the_fault_servers_known_capacity_in_seconds",
)


@pytest.hookimpl(tryfirst=True)  # before `-m` selects by these marks
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The tests on the real vLLM CPU server are marked `vllm` (those that take the session's
    server too), SERIAL's `serial`, ALONE's `alone`: scripts/test.sh runs the `serial` ones in a pytest
    process of their own beside the parallel workers, then the `vllm` and `alone` ones one after
    another, nothing beside them (one server start, no two of them loading the CPU at once)."""
    for item in items:
        if "vllm_session" in item.fixturenames and not item.get_closest_marker("vllm"):
            item.add_marker(pytest.mark.vllm)
        if item.nodeid.startswith(SERIAL):
            item.add_marker(pytest.mark.serial)
        if item.nodeid.startswith(ALONE):
            item.add_marker(pytest.mark.alone)
