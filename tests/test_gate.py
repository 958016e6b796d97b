"""The SLO file, the verdict and the report files, without any server."""

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from slogate.slo import exitcodes
from slogate.slo.evaluate import evaluate
from slogate.slo.metrics import MetricsStore
from slogate.slo.record import RequestRecord
from slogate.slo.report import build_report, public_url, write_reports
from slogate.slo.spec import SloSpecError, load_spec, parse_spec

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
    verdict = evaluate(parse_spec(SPEC), store)
    report = build_report(verdict, store, run={"target": public_url("http://user:pw@host:8000/x?key=s3cret")})
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
    assert summary.read_text().strip() == md.strip()


def test_a_usage_error_still_writes_parseable_reports(tmp_path: Path) -> None:
    report = build_report(None, MetricsStore(), run={}, error="slo.yaml: slos[0]: field 'x'", exit_code=2)
    paths = write_reports(report, tmp_path)
    assert json.loads(paths["json"].read_text())["verdict"] == "error"
    assert ET.parse(paths["junit"]).getroot().get("errors") == "1"
