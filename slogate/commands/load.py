"""`slogate run`, `slogate demo` and `slogate locustfile`: a gated Locust run in the foreground
(against --host, or against the demo model served for it), and the installed locustfiles."""

from __future__ import annotations

import argparse
import os
from typing import Any

from slogate.arguments import LOCUST_ARGS_HELP, LOCUST_ARGS_USAGE, duration, port_number
from slogate.commands.common import DEMO_CONF, DEMO_SLO, add_report_dir, guarded, say, sigterm_as_interrupt
from slogate.launch import launcher
from slogate.launch.locust_command import LOCUSTFILES, locust_argv, locustfile_path
from slogate.launch.runner import run_in_foreground
from slogate.slo.gate import exitcodes


def cmd_run(args: argparse.Namespace) -> int:
    config = args.config or DEMO_CONF
    argv = locust_argv(
        args.host, config=config, slo_file=args.slo_file, report_dir=args.report_dir, extra=args.locust_args
    )
    return run_in_foreground(argv)


def cmd_locustfile(args: argparse.Namespace) -> int:
    print(locustfile_path(args.name))
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    def run() -> int:
        sigterm_as_interrupt()
        server = launcher.start_profile(args.profile, "127.0.0.1", args.port, install=True, on_progress=say).server
        try:
            argv = locust_argv(
                server.url,
                config=DEMO_CONF,
                slo_file=args.slo_file,
                report_dir=args.report_dir,
                extra=["--run-time", args.run_time] if args.run_time else [],
            )
            say(f"running: {' '.join(argv[1:])}")
            return run_in_foreground(argv)
        except KeyboardInterrupt:
            return exitcodes.INCONCLUSIVE
        finally:
            say("stopping the server")
            server.stop()

    return guarded(run)


def register(sub: Any) -> None:
    """The subcommands that run a gated load in the foreground."""
    p = sub.add_parser(
        "demo",
        help="serve the CPU demo model, run a short gated load, stop",
        usage=LOCUST_ARGS_USAGE.format(command="demo"),
        description=LOCUST_ARGS_HELP.format(command="demo"),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--profile", default="cpu-demo", help="the deployment profile to serve (default cpu-demo)")
    p.add_argument(
        "--port",
        type=port_number,
        default=int(os.environ.get("SLOGATE_DEMO_PORT", "8011")),
        help="the server's port (default 8011, or $SLOGATE_DEMO_PORT)",
    )
    p.add_argument("--slo-file", default=str(DEMO_SLO), help="the SLOs to gate on (default: the embedded demo.yaml)")
    add_report_dir(p, "slogate-report")
    p.add_argument("--run-time", type=duration, help="Locust run time, e.g. 90s or 5m (default: demo.conf's)")
    p.set_defaults(func=cmd_demo)

    p = sub.add_parser(
        "run",
        help="headless Locust run with the SLO gate against --host",
        usage=LOCUST_ARGS_USAGE.format(command="run"),
        description=LOCUST_ARGS_HELP.format(command="run"),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--host", required=True, help="base URL of the OpenAI-compatible server")
    p.add_argument("--slo-file", help="the SLOs to gate on (none: measured, not gated)")
    add_report_dir(p, "slogate-report")
    p.add_argument("--config", help="a locust.conf (default: the embedded demo.conf)")
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("locustfile", help="print the path of an installed locustfile (for `locust -f`)")
    p.add_argument(
        "name",
        nargs="?",
        choices=list(LOCUSTFILES),
        default="chat",
        help=f"one of {', '.join(LOCUSTFILES)} (default chat)",
    )
    p.set_defaults(func=cmd_locustfile)
