"""`/slo/metrics`: the live report for Prometheus (slo/outputs/prometheus.py); where it is served
(`--slo-metrics-port`, Locust's web port) is tests/plugin/test_metrics_server.py's.

Every exposition here is read back with prometheus-client's own parsers and checked against the report
it renders: bucket counts against the report's percentiles, counters, objectives, verdict.
"""

import json
import math
import random
import time
from typing import Any

from prometheus_client.openmetrics.parser import text_string_to_metric_families as openmetrics_families
from prometheus_client.parser import text_string_to_metric_families
from slogate.slo.gate.histogram import LatencyHistogram, nearest_rank
from slogate.slo.gate.judge import judge
from slogate.slo.gate.metrics import MetricsStore
from slogate.slo.gate.record import ErrorKind, RequestRecord
from slogate.slo.gate.report import Report, RunInfo
from slogate.slo.gate.spec import parse_spec
from slogate.slo.gate.verdict import Outcome, Verdict
from slogate.slo.outputs.prometheus import BUCKETS_S, bucket_counts, exposition

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]
# The series users' dashboards read, pinned here (slo/gate/latency_metrics.py defines them).
LATENCY = {
    "ttft": "time_to_first_token_seconds",
    "itl": "inter_token_latency_seconds",
    "tpot": "time_per_output_token_seconds",
    "e2e": "e2e_request_latency_seconds",
}


def parse(text: str) -> Samples:
    """Every sample of a Prometheus text exposition, by name and labels (prometheus-client's parser)."""
    return {
        (s.name, frozenset(s.labels.items())): s.value for f in text_string_to_metric_families(text) for s in f.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples[(name, frozenset(labels.items()))]


def with_name(samples: Samples, name: str) -> dict[frozenset[tuple[str, str]], float]:
    return {labels: v for (n, labels), v in samples.items() if n == name}


def record(cls: str, ttft_ms: float, **kw: Any) -> RequestRecord:
    ttft_us = round(ttft_ms * 1000)
    return RequestRecord(cls, time.time(), ttft_us + 40_000, ttft_us=ttft_us, itl_us=[9_000, 11_000, 20_000],
                         prompt_tokens=100, completion_tokens=4, **kw)  # fmt: skip


def full_report() -> Report:
    """A judged run with every kind of figure: two classes and a tag, failures of two kinds,
    unfinished (waiting and streaming) and dropped requests, goodput, objectives that pass and fail."""
    spec = parse_spec(
        {
            "slos": [
                {"name": "ttft-p95", "metric": "ttft", "percentile": 95, "max_ms": 400},
                {"name": "itl-p99-shared", "metric": "itl", "percentile": 99, "max_ms": 5, "class": "shared"},
                {"name": "errors", "metric": "error_rate", "max": 0.01},
                {"name": "good", "metric": "goodput", "min": 0.5, "ttft_ms": 150},
            ]
        }
    )
    store = MetricsStore()
    store.set_goodput_targets({"all": {"ttft": 150}})
    rng = random.Random(7)
    for i in range(300):
        store.add(record("shared" if i % 3 else "unique", rng.lognormvariate(4.5, 0.5), tags=("follow_up",) * (i % 2)))
    for kind in (ErrorKind.HTTP_429, ErrorKind.HTTP_429, ErrorKind.TIMEOUT):
        store.add(RequestRecord("unique", time.time(), 30_000, error_kind=kind))
    store.add(RequestRecord("shared", time.time(), 900_000, error_kind=ErrorKind.UNFINISHED))  # still waiting
    store.add(RequestRecord("shared", time.time(), 900_000, ttft_us=80_000, error_kind=ErrorKind.UNFINISHED))
    store.add(RequestRecord("unique", time.time(), 0, error_kind=ErrorKind.DROPPED))
    return judge(spec, store, RunInfo(started_at="2026-01-02T03:04:05Z", target="http://vllm:8000"))


def sample_names() -> set[str]:
    """Every sample name the exposition of a full report has (what /slo/metrics serves)."""
    return {name for name, _ in parse(exposition(full_report())[0].decode())}


def assert_matches_report(samples: Samples, report: dict[str, Any]) -> None:
    """The exposition's counts equal the report's (its JSON form), class by class."""
    for cls, m in report["metrics"].items():
        assert value(samples, "slogate_requests_total", **{"class": cls}) == m["requests"], cls
        assert value(samples, "slogate_unfinished_total", **{"class": cls}) == m["unfinished"], cls
        assert value(samples, "slogate_dropped_total", **{"class": cls}) == m["dropped"], cls
        assert value(samples, "slogate_output_tokens_total", **{"class": cls}) == m["output_tokens"], cls
        failures = {dict(k)["kind"]: v for k, v in with_name(samples, "slogate_failures_total").items()
                    if dict(k)["class"] == cls}  # fmt: skip
        assert {k: v for k, v in failures.items() if v} == m["errors_by_kind"], cls
        assert sum(failures.values()) == m["failures"], cls
        for key, name in LATENCY.items():
            count = m[f"{key}_ms"]["count"]
            assert value(samples, f"slogate_{name}_count", **{"class": cls}) == count, (cls, key)
            assert value(samples, f"slogate_{name}_bucket", **{"class": cls, "le": "+Inf"}) == count, (cls, key)
    for slo in report["slos"]:
        states = {dict(k)["state"]: v for k, v in with_name(samples, "slogate_objective_state").items()
                  if dict(k)["objective"] == slo["name"]}  # fmt: skip
        assert states == {str(o): float(o == slo["result"]) for o in Outcome}, slo["name"]
    verdicts = {dict(k)["verdict"]: v for k, v in with_name(samples, "slogate_verdict").items()}
    assert verdicts == {str(v): float(v == report["verdict"]) for v in Verdict}


# ---------------------------------------------------------------- the exposition


def test_bucket_counts_agree_exactly_with_the_reports_percentiles() -> None:
    """For every bound and percentile: the report's nearest-rank percentile is <= the bound exactly
    when the bucket holds at least that rank, so a dashboard's buckets never pass what the gate fails.
    Values land on and next to bounds on purpose (the HdrHistogram's ranges are up to 0.1% wide)."""
    rng = random.Random(1)
    values_us = [round(rng.lognormvariate(11, 1.5)) for _ in range(5000)]
    values_us += [round(b * 1e6) + d for b in BUCKETS_S for d in (-1, 0, 1)]
    hist = LatencyHistogram()
    for v in values_us:
        hist.record_us(v)
    counts = bucket_counts(hist, BUCKETS_S)
    assert counts == sorted(counts) and counts[-1] <= hist.count
    for p in (50, 90, 95, 99, 99.9, 100):
        rank, pct_ms = nearest_rank(p, hist.count), hist.percentile_ms(p)
        for bound, count in zip(BUCKETS_S, counts, strict=True):
            assert (pct_ms <= bound * 1000) == (count >= rank), (p, bound)
    for bound, count in zip(BUCKETS_S, counts, strict=True):  # never more than the truth, at most 0.1% less
        exact = sum(v <= round(bound * 1e6) for v in values_us)
        assert sum(v <= bound * 1e6 / 1.001 for v in values_us) <= count <= exact, bound
        if bound * 1e6 < 2048:  # the HdrHistogram is exact below 2048 us: so are the buckets
            assert count == exact, bound


def test_the_exposition_parses_and_says_what_the_report_says() -> None:
    report = full_report()
    body, content_type = exposition(report)
    assert content_type.startswith("text/plain")
    samples = parse(body.decode())
    data = json.loads(json.dumps(report.to_json()))
    assert set(data["metrics"]) == {"all", "shared", "unique", "follow_up"}
    assert_matches_report(samples, data)
    for cls, m in data["metrics"].items():  # _sum / _count is the report's mean
        for key, name in LATENCY.items():
            total = value(samples, f"slogate_{name}_sum", **{"class": cls})
            assert math.isclose(total / m[f"{key}_ms"]["count"] * 1000, m[f"{key}_ms"]["mean"], abs_tol=1e-3)
    assert value(samples, "slogate_unfinished_total", **{"class": "shared"}) == 2
    assert value(samples, "slogate_dropped_total", **{"class": "unique"}) == 1
    assert value(samples, "slogate_failures_total", **{"class": "unique", "kind": "http_429"}) == 2
    assert value(samples, "slogate_failures_total", **{"class": "shared", "kind": "tls"}) == 0  # every kind, from 0
    good = data["goodput"]["classes"]["all"]["good"]
    assert value(samples, "slogate_good_requests_total", **{"class": "all"}) == good > 0
    by_name = {s["name"]: s for s in data["slos"]}
    assert by_name["ttft-p95"]["result"] == "pass" and by_name["itl-p99-shared"]["result"] == "fail"
    labels = {"objective": "ttft-p95", "metric": "ttft", "class": "all"}
    assert math.isclose(value(samples, "slogate_objective_value", **labels), by_name["ttft-p95"]["observed"] / 1000)
    assert value(samples, "slogate_objective_target", **labels, bound="max") == 0.4
    assert value(samples, "slogate_objective_samples", **labels) == by_name["ttft-p95"]["samples"]
    errors = {"objective": "errors", "metric": "error_rate", "class": "all"}
    assert value(samples, "slogate_objective_target", **errors, bound="max") == 0.01  # not a latency: as written
    assert value(samples, "slogate_run_start_time_seconds") == 1767323045
    assert data["verdict"] == "fail" and value(samples, "slogate_verdict", verdict="fail") == 1


def test_the_self_checks_saturation_is_a_gauge() -> None:
    """`slogate_client_saturated`, which the SlogateClientSaturated alert reads
    (deploy/prometheus/slogate-rules.yaml): the report's own flag, 0 or 1."""
    report = full_report()
    assert value(parse(exposition(report)[0].decode()), "slogate_client_saturated") == 0
    report.saturated = True
    assert value(parse(exposition(report)[0].decode()), "slogate_client_saturated") == 1


def test_openmetrics_is_served_when_asked_for() -> None:
    body, content_type = exposition(full_report(), "application/openmetrics-text; version=1.0.0")
    assert content_type.startswith("application/openmetrics-text")
    families = {f.name: f for f in openmetrics_families(body.decode())}
    assert families["slogate_requests"].type == "counter" and families["slogate_verdict"].type == "gauge"
    assert families["slogate_time_to_first_token_seconds"].type == "histogram"


def test_an_empty_run_exposes_every_series_at_zero_and_no_goodput() -> None:
    samples = parse(exposition(judge(None, MetricsStore(), RunInfo()))[0].decode())
    assert value(samples, "slogate_requests_total", **{"class": "all"}) == 0
    assert value(samples, "slogate_time_to_first_token_seconds_bucket", **{"class": "all", "le": "0.2"}) == 0
    assert value(samples, "slogate_verdict", verdict="ungated") == 1
    assert not with_name(samples, "slogate_good_requests_total")  # not counted: None in the report, not 0
    assert not with_name(samples, "slogate_run_start_time_seconds")


def test_no_secret_reaches_the_exposition() -> None:
    report = full_report()
    report.run.target = "http://user:pw-Secret1@vllm:8000/v1?key=sk-Secret2"
    report.run.command = "locust --web-auth admin:Secret3"
    text = exposition(report)[0].decode()
    assert all(s not in text for s in ("Secret1", "Secret2", "Secret3", "vllm:8000"))
