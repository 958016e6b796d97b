"""Writes docs/options.md, the options reference, from the argument parsers themselves: every
option the Locust plugin and the locustfiles register (`init_command_line_parser`) and every
`slogate` subcommand's, with its default and help text. A test (tests/e2e/test_docs.py) fails when
the page and the parsers differ, so the reference cannot drift from the code.

    .venv/bin/python scripts/options_reference.py           # writes docs/options.md
    .venv/bin/python scripts/options_reference.py --check   # exit 1 when it is out of date
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import slogate.locustfiles.load.open_loop
import slogate.locustfiles.load.options
import slogate.locustfiles.load.stages
import slogate.slo
import slogate.slo.plugin.hooks
from locust import events
from locust.argument_parser import LocustArgumentParser

from slogate.cli import build_parser

PAGE = Path(__file__).resolve().parent.parent / "docs" / "options.md"
PACKAGE_ROOT = str(Path(slogate.slo.__file__).resolve().parent.parent) + "/"  # the same in any checkout or install
# The modules that register Locust options, in the page's order, with their section's title.
LOCUST_SECTIONS = {
    "slogate.slo.plugin.options": "The gate (every locustfile)",
    "slogate.locustfiles.load.options": "The workload (every locustfile)",
    "slogate.locustfiles.load.output_options": "Tool calls and structured output (every locustfile)",
    "slogate.locustfiles.load.cancel": "Cancellation (every locustfile)",
    "slogate.locustfiles.load.open_loop": "Open loop (`slogate locustfile open-loop`, `chat_open_loop.py`)",
    "slogate.locustfiles.load.stages": "Stages (`chat_open_loop_stages.py`)",
}
SUBCOMMANDS = ("run", "demo", "judge", "capacity", "compare", "launch", "serve-local", "validate")


def _cell(text: object) -> str:
    return str(text).replace("%%", "%").replace("|", "\\|").replace("\n", " ")


def _default(action: argparse.Action) -> str:
    if action.default in (None, argparse.SUPPRESS) or isinstance(action, argparse._HelpAction):
        return ""
    if isinstance(action, argparse._StoreTrueAction | argparse._StoreFalseAction):
        return "off" if action.default is False else "on"
    if action.default == "":
        return '`""`'
    default = str(action.default)
    if default.startswith(PACKAGE_ROOT):  # a file shipped with slogate: where it lies in the package
        default = default[len(PACKAGE_ROOT) :]
    return f"`{default}`"


def _table(actions: list[argparse.Action]) -> list[str]:
    lines = ["| option | default | meaning |", "|---|---|---|"]
    for action in actions:
        if not action.option_strings or isinstance(action, argparse._HelpAction) or action.help == argparse.SUPPRESS:
            continue
        names = ", ".join(f"`{name}`" for name in action.option_strings)
        lines.append(f"| {names} | {_default(action)} | {_cell(action.help or '')} |")
    return lines


def locust_sections() -> list[str]:
    out: list[str] = []
    handlers = {h.__module__: h for h in events.init_command_line_parser._handlers}
    unlisted = sorted(m for m in handlers if m.startswith("slogate.") and m not in LOCUST_SECTIONS)
    if unlisted:  # an option no page would show: the check fails rather than the page silently missing it
        raise SystemExit(f"options_reference.py: add {', '.join(unlisted)} to LOCUST_SECTIONS")
    for module, title in LOCUST_SECTIONS.items():
        parser = LocustArgumentParser()
        handlers[module](parser)
        out += [f"### {title}", "", *_table(parser._actions), ""]
    return out


def subcommand_sections() -> list[str]:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    out: list[str] = []
    for name in SUBCOMMANDS:
        command = sub.choices[name]
        positionals = [a.dest for a in command._actions if not a.option_strings and a.dest != "help"]
        usage = " ".join([f"slogate {name}", *(p.upper() for p in positionals)])
        out += [f"### `{usage}`", "", _cell(sub._choices_actions[list(sub.choices).index(name)].help or ""), ""]
        out += [*_table(command._actions), ""]
    return out


def render() -> str:
    lines = [
        "# Options reference",
        "",
        "<!-- Written by scripts/options_reference.py from the argument parsers; do not edit by hand. -->",
        "",
        "Generated from the parsers themselves (`scripts/options_reference.py`; a test fails when this",
        "page and the code differ). Locust options work on the command line, in `locust.conf` (without",
        "the leading `--`) and, for a web UI run, in its form; `slogate run` passes everything after",
        "`--` to Locust.",
        "",
        "## Locust options",
        "",
        *locust_sections(),
        "## `slogate` subcommands",
        "",
        *subcommand_sections(),
    ]
    return "\n".join(lines).rstrip("\n") + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="exit 1 when docs/options.md is out of date")
    text = render()
    if ap.parse_args().check:
        if PAGE.read_text() != text:
            sys.stderr.write(f"{PAGE} is out of date: run scripts/options_reference.py\n")
            return 1
        return 0
    PAGE.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
