"""The one builder of `python -m locust` command lines (the CLI, the GPU sweep and the tests use it):
a run (`locust_argv`), a worker of another machine's run (`worker_argv`), and the Locust options
that spread an open-loop rate over worker processes (`Workers`).

The locustfiles are part of the installed package (`slogate.locustfiles`), so a pip user without
a checkout finds them here, by name; `slogate locustfile NAME` prints the path.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import slogate.locustfiles

LOCUSTFILE_DIR = Path(slogate.locustfiles.__file__).resolve().parent
LOCUSTFILES = {
    "chat": "chat.py",
    "open-loop": "chat_open_loop.py",
    "openai": "chat_openai.py",
    "trace": "chat_trace.py",
}


def locustfile_path(name: str) -> Path:
    """The installed locustfile called `name` (a key of `LOCUSTFILES`)."""
    if name not in LOCUSTFILES:
        raise ValueError(f"no locustfile named {name!r} (choose one of {', '.join(LOCUSTFILES)})")
    return LOCUSTFILE_DIR / LOCUSTFILES[name]


def locust_argv(
    host: str,
    *,
    locustfile: str | Path = "chat",
    config: str | Path | None = None,
    slo_file: str | Path | None = None,
    report_dir: str | Path = "slogate-report",
    headless: bool = True,
    extra: Sequence[str] = (),
) -> list[str]:
    """`locustfile` is a name of `LOCUSTFILES` or, as a `Path`, any locustfile. `extra` (more
    Locust or workload options) goes last: an option repeated there wins."""
    argv = _locust(locustfile)
    if config:
        argv += ["--config", str(config)]
    argv += ["--host", host, *(["--headless"] if headless else []), "--slo-report-dir", str(report_dir)]
    if slo_file:
        argv += ["--slo-file", str(slo_file)]
    return [*argv, *extra]


def worker_argv(
    master_host: str, master_port: int, *, locustfile: str | Path = "open-loop", extra: Sequence[str] = ()
) -> list[str]:
    """A Locust worker of the master at `master_host`:`master_port` (`slogate worker`): its host,
    users, rate and workload options come from the master when its run starts."""
    return [*_locust(locustfile), "--worker", "--master-host", master_host, "--master-port", str(master_port), *extra]


def _locust(locustfile: str | Path) -> list[str]:
    path = locustfile_path(locustfile) if isinstance(locustfile, str) else locustfile
    return [sys.executable, "-m", "locust", "-f", str(path)]


LOCUST_MASTER_PORT = 5557  # Locust's default --master-bind-port


@dataclass(frozen=True, slots=True)
class Workers:
    """Where a step's open-loop users run: one user per worker process, each sending rate / users,
    so that the offered rate is exact across them. `processes` forked on this machine (Locust's
    `--processes`; 1: the run's own process, no workers), or `expect` workers started elsewhere
    (`slogate worker` on other machines, each Locust process it runs one worker) that the run, a
    master, waits for at `bind_host`:`bind_port`, for `max_wait_s` at most."""

    processes: int = 1
    expect: int = 0
    bind_host: str = "*"
    bind_port: int = LOCUST_MASTER_PORT
    max_wait_s: float = 120.0

    def __post_init__(self) -> None:
        if self.processes < 1 or self.expect < 0 or (self.processes > 1 and self.expect):
            raise ValueError(f"Workers: processes >= 1 here or expect > 0 elsewhere, not both ({self})")

    @property
    def users(self) -> int:
        """Open-loop users: one per worker process."""
        return self.expect or self.processes

    def step_args(self, rate: float) -> list[str]:
        """The Locust options of a run offering `rate` requests/s in all over these workers."""
        users = self.users
        argv = ["--users", str(users), "--spawn-rate", str(users), "--arrival-rate", f"{rate / users:.9g}"]
        if self.expect:
            return [
                *argv, "--master", "--expect-workers", str(self.expect), "--expect-workers-max-wait",
                f"{self.max_wait_s:g}", "--master-bind-host", self.bind_host, "--master-bind-port", str(self.bind_port),
            ]  # fmt: skip
        return [*argv, *(["--processes", str(self.processes)] if self.processes > 1 else [])]


ONE_PROCESS = Workers()  # a step's one open-loop user in the run's own process
