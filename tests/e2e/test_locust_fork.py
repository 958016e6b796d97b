"""The tests' Locust fork server (tests/locust_fork.py) stands in for `python -m locust`: the child
runs with the client's arguments, directory, environment and streams, its exit status is the
client's, a signal to the client reaches it, and a client that dies takes the child's process
group with it."""

import array
import json
import os
import signal
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.locust_fork import forked

# Run by Locust as it loads the locustfile: what the child sees, then an exit or a wait.
LOCUSTFILE = """
import json, os, sys, time
from pathlib import Path
Path("seen.json").write_text(json.dumps({
    "cwd": os.getcwd(), "argv": sys.argv[1:], "env": os.environ.get("FORK_TEST"), "path0": sys.path[0],
    "pid": os.getpid(), "pgid": os.getpgid(0),
}))
print("to stdout", flush=True)
if os.environ.get("FORK_TEST") == "wait":
    time.sleep(60)
sys.exit(7)
"""


@pytest.fixture
def locustfile(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.delenv("SLOGATE_TEST_FORK", raising=False)
    path = tmp_path / "probe.py"
    path.write_text(LOCUSTFILE)
    return path


def start(locustfile: Path, env: str, **kw) -> subprocess.Popen:
    argv = forked([sys.executable, "-m", "locust", "-f", str(locustfile), "--headless"])
    assert argv[1:3] == ["-S", str(Path(__file__).parents[1] / "locust_fork.py")]
    return subprocess.Popen(
        argv, cwd=locustfile.parent, env={**os.environ, "FORK_TEST": env}, start_new_session=True, **kw
    )


def seen(locustfile: Path, timeout_s: float = 30) -> dict:
    path = locustfile.parent / "seen.json"
    deadline = time.monotonic() + timeout_s
    while not path.exists() or not path.read_text():
        assert time.monotonic() < deadline, "the child never ran the locustfile"
        time.sleep(0.05)
    return json.loads(path.read_text())


def gone(pid: int, timeout_s: float = 10) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    return False


def test_the_child_runs_as_the_client_was_asked_and_exits_with_its_code(locustfile: Path) -> None:
    proc = start(locustfile, "exit", stdout=subprocess.PIPE)
    out, _ = proc.communicate(timeout=60)  # EOF: the server keeps no copy of the streams
    assert proc.returncode == 7 and b"to stdout" in out
    child = seen(locustfile)
    assert child["cwd"] == str(locustfile.parent) == child["path0"] and child["env"] == "exit"
    assert child["argv"] == ["-f", str(locustfile), "--headless"]
    assert child["pgid"] == child["pid"] != proc.pid  # a session of its own


def test_a_signal_to_the_client_reaches_the_child_and_the_client_dies_of_it(locustfile: Path) -> None:
    proc = start(locustfile, "wait")
    child = seen(locustfile)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == -signal.SIGTERM
    assert gone(child["pid"])


def test_a_killed_client_takes_the_childs_process_group_with_it(locustfile: Path) -> None:
    proc = start(locustfile, "wait")
    child = seen(locustfile)
    proc.kill()
    proc.wait(timeout=10)
    assert gone(child["pid"])


def test_a_client_gone_before_it_reads_the_pid_leaves_the_server_serving(locustfile: Path) -> None:
    """A run_locust timed out (or a Ctrl-C) in a client's first milliseconds: the server kills that
    child, and serves the next client."""
    argv = forked([sys.executable, "-m", "locust", "-f", str(locustfile), "--headless"])
    body = json.dumps({"args": argv[5:], "cwd": str(locustfile.parent), "env": {**os.environ, "FORK_TEST": "wait"}})
    with socket.socket(socket.AF_UNIX) as sock:
        sock.connect(argv[4])
        fds = array.array("i", [0, 1, 2])
        sock.sendmsg([struct.pack("!I", len(body)) + body.encode()], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, fds)])
        child = seen(locustfile)  # its pid line came meanwhile, unread: the close resets the connection
    assert gone(child["pid"])
    (locustfile.parent / "seen.json").unlink()
    assert start(locustfile, "exit").wait(timeout=60) == 7
