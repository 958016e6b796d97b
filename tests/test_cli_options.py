"""Options every `slogate` subcommand spells alike (the parsers only: no run)."""

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
