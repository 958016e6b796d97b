"""`slogate worker`: on another machine, a Locust worker for every run of a master, each step of
`slogate capacity --expect-workers M` (launch/locust_worker.py's `work_for_master`, docs/capacity-workers.md)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from slogate.arguments import fail, port_number, positive_seconds
from slogate.launch.locust_command import LOCUST_MASTER_PORT, LOCUSTFILES
from slogate.launch.locust_worker import work_for_master
from slogate.slo.gate import exitcodes


def cmd_worker(args: argparse.Namespace) -> int:
    locustfile: str | Path = args.locustfile if args.locustfile in LOCUSTFILES else Path(args.locustfile)
    if isinstance(locustfile, Path) and not locustfile.is_file():
        return fail(f"--locustfile {args.locustfile}: no such file or locustfile name", exitcodes.USAGE)
    return work_for_master(
        args.master_host,
        args.master_port,
        locustfile=locustfile,
        extra=args.locust_args,
        idle_s=args.idle_timeout,
        say=lambda line: print(line, flush=True),
    )


def register(sub: Any) -> None:
    """`slogate worker`."""
    p = sub.add_parser(
        "worker",
        help="a Locust worker for each step of a master's runs, e.g. `slogate capacity --expect-workers` "
        "(docs/capacity-workers.md)",
        usage="slogate worker --master-host HOST [options] [-- LOCUST ARGS ...]",
        description="Runs `locust --worker` for each run of the master at --master-host, started again after each "
        "(Locust's workers exit when their master's run ends), until SIGTERM or Ctrl-C, or until no master has "
        "listened for --idle-timeout seconds; one line per run. The master sends the host, users, rate and workload "
        "options; Locust options after `--` (e.g. `-- --processes 4`: four workers here) go to each worker.",
    )
    p.add_argument("--master-host", required=True, help="the machine running `slogate capacity --expect-workers`")
    p.add_argument(
        "--master-port",
        type=port_number,
        default=LOCUST_MASTER_PORT,
        help=f"its --master-bind-port (default {LOCUST_MASTER_PORT})",
    )
    p.add_argument(
        "--locustfile",
        default="open-loop",
        help=f"the master's locustfile: a name ({', '.join(LOCUSTFILES)}) or a path (default open-loop, capacity's)",
    )
    p.add_argument(
        "--idle-timeout",
        type=positive_seconds,
        default=300.0,
        help="seconds without a master listening after which it stops (default 300)",
    )
    p.set_defaults(func=cmd_worker)
