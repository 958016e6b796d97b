"""The tests' vLLM CPU servers: the session's (cpu-tiny, with LoRA adapters `a` and `b`) and the vision
model's (cpu-vision, tests/e2e/test_vllm_images.py), started by the tests' own process or, earlier, by
a holder process that scripts/test.sh starts in the background while the parallel tests (phase 1) run:
the tests on vLLM (phase 2) then find them healthy and warmed up instead of waiting 30 s for each.

The holder, `python -m tests.session_vllm STATE`, starts them one after the other, writes each one's
file (STATE for the session's, `state_of` names the other; JSON: its URL, port, process group, how
long the start took; or the error) and waits for them; SIGTERM stops them. The tests adopt them when
SLOGATE_TEST_VLLM_STATE names STATE (tests/conftest.py, test_vllm_images.py): they may kill the
session's and start it again on its port (tests/launch/test_server_restart.py), and they stop what
runs at the end. An idle server costs no CPU (measured: 0 s in 20 s), about 1 GiB of memory.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

from slogate.launch.launcher import Launched, LaunchPlan, locate_vllm, plan, start_profile
from slogate.launch.profile import load_profile
from slogate.launch.server import ServerProcess, free_port, is_healthy

STATE_ENV = "SLOGATE_TEST_VLLM_STATE"  # the holder's state file; unset: the tests start their own servers
HOLDER_ENV = "SLOGATE_TEST_VLLM_HOLDER"  # the holder's pid (scripts/test.sh): a dead holder is said at once
HOST = "127.0.0.1"
TEXT, VISION = "cpu-tiny", "cpu-vision"  # the session's server; the vision model's (tests/e2e/test_vllm_images.py)
PROFILES = (TEXT, VISION)  # what the holder starts, in this order
ADAPTERS = {TEXT: 2, VISION: 0}


def start_server(profile: str, log_path: Path) -> Launched:
    """A server of `profile` on a free port, healthy (`InstallError` without vLLM, `ServerStartError`).
    cpu-tiny serves LoRA adapters `a` and `b` of its model too (tests/e2e/test_vllm_adapters.py; the
    base model's answers are as without them, its TPOT ~20 % longer)."""
    return start_profile(
        profile, HOST, free_port(), install=False, validate=False, log_path=log_path, adapters=ADAPTERS[profile]
    )


def plan_again(profile: str, port: int) -> LaunchPlan:
    """The plan that starts `profile`'s server again on `port`, as `start_server` started it."""
    loaded = load_profile(profile)
    return plan(loaded, locate_vllm(loaded, install=False), HOST, port, ADAPTERS[profile])


def state_of(state: Path, profile: str) -> Path:
    """The holder's file for one server: STATE itself for the session's, a sibling for the vision model's."""
    return state if profile == TEXT else state.with_name(f"{state.stem}.{profile}{state.suffix}")


def warm_up(url: str) -> None:
    """One completion before any test's: the CPU server's first requests compile and fill caches on
    every core, which a test's first timed run would otherwise share the machine with."""
    body = json.dumps({"model": "tiny", "prompt": "warm up", "max_tokens": 4, "ignore_eos": True}).encode()
    request = urllib.request.Request(f"{url}/v1/completions", data=body, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=120) as resp:
        assert resp.status == 200, resp.status


class AdoptedServer:
    """A server another process started (the holder, which reaps it): its URL and its process group."""

    def __init__(self, url: str, pgid: int) -> None:
        self.url, self.pgid = url, pgid

    def _gone_within(self, seconds: float) -> bool:
        deadline = time.monotonic() + seconds
        while True:
            try:
                os.killpg(self.pgid, 0)
            except ProcessLookupError:
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.05)

    def stop(self, grace_s: float = 20.0) -> None:
        """SIGTERM to the group, SIGKILL after `grace_s`; returns once the group is gone (or after 5 s more)."""
        for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
            try:
                os.killpg(self.pgid, sig)
            except ProcessLookupError:
                return
            if self._gone_within(wait_s):
                return


def adopt(state: Path, profile: str, timeout_s: float = 600) -> tuple[AdoptedServer, dict[str, Any]]:
    """`profile`'s server from the holder once its file says it is up: a handle and the facts (`port`,
    `start_s`: how long its start took). Waits for every server the holder starts, so that no start runs
    beside a timed test. Raises `RuntimeError` with the holder's error, when the holder died before
    writing them or the server is gone, or on timeout."""
    deadline = time.monotonic() + timeout_s
    holder = int(os.environ.get(HOLDER_ENV, "0"))
    log = state.with_suffix(".log")
    while not all(state_of(state, p).exists() for p in PROFILES):
        if time.monotonic() > deadline:
            raise RuntimeError(f"the holder's vLLM servers did not start in {timeout_s:.0f} s ({state})")
        if holder and not _alive(holder):
            raise RuntimeError(f"the vLLM holder (pid {holder}) exited without starting its servers (log: {log})")
        time.sleep(0.2)
    facts: dict[str, Any] = json.loads(state_of(state, profile).read_text())
    if "error" in facts:
        raise RuntimeError(facts["error"])
    if not is_healthy(facts["url"]):
        raise RuntimeError(f"the holder's {profile} server at {facts['url']} is gone (log: {log})")
    return AdoptedServer(facts["url"], facts["pgid"]), facts


def running(servers: list[ServerProcess]) -> list[ServerProcess]:
    """Those still running, each polled (which reaps one that exited)."""
    return [server for server in servers if server.proc is not None and server.proc.poll() is None]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def hold(state: Path) -> int:
    """The holder: start each server (one after the other: one start at a time on the cores), warm the
    session's up, write each one's file; then wait for them. SIGTERM stops them (scripts/test.sh sends
    it when it exits; the servers keep the holder's niceness, 10 there: the tests on vLLM run alone)."""

    def stop(*_: object) -> None:
        """A server being started is stopped too; a second SIGTERM (scripts/test.sh's trap after a CI
        cancel's) is ignored: it would cut the stopping short and leave a server running."""
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        sys.exit(0)

    signal.signal(signal.SIGTERM, stop)
    servers: list[ServerProcess] = []
    try:
        for profile in PROFILES:
            path = state_of(state, profile)
            partial = path.with_name(path.name + ".partial")
            began = time.monotonic()
            try:
                server = start_server(profile, path.with_suffix(".server.log")).server
                servers.append(server)
                facts = {"url": server.url, "port": server.port, "start_s": time.monotonic() - began}
                if profile == TEXT:
                    warm_up(server.url)
                assert server.proc is not None
                facts["pgid"] = server.proc.pid
            except Exception as e:  # any failure is for the tests to report, as theirs
                facts = {"error": f"the {profile} vLLM server did not start: {e}"}
            partial.write_text(json.dumps(facts))
            partial.replace(path)
        # Each reaped as soon as it exits (a zombie's group lingers: `AdoptedServer.stop` would wait for
        # it), every one polled each time (`any` would stop at the first running one: the vision server,
        # stopped first, waited 5 s for its reaping). The tests may kill the session's (a restart): their
        # own server then takes its port.
        while running(servers):
            time.sleep(0.2)
        return 0
    finally:
        for server in servers:
            server.stop()


if __name__ == "__main__":
    sys.exit(hold(Path(sys.argv[1]).resolve()))
