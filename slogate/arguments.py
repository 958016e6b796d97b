"""How the `slogate` command reads its arguments: every error one line (`slogate: error: ...`, exit
2), numbers, ports and durations checked as they are parsed (slo/gate/option_values.py), a hint
for Locust's options given before `--`, and `slogate run -- --help`: Locust's help with every
option of the locustfile, which Locust's own `--help` cannot show (slo/plugin/parser.py)."""

from __future__ import annotations

import argparse
import math
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn

from slogate.launch.locust_command import locustfile_path
from slogate.slo.gate import exitcodes
from slogate.slo.gate.option_values import RULES, OptionError, check_duration, check_number
from slogate.slo.gate.report import public_command

# The subcommands that pass what follows `--` to Locust say so in their usage line, and in their
# help's first lines where those options are listed.
LOCUST_ARGS_COMMANDS = ("run", "demo", "compare", "capacity")
LOCUST_ARGS_USAGE = "slogate {command} [options] [-- LOCUST ARGS ...]"
LOCUST_ARGS_HELP = """\
Locust's options and slogate's own go after `--`, e.g. `slogate {command} ... -- --users 4 --run-time 60s`:
the workload (--shared-prefix-tokens, --max-tokens, --model, --turns, --dataset, --trace, ...), the SLO
gate (--slo-*), reports and live metrics (--export, --slo-metrics-port, ...) and Slack alerts (--slack-*).
`slogate {command} -- --help` lists them all, grouped (with `-f LOCUSTFILE`, that locustfile's too)."""


def fail(message: str, code: int) -> int:
    print(f"slogate: error: {message}", file=sys.stderr, flush=True)
    return code


class OneLineParser(argparse.ArgumentParser):
    """Errors as one line, exit 2, as every other slogate error (argparse's own: usage, then error)."""

    def error(self, message: str) -> NoReturn:
        fail(f"{message} (`{self.prog} --help`)", exitcodes.USAGE)
        sys.exit(exitcodes.USAGE)


def checked_number(rule_of: str, number: type[int] | type[float]) -> Callable[[str], float]:
    """An argparse type: a number the rule of `RULES[rule_of]` allows (the Locust option's own)."""

    def convert(text: str) -> float:
        value = number(text)
        try:
            check_number(RULES[rule_of], value)
        except OptionError as e:
            raise argparse.ArgumentTypeError(str(e).split(": ", 1)[1]) from None
        return value

    convert.__name__ = number.__name__  # argparse's "invalid int value: 'abc'"
    return convert


def count_at_least_one(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is no count: give a whole number, at least 1")
    return int(text)


def port_number(text: str) -> int:
    if not text.isdigit() or not 1 <= int(text) <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is no port: give a number from 1 to 65535")
    return int(text)


def positive_seconds(text: str) -> float:
    """A finite number of seconds > 0 (`slogate worker --idle-timeout`)."""
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not (value > 0 and math.isfinite(value)):
        raise argparse.ArgumentTypeError(f"{text!r} is no finite number of seconds > 0")
    return value


def duration(text: str) -> str:
    """A Locust duration (`--run-time`), passed on as it is."""
    try:
        check_duration("", text)
    except OptionError:
        raise argparse.ArgumentTypeError(f"{text!r} is no duration > 0: e.g. 90s, 5m or 1h30m") from None
    return text


def unrecognized(command: str, ours: list[str], unknown: list[str], locust_args: list[str]) -> int:
    """Options the subcommand does not take; for those that pass options to Locust, the command
    line with them after `--`, where Locust's and slogate's workload and gate options go."""
    message = f"unrecognized arguments: {public_command(unknown)}"
    if command not in LOCUST_ARGS_COMMANDS:
        return fail(f"{message} (`slogate {command} --help`)", exitcodes.USAGE)
    rest = list(ours)
    for token in unknown:
        rest.remove(token)
    fixed = public_command(["slogate", *rest, "--", *unknown, *locust_args])  # no secret of a --host shown
    return fail(f"{message}; Locust's and the workload's options go after `--`: {fixed}", exitcodes.USAGE)


def wants_locust_help(ours: list[str], locust_args: list[str]) -> bool:
    """`slogate run -- --help` (or demo, compare, capacity): no other argument is needed for it."""
    return bool(ours[:1]) and ours[0] in LOCUST_ARGS_COMMANDS and bool({"-h", "--help"} & set(locust_args))


def locust_help(command: str, locust_args: list[str]) -> int:
    """Print Locust's help with every option of the locustfile (-f; default the command's)."""
    with warnings.catch_warnings():  # gevent's: Locust patches it in late, harmless for printing help
        warnings.simplefilter("ignore")
        from slogate.slo.plugin.parser import locustfile_help

    locustfile = str(locustfile_path("open-loop" if command == "capacity" else "chat"))
    for i, arg in enumerate(locust_args):
        name, eq, value = arg.partition("=")
        if name in ("-f", "--locustfile"):
            locustfile = value if eq else locust_args[i + 1] if i + 1 < len(locust_args) else locustfile
    paths = [Path(p.strip()) for p in locustfile.split(",")]  # Locust's -f takes a comma-separated list
    missing = [str(p) for p in paths if not p.is_file()]
    if missing:
        return fail(f"-f {locustfile}: no such file: {', '.join(missing)}", exitcodes.USAGE)
    print(locustfile_help(paths, f"{LOCUST_ARGS_USAGE.format(command=command)}: the options below"))
    return 0
