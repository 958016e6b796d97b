"""The options as typed values (slo/plugin/settings.py, locustfiles/load/options.py): read from
Locust's parser once, sentinels as None, bad values refused in one line, a rerun's new values seen;
and no module outside the options modules reads Locust's parsed options."""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace

import pytest
from locust.argument_parser import LocustArgumentParser
from slogate.locustfiles.load import open_loop, options, stages
from slogate.slo.gate.spec import SloSpecError
from slogate.slo.plugin import options as gate_options
from slogate.slo.plugin.gate import Gate
from slogate.slo.plugin.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
OPTIONS_MODULES = {
    "slo/plugin/settings.py",
    "slo/plugin/parser.py",
    "slo/gate/option_values.py",
    "locustfiles/load/options.py",
}
READS = re.compile(r"parsed_options|getattr\(opts|\.options\b(?! import)|\"options\"|\bopts\.\w+")


def parse(*args: str) -> object:
    parser = LocustArgumentParser()
    gate_options.add_arguments(parser)
    options._add_arguments(parser)
    open_loop._add_arguments(parser)
    stages._add_arguments(parser)
    return parser.parse_args(list(args))


def test_the_defaults_read_as_typed_values_with_sentinels_as_none() -> None:
    settings = Settings.from_parsed(parse())
    assert settings.gate.slo_file is None and settings.gate.baseline is None
    assert settings.gate.warmup_s is None and settings.gate.min_samples is None  # the SLO file's
    assert settings.reports.report_dir == "slogate-report" and settings.reports.exports == ()
    assert settings.alerts.channel is None and not settings.early_stop.stop_when_decided
    workload = options.WorkloadOptions.from_parsed(parse())
    assert workload.trace is None and workload.config.unique_prefix_tokens is None and workload.config.model is None


def test_given_values_are_typed() -> None:
    given = ["--slo-warmup-s", "0", "--slo-min-samples", "7", "--slo-file", "s.yaml", "--export", "vllm-bench", "f"]
    settings = Settings.from_parsed(parse(*given))
    assert settings.gate.warmup_s == 0.0 and settings.gate.min_samples == 7  # 0 s of warm-up is not "none given"
    assert settings.reports.exports == (("vllm-bench", "f"),)
    early = Settings.from_parsed(parse(*given, "--slo-stop-when-decided", "--slo-correlated-requests")).early_stop
    assert early.stop_when_decided and early.correlated and not early.stop_when_failed
    early = Settings.from_parsed(parse(*given, "--slo-stop-when-failed", "--slo-correlated-requests")).early_stop
    assert early.stop_when_failed and early.correlated and not early.stop_when_decided
    moot = parse(*given, "--slo-stop-when-failed", "--slo-not-blocking", "p95")  # waits for no pass: accepted
    assert Settings.from_parsed(moot).early_stop.not_blocking == ("p95",)
    workload = options.WorkloadOptions.from_parsed(
        parse("--trace", "t.jsonl", "--trace-limit", "0", "--arrival-rate", "3", "--turns", "2-3")
    )
    assert workload.trace is not None and workload.trace.limit is None and not workload.config.prime_prefixes
    assert workload.arrivals.rate == 3.0 and workload.config.turns == (2, 3) and workload.turns == "2-3"


@pytest.mark.parametrize(
    ("args", "changed", "error"),
    [
        ([], {"slo_confidence": 1.5}, "--slo-confidence: must be in (0, 1)"),  # a config file, the web UI form
        (["--slo-not-blocking", "x"], {}, "--slo-not-blocking names what --slo-stop-when-decided"),
        (["--slo-stop-when-decided"], {}, "--slo-stop-when-decided decides the SLO file's objectives"),
        (["--slo-abort-on-fail", "--slo-file", "s.yaml"], {"slo_window_s": 0}, "--slo-window-s: must be > 0"),
        (["--slo-abort-on-fail", "--slo-file", "s.yaml", "--slo-interval-s", "0"], {}, "--slo-interval-s must be > 0"),
        (["--slo-abort-on-fail"], {}, "--slo-abort-on-fail judges the SLO file's objectives"),
        (["--slo-correlated-requests"], {}, "--slo-correlated-requests is how --slo-stop-when-decided (or -failed)"),
        (["--slo-stop-when-failed"], {}, "--slo-stop-when-failed decides the SLO file's objectives"),
        (
            ["--slo-stop-when-failed", "--slo-stop-when-decided", "--slo-file", "s.yaml"],
            {},
            "--slo-stop-when-failed is --slo-stop-when-decided without its passes: give one of them",
        ),
        (
            ["--slo-correlated-requests", "--slo-stop-when-decided", "--slo-file", "s.yaml", "--slo-interval-s", "0"],
            {},
            "--slo-correlated-requests measures the time series: --slo-interval-s must be > 0",
        ),
    ],
)
def test_a_bad_combination_is_one_line(args: list[str], changed: dict[str, float], error: str) -> None:
    opts = parse(*args)
    vars(opts).update(changed)
    with pytest.raises(SloSpecError, match=re.escape(error)):
        Settings.from_parsed(opts)


def test_a_bad_workload_option_is_one_line() -> None:
    with pytest.raises(ValueError, match="--turns"):
        options.WorkloadOptions.from_parsed(parse("--turns", "3-1"))


def test_a_rerun_reads_the_forms_new_values(tmp_path: Path) -> None:
    """The web UI form changes the parsed options between runs: the next configure sees them."""
    opts = parse("--slo-warmup-s", "2", "--slo-report-dir", str(tmp_path / "a"))
    gate = Gate(SimpleNamespace(parsed_options=opts, runner=None, host="http://h:1"))
    gate.configure(with_baseline=True)
    assert gate.warmup_s == 2.0 and gate.reports.report_dir == str(tmp_path / "a")
    opts.slo_warmup_s, opts.slo_report_dir = -1.0, str(tmp_path / "b")
    gate.configure(with_baseline=True)
    assert gate.warmup_s == 0.0 and gate.reports.report_dir == str(tmp_path / "b")


class Environment:
    """A Locust Environment's stand-in: its attributes, hashed by identity and weakly referenced as a
    real one is (the load library keeps each environment's options in a WeakKeyDictionary)."""

    def __init__(self, **attributes: object) -> None:
        self.__dict__.update(attributes)


def test_a_workload_option_is_read_again_for_each_run() -> None:
    opts = parse("--arrival-rate", "2")
    env = Environment(parsed_options=opts, runner=None, host="http://h:1")
    assert options.workload_options(env).arrivals.rate == 2.0
    opts.arrival_rate = 5.0  # the form, between runs
    assert options.workload_options(env).arrivals.rate == 2.0  # not within a run
    options._forget_options(env)  # test_stop
    assert options.workload_options(env).arrivals.rate == 5.0
    options._forget_options(env)


def test_only_the_options_modules_read_locusts_parsed_options() -> None:
    found = [
        f"{path.relative_to(ROOT)}:{n}: {line.strip()}"
        for folder in ("slo", "locustfiles", "launch")
        for path in sorted((ROOT / folder).rglob("*.py"))
        if str(path.relative_to(ROOT)) not in OPTIONS_MODULES
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if READS.search(line)
    ]
    assert not found, "read the typed options (slo/plugin/settings.py, locustfiles/load/options.py):\n" + "\n".join(
        found
    )
