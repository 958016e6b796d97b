"""A vLLM server as a child process group: start, wait for `/health`, stop without orphans.

vLLM runs its engine in child processes, so the server gets its own session (process group)
and `stop()` signals the whole group: SIGTERM, then SIGKILL after a grace period.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path


class ServerStartError(Exception):
    """The server could not start; str() is one line, `log_tail` has the server's last lines."""

    def __init__(self, message: str, log_tail: str = "") -> None:
        super().__init__(message)
        self.log_tail = log_tail


def port_is_free(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def is_healthy(url: str, timeout: float = 2.0) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=timeout) as resp:
            return resp.status == 200
    except (urllib.error.URLError, OSError, ValueError):
        return False


def tail(path: Path, lines: int = 20) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


class ServerProcess:
    """One server; use as a context manager or call `start()`, `wait_healthy()`, `stop()`."""

    def __init__(
        self,
        argv: Sequence[str],
        *,
        host: str,
        port: int,
        log_path: Path,
        env: dict[str, str] | None = None,
        cwd: Path | None = None,
    ) -> None:
        self.argv = list(argv)
        self.host, self.port = host, port
        self.log_path = log_path
        self.env = env
        self.cwd = cwd
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self) -> None:
        if not port_is_free(self.host, self.port):
            raise ServerStartError(f"port {self.port} on {self.host} is already in use; pick another with --port")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                self.argv,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env={**os.environ, **(self.env or {})},
                cwd=self.cwd,
                start_new_session=True,
            )

    def wait_healthy(self, timeout_s: float, poll_s: float = 0.25) -> float:
        """Seconds it took; raises `ServerStartError` (after stopping the server) on exit or timeout."""
        assert self.proc is not None, "start() first"
        started = time.monotonic()
        while True:
            code = self.proc.poll()
            if code is not None:
                self.stop()
                raise ServerStartError(
                    f"server exited with code {code} during startup (log: {self.log_path})", tail(self.log_path)
                )
            if is_healthy(self.url):
                return time.monotonic() - started
            if time.monotonic() - started > timeout_s:
                self.stop()
                raise ServerStartError(
                    f"server not healthy after {timeout_s:.0f} s (log: {self.log_path})", tail(self.log_path)
                )
            time.sleep(poll_s)

    def stop(self, grace_s: float = 20.0) -> int | None:
        """SIGTERM to the whole process group, SIGKILL after `grace_s`; returns the exit code."""
        proc = self.proc
        if proc is None:
            return None
        pgid = proc.pid  # start_new_session made the child a group leader
        try:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pgid, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=grace_s)
        finally:
            # Engine processes may outlive the API server; make sure the group is gone, also when a second
            # Ctrl-C or SIGTERM (a user pressing it twice, a CI runner's cancel) ends the grace period.
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pgid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=5)
        return proc.returncode

    def __enter__(self) -> ServerProcess:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
