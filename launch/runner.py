"""Run a gated Locust load and read its typed report, against a URL (`run_locust`) or against a
profile launched for it and stopped after (`run_profile`). `slogate compare`, `slogate capacity`
and the GPU sweep all go through here, so "start, load, stop, read the report" is written once.
Signals reach a Locust child through `Forwarder`, to its whole process group.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from slogate.launch import launcher
from slogate.launch.knee import NoReport
from slogate.launch.locust_command import locust_argv
from slogate.launch.profile import Profile
from slogate.slo.gate.report import Report, ReportError

LOG_NAME = "locust.log"
LOCAL_HOST = "127.0.0.1"  # where launched profiles listen
PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def dies_with_this_process() -> Callable[[], None] | None:
    """A `preexec_fn` that has the child sent SIGTERM when this process dies, however it dies
    (SIGKILL included): a Locust run nobody waits for any longer must not go on loading the server.
    SIGTERM, not SIGKILL: the run stops its load and writes its report (inconclusive). None where
    the kernel has no such thing (not Linux): there the child outlives a killed parent."""
    if not sys.platform.startswith("linux"):
        return None
    parent = os.getpid()
    prctl = ctypes.CDLL(None, use_errno=True).prctl

    def arm() -> None:  # runs in the child, between fork and exec
        signal.signal(signal.SIGTERM, signal.SIG_DFL)  # not the parent's handler (`slogate demo`'s), until exec
        prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
        if os.getppid() != parent:  # the parent died before the line above: no signal will come
            os._exit(1)  # nothing started yet, no load sent

    return arm


def read_report(report_dir: Path) -> Report:
    """The report a run wrote in `report_dir`; `NoReport` when there is none to read."""
    path = report_dir / "slo-report.json"
    try:
        return Report.from_json(json.loads(path.read_text()), str(path))
    except (OSError, ValueError, ReportError):
        log = report_dir / LOG_NAME
        if not log.exists():
            raise NoReport(f"the Locust run wrote no report in {report_dir} (its output is above)") from None
        lines = [line for line in log.read_text(errors="replace").splitlines() if line.strip()]
        said = f": {lines[-1].strip()}" if lines else ""
        raise NoReport(f"the Locust run wrote no report{said} (see {log})") from None


def run_in_foreground(argv: Sequence[str]) -> int:
    """Run Locust (`slogate run`, `slogate demo`) as the user's foreground job: SIGINT (Ctrl-C) and
    SIGTERM reach it once each, forwarded from here to its process group (`--processes` workers
    included, as a terminal would deliver them), and this process waits for it to judge and
    write its report, whatever it takes (a first signal stops the load and judges it inconclusive;
    a second ends it at once). The child has a session of its own, so a terminal's Ctrl-C is not
    delivered to it twice (once by the terminal, once forwarded); it is sent SIGTERM should this
    process die without forwarding anything (`dies_with_this_process`). Its exit code, or 128 + the
    signal that killed it, as shells report it."""
    child = subprocess.Popen(list(argv), start_new_session=True, preexec_fn=dies_with_this_process())
    with Forwarder(child):
        code = child.wait()
    return 128 - code if code < 0 else code


def signal_group(child: subprocess.Popen[bytes], signum: int) -> None:
    """Send `signum` to the process group `child` leads (`start_new_session`), as a terminal would:
    Locust's `--processes` parent ignores a first SIGINT (its forked workers are to get it), and on
    SIGTERM it quits at once and leaves them running (PDEATHSIG does not survive their fork)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(child.pid, signum)


class Forwarder:
    """While in use (`with`), SIGINT and SIGTERM are passed on to the process group of `child`
    (set it as each is started) and kept in `signals`. A signal that came while no child, or the
    one before, was set is the caller's to pass on (`signals`)."""

    def __init__(self, child: subprocess.Popen[bytes] | None = None) -> None:
        self.child = child
        self.signals: list[int] = []
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> Forwarder:
        self._previous = {sig: signal.signal(sig, self._forward) for sig in (signal.SIGINT, signal.SIGTERM)}
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)

    def _forward(self, signum: int, frame: object) -> None:
        self.signals.append(signum)
        if self.child is not None:
            signal_group(self.child, signum)


def run_locust(
    host: str,
    report_dir: Path,
    *,
    locustfile: str | Path = "chat",
    config: str | Path | None = None,
    slo_file: str | Path | None = None,
    extra: Sequence[str] = (),
    to_log: bool = True,
) -> Report:
    """One headless Locust run against `host` (`locust_argv` builds it), its report read back.
    Its output goes to `locust.log` in `report_dir` (or, `to_log` false, to this process's)."""
    report_dir.mkdir(parents=True, exist_ok=True)
    argv = locust_argv(
        host, locustfile=locustfile, config=config, slo_file=slo_file, report_dir=report_dir, extra=extra
    )
    if to_log:
        with open(report_dir / LOG_NAME, "wb") as log:
            subprocess.call(argv, stdout=log, stderr=subprocess.STDOUT, preexec_fn=dies_with_this_process())
    else:
        subprocess.call(argv, preexec_fn=dies_with_this_process())
    return read_report(report_dir)


@contextlib.contextmanager
def launched(
    profile: Profile | str,
    port: int,
    *,
    install: bool = True,
    validate: bool = False,
    on_progress: Callable[[str], None] | None = None,
) -> Iterator[launcher.Launched]:
    """A profile's server, healthy on 127.0.0.1:`port` for the block and stopped after it (errors
    as `launcher.start_profile` raises them; `validate` false: the caller checked the profile)."""
    started = launcher.start_profile(
        profile, LOCAL_HOST, port, install=install, validate=validate, on_progress=on_progress
    )
    try:
        yield started
    finally:
        started.server.stop()


def run_profile(
    profile: Profile,
    port: int,
    report_dir: Path,
    *,
    config: str | Path | None = None,
    slo_file: str | Path | None = None,
    extra: Sequence[str] = (),
    on_progress: Callable[[str], None] | None = None,
) -> Report:
    """Launch `profile`, run the gated load against it, stop it: the run's typed report."""
    with launched(profile, port, on_progress=on_progress) as started:
        return run_locust(started.server.url, report_dir, config=config, slo_file=slo_file, extra=extra, to_log=False)
