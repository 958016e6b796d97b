"""Options every `slogate` subcommand spells alike (the parsers only: no run)."""

import argparse

import pytest
from locust.argument_parser import LocustArgumentParser
from slogate.slo.plugin.options import add_arguments

from slogate.cli import build_parser

SUBCOMMANDS = {
    "run": ["run", "--host", "http://h"],
    "demo": ["demo"],
    "judge": ["judge", "r.json", "--slo-file", "s.yaml"],
    "capacity": ["capacity", "--host", "http://h", "--slo-file", "s.yaml"],
    "compare": ["compare", "a", "b"],
}


@pytest.mark.parametrize("spelling", ["--report-dir", "--slo-report-dir", "--out"])
@pytest.mark.parametrize("command", sorted(SUBCOMMANDS))
def test_the_output_folder_has_one_spelling_everywhere_and_the_old_ones_still_work(command, spelling) -> None:
    args = build_parser().parse_args([*SUBCOMMANDS[command], spelling, "here"])
    assert args.report_dir == "here"


def test_the_locust_plugin_takes_report_dir_too() -> None:
    parser = LocustArgumentParser()
    add_arguments(parser)
    assert parser.parse_args(["--report-dir", "here"]).slo_report_dir == "here"


def _subparsers(parser: argparse.ArgumentParser, name: str = "slogate") -> list[tuple[str, argparse.ArgumentParser]]:
    out = [(name, parser)]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub_name, sub in action.choices.items():
                out += _subparsers(sub, f"{name} {sub_name}")
    return out


def test_every_option_and_argument_of_every_subcommand_has_help() -> None:
    missing = [
        f"{name} {action.option_strings or action.dest}"
        for name, parser in _subparsers(build_parser())
        for action in parser._actions
        if not isinstance(action, argparse._HelpAction | argparse._SubParsersAction) and not action.help
    ]
    assert not missing, missing


def test_version_and_the_usage_lines_say_what_goes_after_the_double_dash(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        build_parser().parse_args(["--version"])
    assert done.value.code == 0 and capsys.readouterr().out.startswith("slogate ")
    commands = dict(_subparsers(build_parser()))
    for name in ("run", "demo", "capacity", "compare"):
        assert "[-- LOCUST ARGS ...]" in commands[f"slogate {name}"].format_usage()
    assert "trace" in commands["slogate locustfile"].format_help()
