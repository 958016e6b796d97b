"""Objective kinds (slo/gate/objective_kinds.py): one class per kind, a registry by metric name,
and the spec, the judge, the early stop and the window asking the kind rather than the name."""

from typing import Any

import pytest
from slogate.slo.gate.early_stop import AT_END, look, waits_for
from slogate.slo.gate.evaluate import evaluate
from slogate.slo.gate.facts import ObjectiveLook
from slogate.slo.gate.failure_share import CancelledShare, FailureShare
from slogate.slo.gate.goodput_kind import Goodput
from slogate.slo.gate.intervals import INTERVAL_METRICS
from slogate.slo.gate.metrics import LATENCY_METRICS, MetricsStore
from slogate.slo.gate.objective_kind import ObjectiveKind, SloSpecError, both_sides
from slogate.slo.gate.objective_kinds import KINDS, LatencyPercentile, Objective, Proportion, Rate, ServerFigure
from slogate.slo.gate.record import ErrorKind, RequestRecord
from slogate.slo.gate.report import objective_from_json, objective_json
from slogate.slo.gate.sequential import decide_proportion
from slogate.slo.gate.server_figures import ServerFigures
from slogate.slo.gate.spec import parse_spec
from slogate.slo.gate.verdict import Outcome, Verdict
from slogate.slo.gate.window import first_breach, windowed_objectives

ONE_OF_EACH = [
    {"metric": "ttft", "percentile": 95, "max_ms": 200},
    {"metric": "ttfo", "percentile": 95, "max_ms": 900},
    {"metric": "reasoning", "percentile": 50, "max_ms": 900},
    {"metric": "ttftc", "percentile": 95, "max_ms": 900},
    {"metric": "itl", "percentile": 99, "max_ms": 50},
    {"metric": "tpot", "percentile": 90, "max_ms": 40},
    {"metric": "e2e", "percentile": 99, "max_ms": 900},
    {"metric": "send_lag", "percentile": 99, "max_ms": 10},
    {"metric": "error_rate", "max": 0.01},
    {"metric": "invalid_output", "max": 0.01},
    {"metric": "cancelled", "max": 0.6},
    {"metric": "output_tokens_per_s", "min": 5},
    {"metric": "requests_per_s", "min": 1},
    {"metric": "goodput", "min": 0.9, "ttft_ms": 200},
    {"metric": "prefix_cache_hit_rate", "min": 0.3},
    {"metric": "kv_cache_usage", "max": 0.9},
    {"metric": "num_requests_waiting", "max": 3},
    {"metric": "num_requests_running", "max": 30},
    {"metric": "preemptions", "max": 0},
]
ONE = {o["metric"]: o for o in ONE_OF_EACH}


def store(n: int = 50, ttft_ms: int = 100, failures: int = 0) -> MetricsStore:
    s = MetricsStore()
    s.set_goodput_targets({"all": {"ttft": 200.0}})
    for i in range(n):
        error = ErrorKind.HTTP_5XX if i < failures else None
        s.add(RequestRecord("shared", 1000.0 + i / 10, e2e_us=300_000, ttft_us=ttft_ms * 1000, error_kind=error))
    return s


def test_every_metric_an_slo_can_name_has_one_kind_and_every_latency_metric_is_a_percentile() -> None:
    assert [o["metric"] for o in ONE_OF_EACH] == list(KINDS)
    assert all(isinstance(KINDS[m], LatencyPercentile) for m in LATENCY_METRICS)
    kinds = {m: type(k) for m, k in KINDS.items() if m not in LATENCY_METRICS}
    assert kinds == {
        "error_rate": Proportion, "invalid_output": FailureShare, "cancelled": CancelledShare,
        "output_tokens_per_s": Rate, "requests_per_s": Rate, "goodput": Goodput,
        **dict.fromkeys(("prefix_cache_hit_rate", "kv_cache_usage", "num_requests_waiting"), ServerFigure),
        **dict.fromkeys(("num_requests_running", "preemptions"), ServerFigure),
    }  # fmt: skip
    spec = parse_spec({"slos": ONE_OF_EACH})
    assert all(o.kind is KINDS[o.metric] for o in spec.objectives)


def test_each_kind_says_how_its_values_read_and_what_it_decides_early_or_windows() -> None:
    objectives = parse_spec({"slos": ONE_OF_EACH}).objectives
    early = {o.metric for o in objectives if o.kind.decidable_early(o)}
    early_kinds = {"error_rate", "invalid_output", "cancelled", "requests_per_s", "goodput"}
    assert early == {"ttft", "ttfo", "reasoning", "ttftc", "tpot", "e2e", *early_kinds}
    assert {o.metric for o in objectives if o.kind.windowable(o)} == set(INTERVAL_METRICS)
    ttft, errors = objectives[0], parse_spec({"slos": [ONE["error_rate"]]}).objectives[0]
    assert (ttft.kind.unit, ttft.kind.si_scale, ttft.kind.max_key, ttft.kind.format_value(1234.56)) == (
        "ms", 1 / 1000, "max_ms", "1,234.6 ms",
    )  # fmt: skip
    assert (errors.kind.unit, errors.kind.si_scale, errors.kind.max_key, errors.kind.format_value(0.012345)) == (
        "", 1.0, "max", "0.01235",
    )  # fmt: skip
    assert [o.metric for o in objectives if o.kind.on_latency_curves] == list(LATENCY_METRICS)
    # A rate with a ceiling, or an error rate with a floor, is judged only at the end.
    bounded = parse_spec({"slos": [{"metric": "requests_per_s", "max": 9}, {"metric": "error_rate", "min": 0.1}]})
    assert not any(o.kind.decidable_early(o) for o in bounded.objectives)


def test_the_kinds_wording_is_the_reports() -> None:
    objectives = {o.metric: o for o in parse_spec({"slos": ONE_OF_EACH}).objectives}
    assert [objectives[m].describe() for m in ("ttft", "send_lag", "goodput")] == ["p95 ttft[all] <= 200 ms", (
        "p99 send_lag[all] <= 10 ms"), "goodput[all] >= 0.9 (ttft <= 200 ms)"]  # fmt: skip
    assert objectives["error_rate"].describe() == "error_rate[all] <= 0.01"
    both = parse_spec({"slos": [{"metric": "requests_per_s", "min": 1, "max": 9, "class": "shared"}]}).objectives[0]
    assert both.describe() == "requests_per_s[shared] >= 1 and <= 9"


def test_the_kind_reads_its_value_from_the_measurements_or_the_server() -> None:
    s = store(n=40, failures=4)
    server = ServerFigures(available=True, scrapes=3, kv_cache_usage_max=0.5, prefix_cache_hit_rate=0.25)
    objectives = {o.metric: o for o in parse_spec({"slos": ONE_OF_EACH}).objectives}
    assert objectives["ttft"].kind.observe(objectives["ttft"], s, server) == (pytest.approx(100, rel=0.002), 36)
    assert objectives["error_rate"].kind.observe(objectives["error_rate"], s, server) == (0.1, 40)
    assert objectives["goodput"].kind.observe(objectives["goodput"], s, server) == (0.9, 40)
    assert objectives["kv_cache_usage"].kind.observe(objectives["kv_cache_usage"], s, server) == (0.5, 3)
    assert objectives["preemptions"].kind.observe(objectives["preemptions"], s, None) == (None, 0)


def test_server_figures_ignore_min_samples_and_latency_counts_it() -> None:
    spec = parse_spec({"slos": [ONE["ttft"], ONE["kv_cache_usage"]], "min_samples": 100})
    server = ServerFigures(available=True, scrapes=2, kv_cache_usage_max=0.5)
    ev = evaluate(spec, store(n=40), server=server)
    assert [r.result for r in ev.results] == [Outcome.INSUFFICIENT, Outcome.PASS]
    assert ev.reasons == ["too few samples: ttft-p95-all has 40 (min_samples 100)"]


class CancelRate(ObjectiveKind):
    """A kind added by the registry alone (as docs/layout.md's "Adding an objective kind" says):
    the share of requests that failed by timing out, with a ceiling decided early."""

    fraction = True

    def observe(self, o: Objective, metrics: MetricsStore, server: Any) -> tuple[float | None, int]:
        cm = metrics.get(o.request_class)
        timeouts = cm.errors_by_kind.get(ErrorKind.TIMEOUT, 0)
        return (timeouts / cm.requests if cm.requests else None), cm.requests

    def decidable_early(self, o: Objective) -> bool:
        return o.max is not None

    def look(
        self, o: Objective, metrics: MetricsStore, pass_alpha: float, fail_alpha: float, client_delay_ms: float
    ) -> ObjectiveLook:
        cm = metrics.get(o.request_class)
        timeouts = cm.errors_by_kind.get(ErrorKind.TIMEOUT, 0)
        state, lower, upper = both_sides(
            lambda alpha: decide_proportion(timeouts, cm.requests, o.max or 0.0, alpha), pass_alpha, fail_alpha
        )
        return ObjectiveLook(o.name, o.describe(), state, cm.requests, lower, upper, "")


def test_a_kind_added_to_the_registry_is_parsed_judged_decided_and_reported_with_no_other_change(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(KINDS, "cancel_rate", CancelRate("cancel_rate"))
    spec = parse_spec({"slos": [{"metric": "cancel_rate", "max": 0.05}], "min_samples": 10})
    (o,) = spec.objectives
    assert (o.name, o.describe()) == ("cancel_rate-all", "cancel_rate[all] <= 0.05")
    s = MetricsStore()
    for i in range(400):
        s.add(RequestRecord("shared", 1000.0 + i, e2e_us=1000, error_kind=ErrorKind.TIMEOUT if i % 2 else None))
    ev = evaluate(spec, s)
    assert ev.status == Verdict.FAIL and ev.results[0].observed == 0.5
    assert [lk.state for lk in look(spec, s, 0.99)] == ["fail"] and waits_for(spec, (), False) == []
    assert objective_json(ev.results[0])["target"] == {"max": 0.05}
    assert windowed_objectives(spec) == []
    with pytest.raises(SloSpecError, match=r"field 'max': must be <= 1, got 2"):
        parse_spec({"slos": [{"metric": "cancel_rate", "max": 2}]})
    with pytest.raises(SloSpecError, match=r"unknown field 'percentile' for metric 'cancel_rate'; allowed: class, "):
        parse_spec({"slos": [{"metric": "cancel_rate", "max": 0.1, "percentile": 9}]})


def test_what_only_the_end_judges_looks_at_end_and_keeps_the_run() -> None:
    spec = parse_spec({"slos": [ONE["itl"], ONE["output_tokens_per_s"], ONE["num_requests_waiting"]]})
    assert [lk.state for lk in look(spec, store(), 0.99)] == [AT_END] * 3
    assert waits_for(spec, (), False) == [o.name for o in spec.objectives]


def test_the_window_judges_what_the_kind_windows_by_the_kinds_bound() -> None:
    objectives = [{"metric": m, "percentile": 50, "max_ms": 50} for m in ("ttft", "tpot", "e2e")]
    spec = parse_spec({"slos": objectives, "min_samples": 5})
    assert [o.metric for o in windowed_objectives(spec)] == ["ttft", "e2e"]
    series = store(n=40, ttft_ms=100).intervals  # 4 s of requests, 100 ms each
    breach = first_breach(spec, series, now=1004.0, started_at=1000.0, window_s=30)
    assert breach is not None and breach.objective == "ttft-p50-all" and breach.samples == 40
    assert breach.observed_ms == breach.lower_bound_ms == pytest.approx(100, rel=0.002)
    lenient = parse_spec({"slos": [{"metric": "ttft", "percentile": 50, "max_ms": 150}], "min_samples": 5})
    assert first_breach(lenient, series, now=1004.0, started_at=1000.0, window_s=30) is None


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"metric": "ttft", "max": 1, "percentile": 9}, "unknown field 'max' for metric 'ttft' (latency targets use"),
        ({"metric": "kv_cache_usage", "max": 0.9, "class": "shared"}, "'kv_cache_usage' is server-wide; leave"),
        ({"metric": "error_rate"}, "field 'max' or 'min': one is required for metric 'error_rate'"),
        (
            {"metric": "ttfx", "max_ms": 1},
            "field 'metric': 'ttfx' is not one of ttft, ttfo, reasoning, ttftc, itl, tpot, e2e, send_lag, error_",
        ),
        ({"metric": ["ttft"]}, "field 'metric': ['ttft'] is not one of ttft"),
    ],
)
def test_the_common_checks_and_each_kinds_own_keep_their_messages(entry: dict[str, Any], message: str) -> None:
    with pytest.raises(SloSpecError) as e:
        parse_spec({"slos": [entry]}, "s.yaml")
    assert str(e.value).startswith("s.yaml: slos[0]: field ") or str(e.value).startswith("s.yaml: slos[0]: unknown")
    assert message in str(e.value)


def test_a_saved_objective_on_a_metric_this_version_does_not_know_reads_as_a_plain_figure() -> None:
    saved = {"name": "t", "metric": "ttfx", "target": {"max_ms": 5}, "observed": 3.0, "samples": 9, "result": "pass"}
    r = objective_from_json(saved)
    assert r.objective.describe() == "ttfx[all] <= 5" and r.objective.kind.unit == ""
    assert objective_json(r)["target"] == {"max": 5}
