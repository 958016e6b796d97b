"""The SLO file, the verdict and the report files, without any server."""

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from slogate.slo.gate import exitcodes
from slogate.slo.gate.evaluate import evaluate
from slogate.slo.gate.judge import judge, usage_error
from slogate.slo.gate.metrics import MetricsStore
from slogate.slo.gate.record import RequestRecord
from slogate.slo.gate.report import Report, RunInfo, public_url
from slogate.slo.gate.spec import SloSpecError, load_spec, parse_spec
from slogate.slo.outputs.render import write_reports

from tests.conftest import ROOT

SPEC = {
    "slos": [
        {"name": "ttft-p95", "metric": "ttft", "percentile": 95, "max_ms": 200, "class": "shared"},
        {"name": "errors", "metric": "error_rate", "max": 0.01},
    ],
    "min_samples": 20,
    "warmup_s": 2,
}


def store_with(ttft_ms: float, n: int, cls: str = "shared") -> MetricsStore:
    store = MetricsStore()
    for i in range(n):
        store.add(RequestRecord(cls, 100.0 + i, e2e_us=int(ttft_ms * 1000) + 1000, ttft_us=int(ttft_ms * 1000)))
    return store


def test_a_valid_file_parses_into_typed_objectives(tmp_path: Path) -> None:
    f = tmp_path / "slo.yaml"
    f.write_text(
        "slos:\n  - {name: ttft-p95, metric: ttft, percentile: 95, max_ms: 200, class: shared}\n"
        "  - {metric: output_tokens_per_s, min: 5}\nmin_samples: 20\nwarmup_s: 2.5\n"
    )
    spec = load_spec(f)
    assert spec.min_samples == 20 and spec.warmup_s == 2.5
    first, second = spec.objectives
    assert (first.metric, first.percentile, first.max, first.request_class) == ("ttft", 95, 200, "shared")
    assert second.name == "output_tokens_per_s-all" and second.min == 5
    assert first.describe() == "p95 ttft[shared] <= 200 ms"


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        ({"slos": [{"metric": "ttft", "percentile": 95}]}, "slos[0]: field 'max_ms': required"),
        ({"slos": [{"name": "a", "metric": "ttfb", "max_ms": 1}]}, "slos[0] (a): field 'metric': 'ttfb' is not one of"),
        ({"slos": [{"metric": "ttft", "percentile": 150, "max_ms": 200}]}, "field 'percentile': must be <= 100"),
        ({"slos": [{"metric": "ttft", "percentile": "p95", "max_ms": 200}]}, "field 'percentile': must be a number"),
        (
            {"slos": [{"metric": "ttft", "percentile": 95, "max": 200}]},
            "unknown field 'max' for metric 'ttft' (latency",
        ),
        ({"slos": [{"metric": "error_rate", "max": 2}]}, "slos[0]: field 'max': must be <= 1"),
        ({"slos": [{"metric": "error_rate"}]}, "field 'max' or 'min': one is required"),
        ({"slos": []}, "field 'slos': must be a non-empty list"),
        (
            {"slos": [{"metric": "e2e", "percentile": 50, "max_ms": 9}], "min_samples": 0},
            "field 'min_samples': must be >= 1",
        ),
        ({"slo": []}, "unknown top-level field 'slo'"),
        (
            {
                "slos": [
                    {"name": "x", "metric": "e2e", "percentile": 50, "max_ms": 9},
                    {"name": "x", "metric": "error_rate", "max": 0},
                ]
            },
            "duplicate name 'x'",
        ),
    ],
)
def test_malformed_entries_name_the_file_entry_and_field(data: dict, expected: str) -> None:
    with pytest.raises(SloSpecError) as err:
        parse_spec(data, "gate.yaml")
    message = str(err.value)
    assert message.startswith("gate.yaml: ") and expected in message and "\n" not in message


def test_broken_yaml_names_the_line(tmp_path: Path) -> None:
    f = tmp_path / "bad.yaml"
    f.write_text("slos:\n  - {metric: ttft, percentile: 95\n")
    with pytest.raises(SloSpecError, match=r"bad.yaml: not valid YAML at line \d+"):
        load_spec(f)


def test_missing_file_is_a_one_line_error(tmp_path: Path) -> None:
    with pytest.raises(SloSpecError, match="cannot read SLO file"):
        load_spec(tmp_path / "nope.yaml")


def test_pass_fail_and_inconclusive_map_to_exit_codes() -> None:
    spec = parse_spec(SPEC)
    assert evaluate(spec, store_with(150, 50)).exit_code == exitcodes.PASS
    failing = evaluate(spec, store_with(250, 50))
    assert failing.status == "fail" and failing.exit_code == exitcodes.FAIL
    assert [r.result for r in failing.results] == ["fail", "pass"]
    short = evaluate(spec, store_with(150, 5))
    assert short.status == "inconclusive" and short.exit_code == exitcodes.INCONCLUSIVE
    assert "ttft-p95 has 5 (min_samples 20)" in short.reasons[0]


def test_an_objective_on_a_class_with_no_data_is_inconclusive() -> None:
    assert evaluate(parse_spec(SPEC), store_with(150, 50, cls="unique")).status == "inconclusive"


def test_run_problems_make_even_a_failing_run_inconclusive() -> None:
    verdict = evaluate(parse_spec(SPEC), store_with(250, 50), ["load generator saturated"])
    assert verdict.status == "inconclusive" and verdict.reasons[0] == "load generator saturated"


def test_the_boundary_value_passes() -> None:
    spec = parse_spec({"slos": [{"metric": "error_rate", "max": 0.5}]})
    store = store_with(10, 2)
    store.add(RequestRecord("shared", 1.0, e2e_us=1, error_kind="http_5xx"))
    store.add(RequestRecord("shared", 1.0, e2e_us=1, error_kind="http_5xx"))
    assert evaluate(spec, store).status == "pass"  # 2 of 4 failed: 0.5 <= 0.5


@pytest.mark.parametrize("ttft_ms", [150, 250])
def test_reports_are_written_and_parse(tmp_path: Path, ttft_ms: float, monkeypatch: pytest.MonkeyPatch) -> None:
    summary = tmp_path / "step-summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    store = store_with(ttft_ms, 50)
    report = judge(parse_spec(SPEC), store, RunInfo(target=public_url("http://user:pw@host:8000/x?key=s3cret")))
    paths = write_reports(report, tmp_path / "out")
    data = json.loads(paths["json"].read_text())
    assert data["verdict"] == ("pass" if ttft_ms < 200 else "fail")
    assert data["run"]["target"] == "http://host:8000/x"
    shared = data["metrics"]["shared"]["ttft_ms"]
    assert set(shared) >= {"p50", "p90", "p95", "p99", "max", "count"} and shared["count"] == 50
    assert data["slos"][0]["observed"] == pytest.approx(ttft_ms, rel=0.002)
    suite = ET.parse(paths["junit"]).getroot()
    assert suite.get("tests") == "2" and suite.get("failures") == ("0" if ttft_ms < 200 else "1")
    md = paths["markdown"].read_text()
    assert "| shared |" in md and "ttft-p95" in md
    assert md.startswith(f"## slogate: {data['verdict'].upper()} (exit {data['exit_code']})")
    assert summary.read_text().strip() == md.strip()


def test_a_usage_error_still_writes_parseable_reports(tmp_path: Path) -> None:
    paths = write_reports(usage_error("slo.yaml: slos[0]: field 'x'"), tmp_path)
    data = json.loads(paths["json"].read_text())
    assert (data["verdict"], data["exit_code"]) == ("error", 2)
    assert ET.parse(paths["junit"]).getroot().get("errors") == "1"


def test_without_an_slo_file_the_headline_matches_the_exit_code() -> None:
    ungated = judge(None, store_with(100, 5), RunInfo())
    assert (ungated.verdict, ungated.exit_code) == ("ungated", 0)
    unreachable = MetricsStore()
    unreachable.add(RequestRecord("shared", 1.0, e2e_us=1, error_kind="connect"))
    doubtful = judge(None, unreachable, RunInfo())
    assert (doubtful.verdict, doubtful.exit_code) == ("inconclusive", 3)
    assert any("target unreachable" in r for r in doubtful.reasons)


def test_a_saved_report_judges_again_to_the_same_verdict_and_figures() -> None:
    spec = parse_spec(SPEC)
    store = store_with(150, 30)
    store.add(RequestRecord("unique", 200.0, e2e_us=400_000, ttft_us=390_000, completion_tokens=8, prompt_tokens=90))
    store.add(RequestRecord("unique", 201.0, e2e_us=1, error_kind="http_5xx"))
    run = RunInfo(target="http://h:1", model="m", workload={"seed": 1}, processes=2, max_client_lag_ms=7)
    live = judge(spec, store, run)
    saved = Report.from_json(json.loads(json.dumps(live.to_json())))
    again = judge(spec, saved.measurements, saved.run, saved.server)
    assert again.to_json() | {"generated_at": ""} == live.to_json() | {"generated_at": ""}


def test_a_report_of_the_first_schema_still_loads_as_a_baseline() -> None:
    store = store_with(120, 40)
    legacy = {
        "schema": "slogate.report/1",
        "verdict": "pass",
        "run": {"model": "m", "workload": {}},
        "metrics": {"shared": {"requests": 40, "failures": 0, "duration_s": 39.0}},
        "histograms": {c: {"ttft": store.get(c).latency["ttft"].encode()} for c in ("all", "shared")},
    }
    report = Report.from_json(legacy)
    assert report.measurements.get("all").latency["ttft"].count == 40 and report.measurements.get("all").requests == 40


@pytest.mark.parametrize(("cpu_s", "busy_machine"), [(2.0, True), (9.0, False)])
def test_the_self_check_tells_a_busy_machine_from_a_saturated_generator(cpu_s: float, busy_machine: bool) -> None:
    """Event-loop lag with little CPU of its own: other processes held the cores, and more load
    processes would not help; with its own CPU near a core, they would."""
    from slogate.slo.gate.self_check import assess

    store = store_with(100, 50)
    for _ in range(200):
        store.loop_lag.record_ms(30)
    store.client_cpu_s, store.client_wall_s = cpu_s, 10.0
    saturation = assess(store, cpu_warning=False, processes=1)
    assert saturation is not None and saturation.client_delay_ms >= 30
    assert ("machine was busy" in saturation.message) is busy_machine
    assert ("--processes 2" in saturation.message) is not busy_machine
    report = judge(parse_spec(SPEC), store, RunInfo())
    assert report.to_json()["self_check"]["client_cpu_per_process"] == cpu_s / 10


def test_dropped_sends_leave_a_fail_standing_and_make_only_a_pass_inconclusive() -> None:
    """Overload is not inconclusive: sends dropped at --max-in-flight could only have been slower."""
    from slogate.slo.gate.record import ErrorKind

    spec = parse_spec(SPEC)
    for ttft_ms, verdict in ((250, "fail"), (150, "inconclusive")):
        store = store_with(ttft_ms, 50)
        store.add(RequestRecord("shared", 150.0, e2e_us=0, error_kind=ErrorKind.DROPPED))
        report = judge(spec, store, RunInfo())
        assert report.verdict == verdict and any("1 scheduled requests were dropped" in r for r in report.reasons)


def test_an_interrupted_run_judged_too_early_says_so_once_and_fails_no_row() -> None:
    """Cut short with its p95 over the target, but not beyond noise: inconclusive, and the row says
    so too (not FAIL: JUnit has no failure for an exit 3); the interruption is said once."""
    from slogate.slo.gate.facts import INTERRUPTED, RunStop
    from slogate.slo.outputs.render import render_junit, render_markdown

    stop = RunStop(INTERRUPTED, 10.0, 60.0, signal="SIGTERM")
    store = MetricsStore()
    for i in range(25):  # 100 to 220 ms: p95 215 ms, over its 200 ms by far less than 25 samples can tell
        store.add(RequestRecord("shared", 100.0 + i, e2e_us=(101 + 5 * i) * 1000, ttft_us=(100 + 5 * i) * 1000))
    report = judge(parse_spec(SPEC), store, RunInfo(stopped=stop))
    assert (report.verdict, [r.result for r in report.slos]) == ("inconclusive", ["insufficient_data", "pass"])
    assert report.reasons[0].startswith("Interrupted by SIGTERM after 10 s of 60 s: too early to judge")
    markdown = render_markdown(report)
    assert markdown.count("Interrupted by SIGTERM") == 1 and "| FAIL |" not in markdown
    assert 'failures="0"' in render_junit(report)
    # Run to its end, the same figures fail, and the row says so.
    ended = judge(parse_spec(SPEC), store, RunInfo())
    assert (ended.verdict, ended.slos[0].result) == ("fail", "fail")


def test_unfinished_requests_are_counted_in_words_that_agree_with_the_count() -> None:
    from slogate.slo.gate.record import ErrorKind
    from slogate.slo.outputs.render import render_markdown

    for waiting, words in ((1, "1 was still waiting for its first token and counts"), (2, "2 were still waiting")):
        store = store_with(100, 25)
        for i in range(waiting):
            store.add(RequestRecord("shared", 200.0 + i, e2e_us=50_000, error_kind=ErrorKind.UNFINISHED))
        assert words in render_markdown(judge(parse_spec(SPEC), store, RunInfo()))


@pytest.mark.parametrize(
    ("target", "local"),
    [("http://127.0.0.1:8000", "127.0.0.1"), ("http://localhost:8000/v1", "localhost"), ("http://[::1]:80", "::1"),
     ("http://10.0.0.5:8000", None), ("https://vllm.internal", None), (None, None)],
)  # fmt: skip
def test_a_busy_machine_with_the_server_on_it_gets_advice_the_demo_can_follow(target: str | None, local: str) -> None:
    """The demo serves and loads on one machine: "not beside the server" is advice it cannot take."""
    from slogate.slo.gate.self_check import assess

    store = store_with(100, 50)
    for _ in range(200):
        store.loop_lag.record_ms(30)
    store.client_cpu_s, store.client_wall_s = 2.0, 10.0
    message = assess(store, cpu_warning=False, processes=1, target=target).message
    assert ("not beside the server" in message) is (local is None)
    assert (f"the server on this machine ({local}) held the cores" in message) is (local is not None)
    assert ("taskset -c" in message) is (local is not None)
    report = judge(parse_spec(SPEC), store, RunInfo(target=target))
    assert any(message in reason for reason in report.reasons)


def test_the_reports_page_lists_every_reason_a_run_stops_for_and_no_other() -> None:
    import re

    from slogate.slo.gate.facts import STOP_REASONS

    page = (ROOT / "docs" / "reports.md").read_text()
    section = page.split("## Why a run stopped", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `(\w+)` \|", section, re.MULTILINE)
    assert rows == ["reason", *STOP_REASONS]  # the header, then one row per reason
