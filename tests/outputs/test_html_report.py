"""`slo-report.html`: self-contained (no request leaves the page), small, and drawn for real in
headless Chromium.

The browser test writes its screenshots under pytest's tmp_path (and test-artifacts/); with
`SLOGATE_UPDATE_DOCS=1` it also regenerates the README's docs/html-report.png. Tests never write
tracked files otherwise."""

import json
import math
import os
import random
import re
import shutil
import time
from dataclasses import replace
from pathlib import Path

import pytest
from slogate.slo.gate.facts import utc_iso
from slogate.slo.gate.judge import judge
from slogate.slo.gate.latency_metrics import INTERVAL_METRICS
from slogate.slo.gate.metrics import MetricsStore
from slogate.slo.gate.record import ErrorKind, RequestRecord, conversation_tags
from slogate.slo.gate.report import Report, RunInfo
from slogate.slo.gate.server_figures import ServerFigures, ServerMetrics
from slogate.slo.gate.spec import goodput_targets, parse_spec
from slogate.slo.outputs.html import CSP, HTML_NAME, render_html, write_html
from slogate.slo.outputs.render import render_markdown, write_reports

from tests.conftest import ROOT

DOCS = ROOT / "docs"
UPDATE_DOCS = os.environ.get("SLOGATE_UPDATE_DOCS") == "1"  # regenerate docs/*.png (see the docstring)
T0 = 1_764_662_400.0
SPEC = parse_spec(
    {
        "slos": [
            {"name": "ttft-p95-shared", "metric": "ttft", "percentile": 95, "max_ms": 200, "class": "shared"},
            {"name": "ttft-p95-unique", "metric": "ttft", "percentile": 95, "max_ms": 1500, "class": "unique"},
            {"name": "e2e-p99", "metric": "e2e", "percentile": 99, "max_ms": 3000},
            {"name": "errors", "metric": "error_rate", "max": 0.02},
            {"name": "good", "metric": "goodput", "min": 0.9, "ttft_ms": 1500, "tpot_ms": 20},
        ],
        "min_samples": 20,
    }
)


def synthetic_run(duration_s: float, rate: float, tokens: int = 32, seed: int = 1, scrape_s: float = 2.0) -> Report:
    """Shared prefixes answer in ~60 ms, unique ones in ~700 ms; every 10 minutes the server
    slows down for a minute (TTFT x3, requests queue, the KV cache fills), and 1% time out."""
    rng = random.Random(seed)
    store = MetricsStore()
    store.set_goodput_targets(goodput_targets(SPEC))
    t = T0 + 5.0
    turn = 0
    while t < T0 + duration_s:
        cls = "shared" if rng.random() < 0.6 else "unique"
        slow = 3.0 if (t - T0) % 600 > 540 else 1.0
        ttft = int(rng.lognormvariate(0, 0.25) * (60_000 if cls == "shared" else 700_000) * slow)
        itl = [int(rng.lognormvariate(0, 0.3) * 6_000) for _ in range(tokens)]
        err = ErrorKind.TIMEOUT if rng.random() < 0.01 * slow else None
        turn = turn % 3 + 1  # conversations of three turns: tags next to the classes
        cached = 2048 if cls == "shared" else 0
        store.add(
            RequestRecord(
                cls, t, e2e_us=ttft + sum(itl), ttft_us=None if err else ttft, itl_us=[] if err else itl,
                prompt_tokens=3000, completion_tokens=None if err else tokens + 1, error_kind=err,
                cached_tokens=None if err else cached + (turn - 1) * 400, tags=conversation_tags(turn),
            )
        )  # fmt: skip
        t += rng.expovariate(rate)
    server = ServerMetrics()
    for i in range(int(duration_s / scrape_s) + 1):
        at = T0 + i * scrape_s
        slow = (at - T0) % 600 > 540
        server.add(
            {
                "vllm:kv_cache_usage_perc": min(1.0, 0.3 + 0.5 * slow + 0.05 * rng.random()),
                "vllm:num_requests_waiting": float(rng.randint(3, 8) if slow else rng.randint(0, 1)),
                "vllm:num_requests_running": float(rng.randint(2, 4)),
                "vllm:prefix_cache_hits_total": 1800.0 * i * (0.55 + 0.05 * rng.random()),
                "vllm:prefix_cache_queries_total": 3000.0 * i,
            },
            at=at,
        )
    run = RunInfo(
        target="http://vllm.internal:8000",
        model="Qwen/Qwen2.5-7B-Instruct",
        started_at=utc_iso(T0),
        ended_at=utc_iso(T0 + duration_s),
        duration_s=duration_s,
        warmup_s=5.0,
        users=8,
        slo_file="slo.yaml",
        workload={"seed": 0, "shared_prefix_tokens": 3000, "max_tokens": tokens + 1, "prompt_nonce": "a1", "turns": 3},
        command="locust -f chat.py --host http://vllm.internal:8000 --slo-file slo.yaml -u 8 -r 8 -t 10m",
    )
    return judge(SPEC, store, run, server.summary())


def test_one_file_with_everything_inline_and_no_address_to_fetch(tmp_path: Path) -> None:
    report = synthetic_run(300, 5)
    html = render_html(report)
    assert f'content="{CSP}"' in html and "default-src 'none'" in CSP
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", html)  # no script, style or image from anywhere
    assert not re.search(r"url\(\s*['\"]?(https?:)?//", html)
    assert "<script src" not in html and '<link rel="stylesheet"' not in html
    for name in ("ttft-p95-shared", "ttft-p95-unique", "e2e-p99", "errors"):
        assert name in html
    assert f'data-verdict="{report.verdict}"' in html and report.run.command in html
    data = json.loads(re.search(r'<script id="slogate-data" type="application/json">(.*?)</script>', html, re.S)[1])
    run = data["runs"][0]
    assert run["series"]["classes"] == ["all", "shared", "unique"] and len(run["series"]["t"]) == 59  # 5 s to 300 s
    assert [t["max_ms"] for t in run["targets"]] == [200, 1500, 3000]
    assert len(run["server"]["t"]) == 151 and run["curves"]["ttft"]["shared"][0] is not None


def test_with_a_baseline_its_percentile_curves_are_drawn_beside_the_runs(tmp_path: Path) -> None:
    base = synthetic_run(300, 5, seed=7)
    current = synthetic_run(300, 5)
    report = judge(SPEC, current.measurements, current.run, current.server, base.as_baseline())
    html = render_html(report)
    run = json.loads(re.search(r'<script id="slogate-data" type="application/json">(.*?)</script>', html, re.S)[1])
    curves, baseline = run["runs"][0]["curves"], run["runs"][0]["baseline_curves"]
    assert (
        set(baseline["ttft"]) == {"all", "shared", "unique"} and baseline["ttft"]["shared"] != curves["ttft"]["shared"]
    )
    grid = run["grids"]["ttft"]
    p90 = grid.index(10.0)  # x = 1 / (1 - q): the 90th percentile
    assert baseline["ttft"]["all"][p90] == round(
        base.measurements.get("all").latency["ttft"].percentiles_ms([90])[0], 3
    )
    assert '"baseline " + c' in html  # the page draws them (report-boot.js)
    plain = json.loads(
        re.search(r'<script id="slogate-data" type="application/json">(.*?)</script>', render_html(current), re.S)[1]
    )
    assert plain["runs"][0]["baseline_curves"] is None


def test_the_rate_of_a_partial_first_or_last_interval_is_over_the_time_it_covered() -> None:
    from slogate.slo.outputs.charts import chart_data, percentile_grid

    report = synthetic_run(302, 5)  # requests from T0 + 5 to T0 + 302 (its end, to the second): intervals of 5 s
    run = replace(report.run, started_at=utc_iso(T0 + 1.0), warmup_s=5.0)  # measured from T0 + 6
    series = chart_data(replace(report, run=run), {m: percentile_grid(10) for m in INTERVAL_METRICS})["series"]
    covered = series["covered_s"]
    assert series["t"][0] == T0 + 5 and covered[0] == 4.0  # [T0 + 6, T0 + 10)
    assert set(covered[1:-1]) == {5.0} and covered[-1] == 2.0  # [T0 + 300, T0 + 302]
    requests = series["requests"]["all"]
    whole = sum(requests[1:-1]) / (5.0 * (len(requests) - 2))
    assert abs(requests[-1] / covered[-1] - whole) < whole  # the rate, not half of it


def test_an_hour_stays_well_under_3_mb(tmp_path: Path) -> None:
    """720 intervals of 5 s, two classes and three turns' tags, a scrape every 2 s: the page carries
    per-interval percentiles, not histograms (its size follows the intervals, not the requests: a
    request a second, 369 KB; three, 380 KB)."""
    report = synthetic_run(3600, 1, tokens=16)
    started = time.perf_counter()
    paths = write_reports(report, tmp_path)
    took = time.perf_counter() - started
    size = paths["html"].stat().st_size
    print(f"one-hour run: slo-report.html {size / 1e6:.2f} MB, slo-report.json "
          f"{paths['json'].stat().st_size / 1e6:.2f} MB, slo-intervals.hlog {paths['hlog'].stat().st_size / 1e6:.2f} "
          f"MB, all files in {took:.1f} s")  # fmt: skip
    assert size < 1_000_000  # the bound is 3 MB
    data = json.loads(re.search(r'type="application/json">(.*?)</script>', paths["html"].read_text(), re.S)[1])
    assert len(data["runs"][0]["series"]["t"]) == 719  # from 5 s on


def test_several_reports_make_one_comparison_page(tmp_path: Path) -> None:
    before, after = synthetic_run(300, 5, seed=1), synthetic_run(300, 5, seed=2)
    path = write_html({"cpu-demo-baseline": before, "cpu-demo": after}, tmp_path / "comparison.html")
    html = path.read_text()
    assert "Comparison (2 runs" in html and "cpu-demo-baseline" in html and html.count('data-chart="overlay-') == 6
    assert html.count('<section class="run"') == 2


def test_a_report_without_measurements_still_renders(tmp_path: Path) -> None:
    from slogate.slo.gate.judge import usage_error

    paths = write_reports(usage_error("slo.yaml: slos[0]: field 'max_ms': required"), tmp_path)
    html = paths["html"].read_text()
    assert 'data-verdict="error"' in html and "field &#x27;max_ms&#x27;: required" in html
    assert (tmp_path / "slo-intervals.hlog").read_text().startswith("#[slogate interval log")


def browser():
    found = (shutil.which("chromium") or shutil.which("chromium-browser"), shutil.which("chromedriver"))
    if not all(found):
        if os.environ.get("SLOGATE_REQUIRE_BROWSER") == "1":
            pytest.fail("Chromium and chromedriver are required (apt-get install chromium chromium-driver)")
        pytest.skip("Chromium/chromedriver not installed")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = found[0]
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
                "--disable-background-networking", "--disable-component-update", "--disable-sync",
                "--window-size=1280,1400", "--hide-scrollbars"):  # fmt: skip
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"performance": "ALL", "browser": "ALL"})
    return webdriver.Chrome(service=Service(found[1]), options=options)


# For every chart: pixels drawn, and pixels in the colour of its first data series (uPlot draws
# axes and grid on the same canvas, so "not blank" means the series' own colour is there).
INK = """
function near(d, i, rgb) {
  return Math.abs(d[i] - rgb[0]) < 40 && Math.abs(d[i + 1] - rgb[1]) < 40 && Math.abs(d[i + 2] - rgb[2]) < 40;
}
var colours = {"latency-time": [44,160,44], "rate-time": [31,119,180], "percentiles": [44,160,44],
               "server-time": [111,66,193], "overlay-time": [31,119,180], "overlay-percentiles": [31,119,180]};
return Array.prototype.map.call(document.querySelectorAll("[data-chart]"), function (el) {
  var c = el.querySelector("canvas"), kind = el.getAttribute("data-chart");
  if (!c) return [kind, el.getAttribute("data-error"), 0, 0];
  var d = c.getContext("2d").getImageData(0, 0, c.width, c.height).data, inked = 0, coloured = 0;
  for (var i = 0; i < d.length; i += 4) {
    if (d[i+3] > 128) { inked++; if (near(d, i, colours[kind])) coloured++; }
  }
  return [kind, el.getAttribute("data-error"), inked, coloured];
});
"""


def open_page(driver, path: Path) -> list:
    driver.get(path.as_uri())
    deadline = time.monotonic() + 30
    while not driver.execute_script("return document.body.getAttribute('data-charts-ready')"):
        assert time.monotonic() < deadline, "the charts were not drawn"
        time.sleep(0.2)
    return [json.loads(e["message"])["message"] for e in driver.get_log("performance")]


def test_in_chromium_nothing_leaves_the_page_and_every_chart_is_drawn(tmp_path: Path) -> None:
    """Also the README's screenshot: into tmp_path, and docs/html-report.png with SLOGATE_UPDATE_DOCS=1."""
    run = synthetic_run(900, 4)  # with a baseline: its curves drawn dashed beside the run's
    report = judge(SPEC, run.measurements, run.run, run.server, synthetic_run(600, 4, seed=5).as_baseline())
    path = write_reports(report, tmp_path)["html"]
    compare = write_html({"baseline": synthetic_run(600, 4, seed=3), "tuned": report}, tmp_path / "comparison.html")
    driver = browser()
    try:
        for page in (path, compare):
            events = open_page(driver, page)
            requested = [m["params"]["request"]["url"] for m in events if m["method"] == "Network.requestWillBeSent"]
            assert requested == [page.as_uri()], requested  # the page itself, nothing else
            failures = [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]
            assert not failures, failures  # no script error, no blocked request (CSP violations log here)
            ink = driver.execute_script(INK)
            assert len(ink) == (6 if page == path else 6 + 12)
            for kind, error, inked, coloured in ink:
                assert error is None, (kind, error)
                assert inked > 2000 and coloured > 100, (kind, inked, coloured)
            text = driver.find_element("tag name", "body").text
            for name in ("ttft-p95-shared", "ttft-p95-unique", "e2e-p99", "errors"):
                assert name in text
            assert "FAIL" in text or "PASS" in text
        driver.get(path.as_uri())
        open_page(driver, path)
        assert driver.execute_script("return document.querySelector('.verdict').textContent") == report.verdict.upper()
        driver.set_window_size(1280, 1500)
        time.sleep(0.3)
        shot = (DOCS if UPDATE_DOCS else tmp_path) / "html-report.png"
        assert driver.save_screenshot(str(shot)) and shot.stat().st_size > 10_000
        height = driver.execute_script("return document.body.scrollHeight")
        driver.set_window_size(1280, min(height + 40, 8000))
        time.sleep(0.3)
        artifacts = Path(os.environ.get("SLOGATE_ARTIFACTS", ROOT / "test-artifacts"))
        artifacts.mkdir(parents=True, exist_ok=True)
        driver.save_screenshot(str(artifacts / "html-report-full.png"))
        open_page(driver, compare)
        driver.set_window_size(1280, 1500)
        time.sleep(0.3)
        driver.save_screenshot(str(artifacts / "html-report-compare.png"))
    finally:
        driver.quit()
    assert math.isfinite(path.stat().st_size) and path.name == HTML_NAME


TRACE = {
    "file": "mooncake.jsonl", "requests": 120, "block_tokens": 16, "speedup": 2.0,
    "implied_token_hit_rate": 0.501, "implied_block_hit_rate": 0.52, "exact": True,
}  # fmt: skip


def trace_report(trace: dict | None, server: dict | None) -> Report:
    store = MetricsStore()
    for i in range(10):
        store.add(RequestRecord("shared", T0 + i, e2e_us=90_000, ttft_us=50_000, prompt_tokens=100))
    figures = ServerFigures.from_json(server) if server is not None else None
    return judge(SPEC, store, RunInfo(workload={"trace": trace} if trace else {}), figures)


def test_a_trace_replays_implied_hit_rate_is_shown_next_to_the_servers(tmp_path: Path) -> None:
    server = {"available": True, "scrapes": 30, "prefix_cache_hit_rate": 0.494}
    paths = write_reports(trace_report(TRACE, server), tmp_path)
    sentence = "Prefix-cache hit rate implied by the trace 0.501 vs measured by the server 0.494"
    markdown, html = paths["markdown"].read_text(), paths["html"].read_text()
    assert sentence in markdown and sentence in html
    details = "over blocks 0.520; trace mooncake.jsonl: 120 requests; 16-token blocks; speedup 2x"
    assert details in markdown and details in html
    assert "approximate" not in markdown
    # Prompts that are not token-exact, and a server without /metrics, are said as such.
    rough = render_markdown(trace_report({**TRACE, "exact": False}, {"available": False, "error": "HTTP 404"}))
    assert "measured by the server not measured (/metrics: HTTP 404)" in rough and "approximate" in rough
    assert "not measured (/metrics not scraped)" in render_markdown(trace_report(TRACE, None))
    # Scraped, but without the figure: said so, never "no /metrics" after the scrapes were counted.
    scraped = {"available": True, "scrapes": 4, "prefix_cache_queried_tokens": 0}
    counted_none = render_markdown(trace_report(TRACE, scraped))
    assert "(vllm /metrics, 4 scrapes)" in counted_none.lower()
    assert "not measured (4 scrapes of /metrics; its prefix-cache counters counted no query)" in counted_none
    no_counters = render_markdown(trace_report(TRACE, {"available": True, "scrapes": 4}))
    assert "not measured (4 scrapes of /metrics, without prefix-cache counters)" in no_counters
    # No trace: no such line.
    plain = trace_report(None, server)
    assert "implied by the trace" not in render_markdown(plain) and "implied by the trace" not in render_html(plain)


def test_an_open_loop_runs_users_are_said_to_be_senders() -> None:
    closed = replace(synthetic_run(60, 2).run, users=4)
    opened = replace(closed, workload={"open_loop": {"rate_per_user": 5.0, "max_in_flight": 64}})
    assert "<th>users</th><td>4</td>" in render_html(judge(SPEC, MetricsStore(), closed))
    said = "<th>users</th><td>4 (open loop: 5 arrivals/s each, 20/s in all)</td>"
    assert said in render_html(judge(SPEC, MetricsStore(), opened))
