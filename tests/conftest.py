"""Shared fixtures: the fault server, the real vLLM CPU server, and a headless Locust runner.

`import locust` comes first: it monkey-patches the standard library for gevent, and must do so
before anything else imports sockets or threads.
"""

import locust  # noqa: F401  isort: skip

import contextlib
import json
import os
import signal
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from slogate.launch import fault_server as fault
from slogate.launch.locust_command import locust_argv, locustfile_path
from slogate.launch.server import free_port

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data"  # recorded streams, scrapes, reports, traces
LOCUSTFILE = locustfile_path("chat")


@pytest.fixture(scope="session")
def fault_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    proc, url = fault.spawn(tmp_path_factory.mktemp("fault") / "requests.jsonl")
    yield url
    proc.terminate()
    proc.wait(timeout=10)


@pytest.fixture
def own_fault_server(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """A fault server of this test alone, with its log of answered requests (the ground truth)."""
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


def run_locust(
    host: str,
    report_dir: Path,
    *args: str,
    locustfile: str | Path = "chat",
    timeout: float = 180,
    env: dict | None = None,
) -> LocustRun:
    """A headless Locust run in a subprocess; `args` are more Locust and workload options.

    It ends when the Locust process does: output goes to files, not pipes, which the workers of
    `--processes` can hold open long after (with `--stop-timeout` they wait 60 s for the gone
    master's heartbeat); whatever is left of its process group then is killed.
    """
    extra = ["--only-summary", "--loglevel", "WARNING", *args]
    if "--processes" in args and "--master-bind-port" not in args:  # not Locust's fixed 5557: runs may overlap
        port = str(free_port())
        extra += ["--master-bind-port", port, "--master-port", port]
    argv = locust_argv(host, locustfile=locustfile, report_dir=report_dir, extra=extra)
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


def start_cpu_tiny(log_path: Path) -> Any:
    """The cpu-tiny vLLM server on a free port (a `Launched`); skipped when vLLM is not installed,
    unless SLOGATE_REQUIRE_VLLM=1 (CI sets it): then missing vLLM is a failure, never a silent skip."""
    from slogate.launch.installation import InstallError
    from slogate.launch.launcher import start_profile

    try:
        return start_profile("cpu-tiny", "127.0.0.1", free_port(), install=False, validate=False, log_path=log_path)
    except InstallError as e:
        if os.environ.get("SLOGATE_REQUIRE_VLLM") == "1":
            pytest.fail(f"vLLM required but not available: {e}")
        pytest.skip(f"vLLM not installed ({e}); run `slogate setup-cpu`")


@pytest.fixture(scope="session")
def vllm_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The real vLLM CPU server with the tiny generated model, started once per session.

    Skipped when vLLM is not installed, unless SLOGATE_REQUIRE_VLLM=1 (CI sets it): then missing
    vLLM is a failure, never a silent skip. Not validated here: tests/launch/test_validate.py checks the
    built-in profiles with the installed parser.
    """
    launched = start_cpu_tiny(tmp_path_factory.mktemp("vllm") / "log")
    try:
        yield launched.server.url
    finally:
        launched.server.stop()
