"""What the subcommands share: progress lines, launch errors as one line and an exit code, the
embedded demo workload and SLOs, and the `--report-dir` option."""

from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path

import slogate.slo
from slogate.arguments import fail
from slogate.launch import launcher
from slogate.launch.knee import NoReport
from slogate.launch.locust_command import LOCUSTFILE_DIR
from slogate.launch.server import ServerStartError
from slogate.slo.gate import exitcodes

DEMO_CONF = LOCUSTFILE_DIR / "demo.conf"
DEMO_SLO = Path(slogate.slo.__file__).parent / "defaults" / "demo.yaml"


def say(message: str) -> None:
    print(f"slogate: {message}", file=sys.stderr, flush=True)


def report_launch_error(e: Exception) -> int:
    """The exit code of a launch error, after the server log's tail (where it has one) on stderr."""
    if isinstance(e, ServerStartError) and e.log_tail:
        print(e.log_tail, file=sys.stderr)
    return launcher.launch_exit_code(e)


def guarded(run) -> int:  # type: ignore[no-untyped-def]
    """Run `run()` turning known failures into one-line errors and distinct exit codes."""
    try:
        return run()
    except tuple(launcher.LAUNCH_ERRORS) as e:
        return fail(str(e), report_launch_error(e))
    except NoReport as e:
        return fail(str(e), exitcodes.INCONCLUSIVE)


def sigterm_as_interrupt() -> None:
    def handler(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, handler)


def add_report_dir(p: argparse.ArgumentParser, default: str) -> None:
    """Where a subcommand writes: `--report-dir` on every one; `--slo-report-dir` (Locust's and
    `judge`'s spelling) and `--out` (capacity's and compare's) are accepted everywhere too."""
    p.add_argument(
        "--report-dir",
        "--slo-report-dir",
        "--out",
        dest="report_dir",
        default=default,
        help=f"the folder the reports go to (default {default}; also spelled --slo-report-dir or --out)",
    )
