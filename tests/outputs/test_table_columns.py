"""The per-class tables show a workload's metrics (reasoning, tool calls) only in runs that measured them."""

from slogate.slo.gate.judge import judge
from slogate.slo.gate.latency_metrics import BY_NAME, LATENCY, TABLE_COLUMNS, table_columns
from slogate.slo.gate.metrics import MetricsStore
from slogate.slo.gate.record import RequestRecord
from slogate.slo.gate.report import RunInfo
from slogate.slo.gate.spec import parse_spec
from slogate.slo.outputs.html import render_html
from slogate.slo.outputs.render import render_markdown


def outputs(**fields: int) -> tuple[str, str]:
    """Markdown and HTML of a judged run of 5 requests, each with these record fields."""
    store = MetricsStore()
    for i in range(5):
        store.add(RequestRecord("shared", 100.0 + i, e2e_us=300_000, ttft_us=50_000, itl_us=[10_000] * 4,
                                completion_tokens=5, **fields))  # fmt: skip
    report = judge(
        parse_spec({"slos": [{"metric": "ttft", "percentile": 95, "max_ms": 1000}], "min_samples": 1, "warmup_s": 0}),
        store,
        RunInfo(),
    )
    return render_markdown(report), render_html(report)


def test_a_plain_chat_run_shows_no_reasoning_or_tool_call_columns() -> None:
    markdown, html = outputs(ttfo_us=50_000)  # without reasoning TTFO equals TTFT
    for title in ("TTFO p95", "reasoning p50", "TTFTC p95"):
        assert title not in markdown and f"<th>{title}</th>" not in html
    assert "| TTFT p50 |" in markdown and "<th>TTFT p95</th>" in html


def test_a_run_that_reasoned_or_called_tools_shows_their_columns() -> None:
    markdown, html = outputs(ttfo_us=250_000, reasoning_us=200_000, reasoning_tokens=6)
    assert "| TTFO p95 | reasoning p50 |" in markdown and "<th>TTFO p95</th><th>reasoning p50</th>" in html
    assert "TTFTC" not in markdown
    markdown, html = outputs(ttfo_us=50_000, ttftc_us=60_000)
    assert "| TTFTC p95 |" in markdown and "<th>TTFTC p95</th>" in html and "TTFO" not in markdown


def test_every_shown_if_names_a_metric_and_an_empty_summary_keeps_the_core_columns() -> None:
    assert all(m.shown_if in BY_NAME for m in LATENCY if m.shown_if)
    core = table_columns({})
    assert core == tuple((m, p) for m, p in TABLE_COLUMNS if m.shown_if is None) and len(core) < len(TABLE_COLUMNS)
