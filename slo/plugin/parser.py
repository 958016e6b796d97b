"""Locust's command line as slogate presents it: its options in named groups, every error one
`slogate: error:` line with a hint (exit 2), every value checked as soon as it is parsed, and the
help of a locustfile with its options.

`guard` runs where Locust parses its command line, before it forks `--processes`, connects workers
or sends anything: a value no run can use (slo/gate/option_values.py: a host without a scheme, a
negative rate) is refused there, once, with the report written, instead of failing per request.

`locustfile_help`: `locust -f LOCUSTFILE --help` cannot show a locustfile's options: Locust 2.47
prints its help before it imports the locustfile, so before its `init_command_line_parser` listeners
exist (locustio/locust#2917). `slogate run -- --help` prints it with them.
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn

from slogate.slo.gate import exitcodes
from slogate.slo.gate.judge import usage_error
from slogate.slo.gate.option_values import OptionError, check_host, check_options
from slogate.slo.gate.report import RunInfo, public_command, public_url
from slogate.slo.outputs.render import write_reports

HELP_HINT = "every option: `slogate run -- --help`"
_GUARDED = "_slogate_guarded"


def group(parser: Any, title: str) -> Callable[..., argparse.Action]:
    """`add_argument` of a new argument group of `parser`, keeping Locust's web UI flags, which
    only the parser's own `add_argument` takes (a group's would refuse them, and the options
    would leave the web UI form)."""
    container = parser.add_argument_group(title)

    def add(
        *names: str,
        include_in_web_ui: bool = True,
        is_secret: bool = False,
        is_required: bool = False,
        is_multiple: bool = False,
        **kwargs: Any,
    ) -> argparse.Action:
        action = container.add_argument(*names, **kwargs)
        action.include_in_web_ui = include_in_web_ui  # type: ignore[attr-defined]
        action.is_secret = is_secret  # type: ignore[attr-defined]
        action.is_required = is_required  # type: ignore[attr-defined]
        action.is_multiple = is_multiple  # type: ignore[attr-defined]
        return action

    return add


def guard(parser: Any) -> None:
    """Make `parser` (Locust's, built per command line) refuse bad input in one line, exit 2: its
    own errors (a mistyped option, `--users abc`) and values no run can use. Locust builds the
    parser itself, so its `error` and `parse_args` are replaced on the instance."""
    if getattr(parser, _GUARDED, False):
        return
    setattr(parser, _GUARDED, True)
    parse = parser.parse_args
    given: list[str] = []  # the command line being parsed, for the report of an error in it

    def error(message: str) -> NoReturn:
        message = f"{_public(message)}{_suggestion(parser, message)}"
        if "--worker" not in given:  # a worker's report would be nobody's
            _write_report(_report_dir(given) or parser.get_default("slo_report_dir"), None, message)
        _exit(f"{message} ({HELP_HINT})")

    def parse_args(args: Any = None, namespace: Any = None) -> Any:
        given[:] = sys.argv[1:] if args is None else list(args)
        opts = parse(args, namespace)
        try:
            check_options(opts)
        except OptionError as e:
            if not getattr(opts, "worker", False):
                _write_report(getattr(opts, "slo_report_dir", None), getattr(opts, "host", None), str(e))
            _exit(str(e))
        return opts

    parser.error = error
    parser.parse_args = parse_args


def _public(message: str) -> str:
    """An argparse message fit for stderr and the report: the arguments it quotes (`unrecognized
    arguments: --api-keyy s3cret`) as `public_command` shows a command line, secrets masked."""
    head, found, rest = message.partition("unrecognized arguments:")
    return f"{head}{found} {public_command(rest.split())}" if found else message


def _suggestion(parser: Any, message: str) -> str:
    """For an unknown option: the known one closest to it, as Locust's own parser suggests."""
    _, found, rest = message.partition("unrecognized arguments:")
    if not found or not rest.split():
        return ""
    known = [name for action in parser._actions for name in action.option_strings]
    close = difflib.get_close_matches(rest.split()[0].split("=")[0], known, n=1)
    return f"; did you mean {close[0]}?" if close else ""


def _exit(message: str) -> NoReturn:
    sys.stderr.write(f"slogate: error: {message}\n")
    sys.exit(exitcodes.USAGE)


def _report_dir(args: list[str]) -> str | None:
    """The report folder a command line names (its last --slo-report-dir or --report-dir)."""
    found = None
    for i, arg in enumerate(args):
        name, eq, value = arg.partition("=")
        if name in ("--slo-report-dir", "--report-dir"):
            found = value if eq else (args[i + 1] if i + 1 < len(args) else found)
    return found


def _write_report(report_dir: str | None, host: str | None, message: str) -> None:
    """The error report of a refused command line, where it can be written."""
    if not report_dir:
        return
    try:
        check_host(host, required=False)
        target = public_url(host)
    except OptionError:
        target = None  # the host is what was refused
    with contextlib.suppress(OSError):  # the line on stderr says it all
        write_reports(usage_error(message, RunInfo(target=target)), report_dir)


def locustfile_help(locustfiles: Sequence[Path], usage: str) -> str:
    """Locust's help with every option the `locustfiles` register, grouped, after a `usage` line."""
    from locust.argument_parser import get_parser
    from locust.util.load_locustfile import load_locustfile

    for path in locustfiles:
        load_locustfile(str(path))  # registers its options (init_command_line_parser)
    return f"usage: {usage}\n{get_parser().format_help()}"
