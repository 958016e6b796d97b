"""`slogate compare`: each profile launched in turn under the same gated load, the reports compared."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from slogate.arguments import LOCUST_ARGS_HELP, LOCUST_ARGS_USAGE, duration, port_number
from slogate.commands.common import DEMO_CONF, DEMO_SLO, add_report_dir, guarded, say
from slogate.launch import launcher
from slogate.launch.compare import run_comparison
from slogate.launch.profile import load_profile
from slogate.launch.runner import run_profile
from slogate.launch.validate import validate
from slogate.slo.gate.report import Report


def cmd_compare(args: argparse.Namespace) -> int:
    def run() -> int:
        profiles = [load_profile(name) for name in args.profiles]
        vllm = launcher.locate_vllm(profiles[0], install=True, on_progress=say)
        say(f"vLLM {validate(vllm, *profiles)}: every profile's arguments are valid")
        config = args.config or DEMO_CONF
        out = Path(args.report_dir)

        def run_one(name: str, report_dir: Path) -> Report:
            profile = next(p for p in profiles if p.name == name)  # validated above, one start of vLLM's parser
            extra = ["--run-time", args.run_time, *args.locust_args]
            return run_profile(
                profile, args.port, report_dir, config=config, slo_file=args.slo_file, extra=extra, on_progress=say
            )

        paths = run_comparison([p.name for p in profiles], out, run_one)
        assert paths["markdown"] is not None
        print(paths["markdown"].read_text())
        say(f"comparison in {out}/ (comparison.md, comparison.json{', ttft.png' if paths['png'] else ''})")
        return 0

    return guarded(run)


def register(sub: Any) -> None:
    """`slogate compare`."""
    p = sub.add_parser(
        "compare",
        help="launch each profile in turn, run the same load, compare the reports",
        usage=LOCUST_ARGS_USAGE.format(command="compare"),
        description=LOCUST_ARGS_HELP.format(command="compare"),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("profiles", nargs="+", help="two or more profile names or YAML files; the first is the reference")
    p.add_argument("--slo-file", default=str(DEMO_SLO), help="the SLOs every run is judged on (default: demo.yaml)")
    add_report_dir(p, "slogate-compare")
    p.add_argument(
        "--port", type=port_number, default=8011, help="the port each launched server listens on (default 8011)"
    )
    p.add_argument("--run-time", type=duration, default="60s", help="each run's Locust run time (default 60s)")
    p.add_argument("--config", help="a locust.conf for the workload (default: the embedded demo.conf)")
    p.set_defaults(func=cmd_compare)
