"""The `slogate` command: set up, serve, load, gate.

slogate demo                       # everything on this machine: vLLM CPU + demo model + gated run
slogate run --host URL --slo-file slo.yaml [-- LOCUST ARGS]
slogate locustfile [chat|open-loop|openai|trace]   # its path, for `locust -f $(slogate locustfile)`
slogate judge RESULT --slo-file slo.yaml     # a saved report, a killed run's directory, a vllm bench result
slogate capacity --host URL --slo-file slo.yaml [--min-capacity R] [-- LOCUST ARGS]   # the knee
slogate serve-local | launch PROFILE [--dry-run]
slogate validate PROFILE...                  # seed-mistake rules, and any installed vLLM's parser
slogate model make DIR [--size demo|tiny]
slogate setup-cpu
"""

from __future__ import annotations

import argparse
import importlib.metadata
import sys

from slogate.arguments import OneLineParser, locust_help, unrecognized, wants_locust_help
from slogate.commands import capacity, compare, judge, load, servers, worker


def _version() -> str:
    try:
        return importlib.metadata.version("slogate")
    except importlib.metadata.PackageNotFoundError:  # a checkout that was never installed
        return "unknown (not installed)"


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="slogate", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"slogate {_version()}")
    sub = parser.add_subparsers(dest="command", required=True)

    for commands in (load, compare, capacity, judge, servers, worker):
        commands.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Arguments after the first `--` go to Locust unchanged (for `run`, `compare` and `capacity`)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    split = argv.index("--") if "--" in argv else len(argv)
    ours, locust_args = argv[:split], argv[split + 1 :]
    if wants_locust_help(ours, locust_args):
        return locust_help(ours[0], locust_args)
    args, unknown = build_parser().parse_known_args(ours)
    if unknown:
        return unrecognized(args.command, ours, unknown, locust_args)
    args.locust_args = locust_args
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
