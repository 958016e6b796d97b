"""Goodput (vLLM's and DistServe's): the fraction of requests that met every per-request limit,
as an SLO with its own limits, judged, and in every report."""

import json
from pathlib import Path

import pytest
from slogate.slo.gate.evaluate import evaluate
from slogate.slo.gate.goodput_kind import GOODPUT_LIMITS
from slogate.slo.gate.judge import judge
from slogate.slo.gate.metrics import MetricsStore
from slogate.slo.gate.record import ALL, ErrorKind, RequestRecord
from slogate.slo.gate.report import Report, RunInfo
from slogate.slo.gate.self_check import Saturation
from slogate.slo.gate.spec import SloSpecError, goodput_targets, parse_spec
from slogate.slo.outputs.html import render_html
from slogate.slo.outputs.render import render_markdown, write_reports


def spec(*objectives: dict, min_samples: int = 10):
    return parse_spec({"slos": list(objectives), "min_samples": min_samples})


GOODPUT = {"metric": "goodput", "min": 0.9, "ttft_ms": 200, "tpot_ms": 50, "class": "shared"}


def store_for(targets: dict | None, fast: int, slow_ttft: int, slow_tpot: int, failed: int = 0) -> MetricsStore:
    """`fast` shared requests within every limit, others slow in TTFT or TPOT, some failed; and 10
    unique requests, slow in TTFT, that no shared limit applies to."""
    store = MetricsStore()
    store.set_goodput_targets(targets)
    t = 1000.0

    def add(cls: str, ttft_ms: int, tpot_ms: int, error: ErrorKind | None = None) -> None:
        nonlocal t
        t += 0.1
        e2e = (ttft_ms + 4 * tpot_ms) * 1000
        store.add(
            RequestRecord(
                cls, t, e2e_us=e2e, ttft_us=ttft_ms * 1000, itl_us=[tpot_ms * 1000] * 4,
                completion_tokens=5, error_kind=error,
            )
        )  # fmt: skip

    for _ in range(fast):
        add("shared", 100, 20)
    for _ in range(slow_ttft):
        add("shared", 300, 20)
    for _ in range(slow_tpot):
        add("shared", 100, 80)
    for _ in range(failed):
        add("shared", 100, 20, ErrorKind.HTTP_5XX)
    for _ in range(10):
        add("unique", 900, 20)
    return store


def test_a_goodput_objective_parses_with_its_limits_and_describes_itself() -> None:
    (o,) = spec(GOODPUT).objectives
    assert o.name == "goodput-shared" and o.min == 0.9
    assert o.limits_ms == (("tpot", 50.0), ("ttft", 200.0))
    assert o.describe() == "goodput[shared] >= 0.9 (tpot <= 50 ms, ttft <= 200 ms)"


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"metric": "goodput", "ttft_ms": 200}, "field 'min': required for metric 'goodput'"),
        ({"metric": "goodput", "min": 0.9}, "goodput needs at least one per-request limit"),
        ({"metric": "goodput", "min": 1.5, "ttft_ms": 200}, "field 'min': must be <= 1"),
        ({"metric": "goodput", "min": 0.9, "ttft_ms": 0}, "field 'ttft_ms': must be > 0"),
        ({"metric": "goodput", "min": 0.9, "itl_ms": 20}, "unknown field 'itl_ms'"),
    ],
)
def test_bad_goodput_objectives_are_one_line_naming_the_field(entry: dict, message: str) -> None:
    with pytest.raises(SloSpecError, match=message):
        spec(entry)


def test_goodput_limits_are_the_one_source_of_the_targets_when_present() -> None:
    latency = {"metric": "ttft", "percentile": 95, "max_ms": 500}
    assert goodput_targets(spec(latency)) == {ALL: {"ttft": 500.0}}  # without goodput: as vLLM's --goodput
    both = spec(latency, GOODPUT, {**GOODPUT, "name": "all-goodput", "class": "all", "min": 0.5})
    assert goodput_targets(both) == {"shared": {"ttft": 200.0, "tpot": 50.0}, ALL: {"ttft": 200.0, "tpot": 50.0}}


@pytest.mark.parametrize(
    "other",
    [
        {**GOODPUT, "name": "strict", "ttft_ms": 150},  # tiers on one class
        {**GOODPUT, "name": "everyone", "class": "all", "tpot_ms": 80},  # `all` and a class
        {**GOODPUT, "name": "follow-ups", "class": "follow_up", "e2e_ms": 900},  # a class and a tag
        {**GOODPUT, "name": "support", "class": "support", "ttft_ms": 900},  # a file's class: may be a trace tag
    ],
)
def test_goodput_objectives_with_different_limits_are_refused_in_one_line(other: dict) -> None:
    """Counted once per request, a good request has one definition: judged against the merged
    limits, one of two differing objectives would be judged against limits other than its own
    (a false fail, or no figure at all: exit 3 on every run)."""
    with pytest.raises(SloSpecError, match="give different per-request limits") as e:
        spec(GOODPUT, other)
    assert "\n" not in str(e.value) and other["name"] in str(e.value)


def test_disjoint_request_classes_may_each_have_their_own_goodput_limits() -> None:
    """No request is both shared and unique: each class is judged by its own limits (the unique
    requests of `store_for`, TTFT 1,000 ms, meet a 2,000 ms limit and fail the shared one's 200)."""
    s = spec(GOODPUT, {**GOODPUT, "name": "unique-goodput", "class": "unique", "ttft_ms": 2000, "tpot_ms": 50})
    report = judge(s, store_for(goodput_targets(s), 18, 1, 1), RunInfo())
    observed = {r.objective.name: r.observed for r in report.slos}
    assert observed == {"goodput-shared": pytest.approx(0.9), "unique-goodput": pytest.approx(1.0)}


def test_goodput_is_judged_as_the_fraction_of_requests_meeting_every_limit(tmp_path: Path) -> None:
    s = spec(GOODPUT)
    # 18 good of 20 shared (one slow TTFT, one slow TPOT): 0.9, met; failures count as not good.
    passing = judge(s, store_for(goodput_targets(s), 18, 1, 1), RunInfo())
    assert passing.verdict == "pass" and passing.slos[0].observed == pytest.approx(0.9)
    assert passing.slos[0].samples == 20
    failing = judge(s, store_for(goodput_targets(s), 17, 1, 1, failed=1), RunInfo())
    assert failing.verdict == "fail" and failing.slos[0].observed == pytest.approx(17 / 20)

    data = json.loads(write_reports(failing, tmp_path)["json"].read_text())
    shared = data["goodput"]["classes"]["shared"]
    assert shared["good"] == 17 and shared["requests"] == 20 and shared["fraction"] == pytest.approx(0.85)
    assert shared["goodput_rps"] == pytest.approx(17 / failing.measurements.get("shared").duration_s, rel=1e-3)
    assert data["goodput"]["classes"]["unique"]["good"] == 10  # no limit applies to them
    assert data["slos"][0]["target"] == {"min": 0.9, "limits_ms": {"tpot": 50.0, "ttft": 200.0}}
    again = Report.from_json(data)
    assert again.slos[0].objective == failing.slos[0].objective
    assert "goodput[shared] >= 0.9" in (tmp_path / "slo-summary.md").read_text()


def test_a_goodput_fail_stands_unless_the_clients_delay_could_explain_it() -> None:
    s = spec(GOODPUT)
    store = store_for(goodput_targets(s), 16, 3, 0, failed=1)  # 16 of 20 good: 0.8 < 0.9
    # 50 ms of client delay cannot bring a 300 ms TTFT under 200 ms: 4 of 20 certainly not good.
    assert evaluate(s, store, saturation=Saturation("saturated", client_delay_ms=50)).status == "fail"
    # 150 ms could: then only the failure is certainly not good, and 0.95 would meet the floor.
    assert evaluate(s, store, saturation=Saturation("saturated", client_delay_ms=150)).status == "inconclusive"


def test_unfinished_requests_do_not_count_against_the_goodput_ceiling() -> None:
    """The TTFT histogram holds the requests in flight at the stop too; goodput leaves them out,
    so its ceiling must: 3 unfinished at 900 ms would otherwise look certainly not good."""
    s = spec(GOODPUT)
    store = store_for(goodput_targets(s), 17, 2, 0, failed=1)  # 17 of 20 good: 0.85 < 0.9
    for i in range(3):
        store.add(RequestRecord("shared", 2000.0 + i, e2e_us=900_000, ttft_us=900_000, error_kind=ErrorKind.UNFINISHED))
    # 150 ms of client delay could bring the 300 ms TTFTs under 200: only the failure is certain.
    assert evaluate(s, store, saturation=Saturation("saturated", client_delay_ms=150)).status == "inconclusive"


def test_unfinished_requests_under_the_limit_leave_the_over_count_alone() -> None:
    """Only the unfinished requests over the limit are taken out of the TTFT over-count: 4 of 20
    finished requests at 300 ms are certainly not good with 50 ms of delay (ceiling 0.8 < 0.9),
    however many unfinished requests waited less than the limit. Merged through the wire too."""
    s = spec(GOODPUT)
    store = store_for(goodput_targets(s), 16, 4, 0)  # 16 of 20 good: 0.8
    for i in range(5):
        store.add(RequestRecord("shared", 2000.0 + i, e2e_us=50_000, ttft_us=None, error_kind=ErrorKind.UNFINISHED))
    saturated = Saturation("saturated", client_delay_ms=50)
    assert evaluate(s, store, saturation=saturated).status == "fail"
    merged = MetricsStore.from_wire(store.to_wire())
    assert evaluate(s, merged, saturation=saturated).status == "fail"


def test_goodput_counted_against_other_limits_is_not_judged() -> None:
    """A saved run judged with a new goodput limit: `good` cannot be counted again from histograms."""
    s = spec(GOODPUT)
    report = judge(s, store_for({"shared": {"ttft": 999.0}}, 20, 0, 0), RunInfo())
    assert report.verdict == "inconclusive" and report.slos[0].result == "insufficient_data"
    assert "no good requests were counted against its limits" in report.reasons[0]


def test_every_report_has_goodput_rps_none_without_limits(tmp_path: Path) -> None:
    report = judge(None, store_for(None, 5, 0, 0), RunInfo())
    data = json.loads(write_reports(report, tmp_path)["json"].read_text())
    assert data["goodput"]["targets_ms"] is None
    assert data["goodput"]["classes"][ALL] == {"good": None, "requests": 15, "fraction": None, "goodput_rps": None}


def test_a_live_run_counts_good_requests_against_the_goodput_limits(
    own_fault_server, locust_run, tmp_path: Path
) -> None:
    url, _ = own_fault_server
    slo = tmp_path / "slo.yaml"
    slo.write_text(
        "slos:\n"
        "  - {name: good, metric: goodput, min: 0.9, ttft_ms: 30, class: shared}\n"
        "  - {name: ttft, metric: ttft, percentile: 50, max_ms: 5000}\n"  # not a goodput limit: goodput has its own
        "min_samples: 3\n"
    )
    run = locust_run(
        url, "-u", "2", "-r", "2", "-t", "3s", "--slo-file", str(slo), "--model", "ttft_ms=80,tokens=2",
        "--shared-prefix-tokens", "20", "--shared-fraction", "1", "--max-client-lag-ms", "100000",
    )  # fmt: skip
    report = run.report
    assert report["goodput"]["targets_ms"] == {"shared": {"ttft": 30.0}}
    shared = report["goodput"]["classes"]["shared"]
    assert shared["requests"] >= 3 and shared["good"] == 0 and shared["goodput_rps"] == 0
    (good,) = [s for s in report["slos"] if s["name"] == "good"]
    assert good["observed"] == 0 and good["result"] == "fail" and run.code == 1


@pytest.mark.parametrize("field", sorted(GOODPUT_LIMITS))
def test_each_goodput_field_limits_its_own_metric(field: str) -> None:
    # One definition (slo/gate/metrics.py GOODPUT_METRICS): each field the SLO file takes counts a request
    # over that limit, and only that one, as not good.
    s = parse_spec({"slos": [{"metric": "goodput", "min": 0.5, field: 150}]})
    metric = GOODPUT_LIMITS[field]
    store = MetricsStore()
    store.set_goodput_targets(goodput_targets(s))
    within = RequestRecord("shared", 1.0, e2e_us=140_000, ttft_us=100_000, itl_us=[10_000] * 4, completion_tokens=5)
    over = {
        "ttft": RequestRecord("shared", 2.0, e2e_us=170_000, ttft_us=160_000, completion_tokens=1),
        "tpot": RequestRecord("shared", 2.0, e2e_us=160_000, ttft_us=100, completion_tokens=2),
        "e2e": RequestRecord("shared", 2.0, e2e_us=160_000, ttft_us=100_000, completion_tokens=1),
    }[metric]
    store.add(within)
    store.add(over)
    assert store.get("all").good == 1


def test_goodput_per_class_is_in_the_summary_and_the_html_report(tmp_path: Path) -> None:
    s = spec(GOODPUT)
    report = judge(s, store_for(goodput_targets(s), 17, 1, 1, failed=1), RunInfo())
    rps = 17 / report.measurements.get("shared").duration_s
    paths = write_reports(report, tmp_path)
    markdown = paths["markdown"].read_text()
    assert f"| shared | 17 | 20 | 85.0% | {rps:.2f} |" in markdown
    assert "every per-request limit (shared: tpot <= 50 ms, ttft <= 200 ms)" in markdown
    html = paths["html"].read_text()
    assert "<th>goodput req/s</th>" in html and f"<td class=num>{rps:,.2f}</td>" in html
    # The target cell says what a good request is, not only the floor.
    assert "<td>&ge; 0.9 of requests with tpot &lt;= 50 ms, ttft &lt;= 200 ms</td>" in html


def test_without_goodput_limits_no_goodput_table() -> None:
    report = judge(parse_spec({"slos": [{"metric": "error_rate", "max": 0.1}]}), store_for(None, 5, 0, 0), RunInfo())
    assert "goodput req/s" not in render_markdown(report) and "goodput req/s" not in render_html(report)
