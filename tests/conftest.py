"""Shared fixtures: the fault server, the real vLLM CPU server, and a headless Locust runner.

`import locust` comes first: it monkey-patches the standard library for gevent, and must do so
before anything else imports sockets or threads.
"""

import locust  # noqa: F401  isort: skip

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
LOCUSTFILE = ROOT / "locustfiles" / "chat.py"
FAULT_SERVER = Path(__file__).parent / "fault_server.py"


def start_fault_server(log: Path) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen([sys.executable, str(FAULT_SERVER), "--log", str(log)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line.startswith("PORT "), f"fault server did not start: {line!r}"
    return proc, f"http://127.0.0.1:{int(line.split()[1])}"


@pytest.fixture(scope="session")
def fault_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    proc, url = start_fault_server(tmp_path_factory.mktemp("fault") / "requests.jsonl")
    yield url
    proc.terminate()
    proc.wait(timeout=10)


@pytest.fixture
def own_fault_server(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """A fault server of this test alone, with its log of answered requests (the ground truth)."""
    log = tmp_path / "answered.jsonl"
    proc, url = start_fault_server(log)
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


def run_locust(host: str, report_dir: Path, *args: str, timeout: float = 180, env: dict | None = None) -> LocustRun:
    argv = [
        sys.executable, "-m", "locust", "-f", str(LOCUSTFILE), "--host", host, "--headless",
        "--slo-report-dir", str(report_dir), "--only-summary", "--loglevel", "WARNING", *args,
    ]  # fmt: skip
    proc = subprocess.run(
        argv, capture_output=True, text=True, timeout=timeout, cwd=report_dir.parent, env={**os.environ, **(env or {})}
    )
    return LocustRun(proc.returncode, proc.stdout, proc.stderr, report_dir)


@pytest.fixture
def locust_run(tmp_path: Path):
    def run(host: str, *args: str, **kw: Any) -> LocustRun:
        return run_locust(host, tmp_path / "report", *args, **kw)

    return run


@pytest.fixture(scope="session")
def vllm_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The real vLLM CPU server with the tiny generated model, started once per session.

    Skipped when vLLM is not installed, unless SLOGATE_REQUIRE_VLLM=1 (CI sets it): then missing
    vLLM is a failure, never a silent skip.
    """
    from slogate.launch import launcher
    from slogate.launch.installation import InstallError
    from slogate.launch.profile import load_profile
    from slogate.launch.server import free_port

    profile = load_profile("cpu-tiny")
    try:
        vllm = launcher.locate_vllm(profile, install=False)
    except InstallError as e:
        if os.environ.get("SLOGATE_REQUIRE_VLLM") == "1":
            pytest.fail(f"vLLM required but not available: {e}")
        pytest.skip(f"vLLM not installed ({e}); run `slogate setup-cpu`")
    plan = launcher.plan(profile, vllm, "127.0.0.1", free_port())
    server = launcher.start(plan, log_path=tmp_path_factory.mktemp("vllm") / "server.log")
    try:
        server.wait_healthy(profile.health_timeout_s)
        yield server.url
    finally:
        server.stop()
