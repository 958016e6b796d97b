"""Cancelled requests (--cancel-fraction) in every report, per class, and the server's let-go
after the stop; a run without cancellation reads as it always has."""

from prometheus_client.parser import text_string_to_metric_families
from slogate.slo.gate.judge import judge
from slogate.slo.gate.metrics import MetricsStore
from slogate.slo.gate.record import ErrorKind, RequestRecord
from slogate.slo.gate.report import RunInfo
from slogate.slo.gate.server_figures import ServerMetrics
from slogate.slo.gate.spec import parse_spec
from slogate.slo.outputs.html import render_html
from slogate.slo.outputs.prometheus import exposition
from slogate.slo.outputs.render import render_junit, render_markdown

SPEC = parse_spec({"slos": [{"name": "errors", "metric": "error_rate", "max": 0.01}]})


def report(cancelled: int, after_stop: dict[str, float] | None = None) -> object:
    store = MetricsStore()
    for i in range(20):
        store.add(
            RequestRecord("shared", 1000.0 + i, e2e_us=90_000, ttft_us=20_000, itl_us=[5_000], completion_tokens=2)
        )
    for i in range(cancelled):
        store.add(RequestRecord("unique", 1000.0 + i, e2e_us=40_000, ttft_us=30_000, error_kind=ErrorKind.CANCELLED))
    server = ServerMetrics()
    for at in (1000.0, 1010.0):
        server.add({"vllm:num_requests_running": 1.0, "vllm:kv_cache_usage_perc": 0.1}, at)
    server.after_stop = after_stop
    return judge(SPEC, store, RunInfo(), server.summary())


def test_cancelled_requests_show_per_class_in_every_report_and_are_no_failures() -> None:
    still = {"still_running": 3.0, "waited_s": 2.0}
    r = report(cancelled=4, after_stop=still)
    data = r.to_json()
    assert data["metrics"]["unique"]["cancelled"] == data["metrics"]["all"]["cancelled"] == 4
    assert data["metrics"]["all"]["failures"] == 0 and data["metrics"]["all"]["error_rate"] == 0.0
    assert data["metrics"]["unique"]["ttft_ms"]["count"] == 4  # their TTFT counts
    assert data["server"]["after_stop"] == still
    assert r.verdict.value == "pass"  # a server that kept generating is a note, not a breach
    markdown = render_markdown(r)
    assert "| class | requests | failed | cancelled |" in markdown and "| unique | 0 | 0 | 4 |" in markdown
    assert "still running 3 requests 2 s after the load stopped" in markdown
    html = render_html(r)
    assert "<th>cancelled</th>" in html and "still running 3 requests" in html
    assert '<property name="cancelled.unique" value="4" />' in render_junit(r)
    families = {f.name: f for f in text_string_to_metric_families(exposition(r)[0].decode())}
    counted = {s.labels["class"]: s.value for s in families["slogate_cancelled"].samples if s.name.endswith("_total")}
    assert counted["unique"] == 4 and counted["shared"] == 0
    kinds = {s.labels["kind"] for s in families["slogate_failures"].samples}
    assert "cancelled" not in kinds


def test_a_run_without_cancellation_reads_as_before() -> None:
    r = report(cancelled=0)
    assert "cancelled" not in render_markdown(r).split("Latencies in ms")[0]
    assert "<th>cancelled</th>" not in render_html(r) and "<properties>" not in render_junit(r)
    assert "after_stop" not in r.to_json()["server"]
