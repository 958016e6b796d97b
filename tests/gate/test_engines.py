"""The server figures from each engine's `/metrics`: vLLM's (a real scrape of vLLM 0.32.0), SGLang's
and TGI's (built from their source at 0.5.23 and 3.3.7, tests/data/metrics/make_fixtures.py), and
from a server that is none of them."""

import pytest
from slogate.slo.gate.engines import SGLANG, TGI, UNKNOWN, VLLM, detect, title
from slogate.slo.gate.evaluate import evaluate
from slogate.slo.gate.facts import utc_iso
from slogate.slo.gate.metrics import MetricsStore
from slogate.slo.gate.report import Report, RunInfo
from slogate.slo.gate.server_figures import ServerFigures, ServerMetrics, parse
from slogate.slo.gate.spec import parse_spec
from slogate.slo.gate.verdict import Verdict
from slogate.slo.outputs.render import render_markdown

from tests.conftest import DATA

DATA = DATA / "metrics"
T0 = 1_764_662_400.0
# A llama.cpp server's names (tools/server/server.cpp): an OpenAI-compatible server slogate reads no figures from.
LLAMA_CPP = """# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed.
# TYPE llamacpp:prompt_tokens_total counter
llamacpp:prompt_tokens_total {prompt}
# HELP llamacpp:requests_processing Number of requests processing.
# TYPE llamacpp:requests_processing gauge
llamacpp:requests_processing 3
"""


def scrape(name: str, i: int) -> dict[str, float]:
    return parse((DATA / f"{name}-{i}.prom").read_text())


def figures(name: str) -> ServerFigures:
    """The figures of the fixture's two scrapes, five seconds apart."""
    m = ServerMetrics()
    for i in (1, 2):
        m.add(scrape(name, i), at=T0 + 5 * i)
    return m.summary()


@pytest.mark.parametrize(("name", "engine"), [("vllm-0.32.0", VLLM), ("sglang-0.5.23", SGLANG), ("tgi-3.3.7", TGI)])
def test_each_fixture_is_detected_as_its_engine(name: str, engine: object) -> None:
    assert detect(scrape(name, 2)) is engine
    assert figures(name).engine == engine.name  # type: ignore[attr-defined]


def test_a_real_vllm_scrape_gives_todays_figures_and_no_engine_key() -> None:
    s = figures("vllm-0.32.0")
    assert s.prefix_cache_queried_tokens == 25088 - 12 and s.prefix_cache_hit_rate == round(21760 / 25076, 4)
    assert s.preemptions == 0 and s.num_requests_running_max == 8 and s.kv_cache_usage_max == 0.0021
    assert s.server_ttft.count == 18  # ten prefix hits and eight long requests streaming at the scrape
    assert s.server_ttft.mean == round((0.5033473968505859 - 0.0666961669921875) / 18 * 1000, 3)
    assert s.server_ttft.note == "interpolated within vLLM's coarse buckets"
    assert "engine" not in s.to_json()  # a vLLM report reads as before engines were told apart


def test_sglang_figures_read_its_counters_gauges_and_ttft() -> None:
    """40 requests on a 3,000-token prefix: the first computes it, 39 find it cached."""
    s = figures("sglang-0.5.23")
    assert s.available and s.engine == "sglang"
    assert s.prefix_cache_queried_tokens == 40 * 3200 and s.prefix_cache_hit_rate == round(39 * 3000 / 128_000, 4)
    assert s.preemptions == 2  # retractions: absent from the first scrape (none yet), not missing
    assert (s.kv_cache_usage_max, s.num_requests_waiting_max, s.num_requests_running_max) == (0.41, 5, 12)
    assert s.server_ttft.count == 40 and s.server_ttft.mean == 140.0
    assert (s.server_ttft.p50, s.server_ttft.p95) == (131.25, 375.0)  # in SGLang's 100 ms-wide buckets
    assert s.server_ttft.note == "interpolated within SGLang's coarse buckets"
    assert s.series["prefix_cache_hit_rate"] == [None, 0.9141]
    assert s.to_json()["engine"] == "sglang" and ServerFigures.from_json(s.to_json()) == s


def test_tgi_gives_its_queue_and_batch_and_nothing_it_lacks() -> None:
    s = figures("tgi-3.3.7")
    assert s.available and s.engine == "tgi"
    assert (s.num_requests_waiting_max, s.num_requests_waiting_mean) == (7, 3.5)
    assert (s.num_requests_running_max, s.num_requests_running_mean) == (16, 8)
    assert s.prefix_cache_hit_rate is s.preemptions is s.kv_cache_usage_max is s.server_ttft is None
    out = s.to_json()
    assert "server_ttft_ms" not in out and "kv_cache_usage_max" not in out and out["engine"] == "tgi"


def test_an_slo_on_a_figure_tgi_lacks_is_not_judged_and_one_it_has_is() -> None:
    spec = parse_spec(
        {"slos": [{"metric": "num_requests_waiting", "max": 5}, {"metric": "prefix_cache_hit_rate", "min": 0.5}]}
    )
    verdict = evaluate(spec, MetricsStore(), server=figures("tgi-3.3.7"))
    assert [r.result for r in verdict.results] == ["fail", "insufficient_data"]


def test_a_lazy_engine_shows_its_names_only_after_its_first_request() -> None:
    """A fresh SGLang server's first scrape holds none of its names (prometheus_client makes a
    labelled metric at its first use): the engine is told by a later scrape, and a counter that
    never appeared (no prefix ever cached, no retraction) is zero, not missing."""
    m = ServerMetrics()
    m.add({"process_cpu_seconds_total": 1.0}, at=T0)
    m.add({"sglang:prompt_tokens_total": 1000.0, "sglang:num_queue_reqs": 2.0}, at=T0 + 5)
    m.add({"sglang:prompt_tokens_total": 3000.0, "sglang:num_queue_reqs": 0.0}, at=T0 + 10)
    s = m.summary()
    assert s.engine == "sglang" and s.prefix_cache_queried_tokens == 3000
    assert s.prefix_cache_hit_rate == 0.0 and s.preemptions == 0 and s.num_requests_waiting_max == 2
    assert s.series["prefix_cache_hit_rate"] == [None, None, 0.0]


def test_a_restarted_sglang_servers_lazy_counters_count_from_zero() -> None:
    """After the restart the cache counter is absent until the new server's first hit: its old
    value must neither hide the new hits nor, when they stay below it, read as a second restart."""
    m = ServerMetrics()
    m.add(scrape("sglang-0.5.23", 1), at=T0)
    m.add(scrape("sglang-0.5.23", 2), at=T0 + 5)  # 117,000 cached of 128,000
    m.add(scrape("sglang-0.5.23", 1), at=T0 + 10)  # restarted: 2,500 unique tokens, nothing cached
    cached = {"sglang:prompt_tokens_total": 12_500.0, "sglang:cached_tokens_total": 6000.0}
    m.add({**scrape("sglang-0.5.23", 1), **cached}, at=T0 + 15)
    s = m.summary()
    assert s.restarts == (utc_iso(T0 + 10),)
    assert s.prefix_cache_queried_tokens == 128_000 + 2500 + 10_000
    assert s.prefix_cache_hit_rate == round((117_000 + 6000) / 140_500, 4)
    assert s.series["prefix_cache_hit_rate"] == [None, 0.9141, 0.0, 0.6]


def test_a_server_with_none_of_the_engines_names_has_no_figures_and_says_why() -> None:
    m = ServerMetrics()
    m.add(parse(LLAMA_CPP.format(prompt=10)), at=T0)
    m.add(parse(LLAMA_CPP.format(prompt=900)), at=T0 + 5)
    s = m.summary()
    assert detect(parse(LLAMA_CPP.format(prompt=1))) is UNKNOWN
    assert not s.available and s.scrapes == 2
    assert s.error == "its /metrics has none of the names of vLLM, SGLang, TGI: no server figures (docs/engines.md)"
    report = Report(Verdict.UNGATED, [], RunInfo(target="http://127.0.0.1:8080"), MetricsStore(), server=s)
    assert f"Server figures unavailable: {s.error}." in render_markdown(report)


def test_a_report_without_an_engine_is_vllms_and_stays_without_one() -> None:
    old = {"available": True, "scrapes": 2, "prefix_cache_hit_rate": 0.5, "preemptions": 0.0}
    s = ServerFigures.from_json(old)
    assert s.engine == "vllm" and "engine" not in s.to_json()


def test_the_reports_can_name_the_engine() -> None:
    assert [title(e.name) for e in (VLLM, SGLANG, TGI)] == ["vLLM", "SGLang", "TGI"] and title("other") == "other"
