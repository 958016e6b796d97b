"""The time series: per-interval histograms, merged exactly across workers, bounded in memory, in
the wire form and saved reports, and written as an HdrHistogram interval log that HdrHistogram's
own readers read back to the report's totals."""

import json
import random
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from hdrh.histogram import HdrHistogram
from hdrh.log import HistogramLogReader
from slogate.slo.gate.histogram import HIGHEST_US, LOWEST_US, SIGNIFICANT_DIGITS, LatencyHistogram, record_many_us
from slogate.slo.gate.intervals import INTERVAL_METRICS, LIVE_INTERVALS, IntervalSeries, pack_figures, unpack_figures
from slogate.slo.gate.judge import judge
from slogate.slo.gate.metrics import MetricsStore
from slogate.slo.gate.record import ALL, ErrorKind, RequestRecord
from slogate.slo.gate.report import Report, RunInfo
from slogate.slo.gate.server_figures import ServerMetrics
from slogate.slo.gate.spec import parse_spec
from slogate.slo.outputs.hlog import HLOG_NAME, render_hlog, write_hlog
from slogate.slo.outputs.render import write_reports
from slogate.slo.rejudge import judge_file

T0 = 1_764_662_400.25  # a run start that is not on an interval boundary


def records(n: int, seed: int = 1, rate: float = 20.0, t0: float = T0, classes=("shared", "unique")) -> list:
    """A mix of successes, failures, unfinished and dropped requests over n / rate seconds."""
    rng = random.Random(seed)
    out, t = [], t0
    for _ in range(n):
        cls = rng.choice(classes)
        ttft = int(rng.lognormvariate(11, 0.5))
        itl = [int(rng.lognormvariate(8.5, 0.4)) for _ in range(rng.randint(0, 40))]
        roll = rng.random()
        kind = (
            ErrorKind.TIMEOUT
            if roll < 0.03
            else ErrorKind.HTTP_5XX
            if roll < 0.05
            else ErrorKind.UNFINISHED
            if roll < 0.07
            else ErrorKind.DROPPED
            if roll < 0.08
            else None
        )
        waiting = kind == ErrorKind.UNFINISHED and rng.random() < 0.5
        out.append(
            RequestRecord(
                cls,
                t,
                e2e_us=ttft + sum(itl),
                ttft_us=None if kind in (ErrorKind.TIMEOUT, ErrorKind.HTTP_5XX) or waiting else ttft,
                itl_us=[] if kind else itl,
                prompt_tokens=100,
                completion_tokens=None if kind else len(itl) + 1,
                error_kind=kind,
            )
        )
        t += rng.expovariate(rate)
    return out


def store_of(recs, interval_s: float = 5.0) -> MetricsStore:
    store = MetricsStore(interval_s)
    for r in recs:
        store.add(r)
    return store


def test_bulk_recording_gives_the_same_histogram_as_one_value_at_a_time() -> None:
    rng = random.Random(7)
    for n in (0, 1, 7, 8, 64, 1000):
        values = [int(10 ** rng.uniform(0, 9.7)) for _ in range(n)] + [0, -3, HIGHEST_US + 5][: n % 4]
        one, bulk = LatencyHistogram(), LatencyHistogram()
        for v in values:
            one.record_us(v)
        record_many_us(bulk, values)
        assert one.encode() == bulk.encode() and one.count == bulk.count == len(values)
        assert one.max_ms() == bulk.max_ms() and one.percentiles_ms([50, 99]) == bulk.percentiles_ms([50, 99])


def test_intervals_add_up_to_the_totals_of_every_class() -> None:
    store = store_of(records(3000))
    series = store.intervals
    for metric in INTERVAL_METRICS:
        totals = series.totals(metric)
        for cls in store.class_names():
            assert totals.get(cls, 0) == store.get(cls).latency[metric].count, (metric, cls)
    chart = series.series()
    for cls in store.class_names():
        total = store.get(cls)
        assert sum(chart["requests"][cls]) == total.requests
        assert sum(chart["failures"][cls]) == total.failures
        assert sum(chart["latency"]["ttft"][cls]["count"]) == total.latency["ttft"].count
    assert {k: sum(v) for k, v in chart["errors_by_kind"].items()} == dict(store.get(ALL).errors_by_kind)
    assert sum(chart["output_tokens"]) == store.get(ALL).output_tokens


def test_an_interval_is_whole_seconds_of_unix_time_so_processes_agree_without_talking() -> None:
    series = IntervalSeries(5.0)
    series.add(RequestRecord("shared", 1000.0, e2e_us=10, ttft_us=5))
    series.add(RequestRecord("shared", 1004.999, e2e_us=10, ttft_us=5))
    series.add(RequestRecord("shared", 1005.0, e2e_us=10, ttft_us=5))
    assert list(series) == [200, 201]
    chart = series.series()
    assert chart["t"] == [1000.0, 1005.0] and chart["latency"]["ttft"]["shared"]["count"] == [2, 1]


def test_percentiles_per_interval_are_the_merged_histograms_nearest_rank() -> None:
    store = store_of(records(2000, seed=3))
    series = store.intervals
    for i, idx in enumerate(series.indexes()[:20]):
        for cls, h in series.histograms(idx, "ttft").items():
            stats = series.stats(idx)["ttft"][cls]
            assert stats[0] == h.count
            assert stats[1] == [round(v, 3) for v in h.percentiles_ms((50, 95, 99))], (i, cls)
    # Closed intervals keep their figures packed (~0.4 KB each): unpacked, exactly the figures
    # computed afresh from their histograms.
    for idx in series.indexes()[:-LIVE_INTERVALS]:
        assert idx in series._stats and series.stats(idx) == series._compute_stats(idx)


def test_packed_figures_unpack_to_the_same_figures_with_absent_classes_absent() -> None:
    figures = {
        "ttft": {ALL: (3, [1.5, 2.25, 3.0]), "shared": (2, [1.5, 2.25, 2.25]), "unique": (1, [3.0, 3.0, 3.0])},
        "ttfo": {ALL: (0, None)},  # no TTFO at all
        "itl": {ALL: (4, [0.125, 0.5, 0.5]), "shared": (4, [0.125, 0.5, 0.5])},  # unique: no ITL
        "e2e": {ALL: (0, None)},  # no E2E at all
    }
    assert unpack_figures(pack_figures(figures)) == figures
    counts = [count for metric in unpack_figures(pack_figures(figures)).values() for count, _ in metric.values()]
    assert all(type(c) is int for c in counts)


def test_memory_stays_bounded_closed_intervals_are_encoded() -> None:
    """Ten minutes of 1 s intervals (150 times LIVE_INTERVALS): only the most recently touched
    intervals keep live histograms (each ~190 KB); the rest are compressed text, under 1 KB an
    interval (an hour's 3,600 under 3 MB). A late record reopens its interval, which the next new
    interval closes again."""
    recs = records(1200, seed=5, rate=2.0)
    store = store_of(recs, interval_s=1.0)
    series = store.intervals
    live = [idx for idx, by in series.intervals.items() if any(ci.live for ci in by.values())]
    assert len(live) <= LIVE_INTERVALS and len(series.intervals) > 450
    encoded = sum(len(t) for by in series.intervals.values() for ci in by.values() for t in ci.encoded.values())
    assert 0 < encoded < 500_000  # bytes of base64 for ~600 intervals x 2 classes x 3 metrics
    late = RequestRecord("shared", recs[10].started_at, e2e_us=999, ttft_us=777)
    before = series.totals("ttft")["shared"]
    store.add(late)
    assert series.totals("ttft")["shared"] == before + 1
    assert len([i for i, by in series.intervals.items() if any(ci.live for ci in by.values())]) <= LIVE_INTERVALS


def test_workers_merge_exactly_by_interval_index() -> None:
    """Three workers, each shipping its samples every 40 records as the wire form, give the master
    exactly the intervals of one process that saw every record."""
    recs = records(1200, seed=11)  # 60 s: 12 intervals, each merged from several shipments
    single = store_of(recs)
    rng = random.Random(2)
    workers = [MetricsStore() for _ in range(3)]
    master = MetricsStore()
    for n, r in enumerate(recs):
        workers[rng.randrange(3)].add(r)
        if n % 40 == 0:
            for i, w in enumerate(workers):
                master.merge(MetricsStore.from_wire(json.loads(json.dumps(w.to_wire()))))
                workers[i] = MetricsStore()
    for w in workers:
        master.merge(MetricsStore.from_wire(w.to_wire()))
    assert master.intervals.series() == single.intervals.series()
    assert render_hlog(master.intervals) == render_hlog(single.intervals)
    for metric in INTERVAL_METRICS:
        assert master.intervals.totals(metric) == single.intervals.totals(metric)


def test_intervals_of_another_length_are_not_mixed_in() -> None:
    a, b = store_of(records(100), 5.0), store_of(records(100, seed=2), 2.0)
    a.merge(b)
    assert a.intervals.interval_s == 5.0 and a.intervals.mismatched > 0
    assert a.intervals.totals("ttft")[ALL] == store_of(records(100), 5.0).intervals.totals("ttft")[ALL]


def test_the_saved_report_keeps_the_time_series_and_judging_it_again_writes_it(tmp_path: Path) -> None:
    store = store_of(records(1500))
    spec = parse_spec({"slos": [{"name": "ttft-p95", "metric": "ttft", "percentile": 95, "max_ms": 500}]})
    report = judge(spec, store, RunInfo(target="http://h:1", started_at="2025-12-02T08:00:00Z"))
    paths = write_reports(report, tmp_path / "live")
    saved = json.loads(paths["json"].read_text())
    assert saved["measurements"]["intervals"]["interval_s"] == 5.0
    again = Report.from_json(saved)
    assert again.measurements.intervals.series() == store.intervals.series()
    slo = tmp_path / "slo.yaml"
    slo.write_text("slos:\n  - {name: ttft-p95, metric: ttft, percentile: 95, max_ms: 500}\nmin_samples: 5\n")
    judge_file(str(paths["json"]), str(slo), str(tmp_path / "judged"))
    assert (tmp_path / "judged" / HLOG_NAME).read_text() == (tmp_path / "live" / HLOG_NAME).read_text()
    assert "TTFT p50 (dashed) and p95 over time" in (tmp_path / "judged" / "slo-report.html").read_text()


def read_back(path: Path) -> dict[str, list]:
    """Every interval of the log through hdrh's own reader: {tag: [histogram, ...]}."""
    reader = HistogramLogReader(str(path), HdrHistogram(LOWEST_US, HIGHEST_US, SIGNIFICANT_DIGITS))
    out: dict[str, list] = {}
    while (h := reader.get_next_interval_histogram()) is not None:
        out.setdefault(h.get_tag(), []).append(h)
    reader.close()
    return out


def test_the_interval_log_reads_back_with_hdrhistograms_reader_to_the_reports_totals(tmp_path: Path) -> None:
    store = store_of(records(2500, seed=4))
    path = write_hlog(store, tmp_path / HLOG_NAME)
    text = path.read_text()
    assert text.splitlines()[1] == "#[Histogram log format version 1.3]"
    assert re.search(r"^#\[StartTime: \d+\.\d{3} \(seconds since epoch\), \d{4}-", text, re.M)
    assert '"StartTimestamp","Interval_Length","Interval_Max","Interval_Compressed_Histogram"' in text
    by_tag = read_back(path)
    summary = store.summary()
    classes = ("all", "shared", "unique")
    expected_tags = {f"{m}.{c}" for m in INTERVAL_METRICS for c in classes if summary[c][f"{m}_ms"]["count"]}
    assert set(by_tag) == expected_tags
    for tag, hists in by_tag.items():
        metric, cls = tag.split(".")
        assert sum(h.get_total_count() for h in hists) == summary[cls][f"{metric}_ms"]["count"], tag
        merged = LatencyHistogram(hists[0])
        for h in hists[1:]:
            merged.merge(LatencyHistogram(h))
        assert merged.percentiles_ms([50, 99]) == store.get(cls).latency[metric].percentiles_ms([50, 99])
    # Interval_Max is in seconds (microsecond values / 1e6) and each line's start and length in seconds
    first = next(line for line in text.splitlines() if line.startswith("Tag=ttft.all,"))
    _, start, length, max_s, payload = first.split(",")
    h = LatencyHistogram.decode(payload)
    assert float(length) == 5.0 and float(start) == 0.0
    assert abs(float(max_s) - h.max_ms() / 1000) < 1e-6


def hdrhistogram_jar() -> Path | None:
    found = sorted(Path.home().glob(".m2/repository/org/hdrhistogram/HdrHistogram/*/HdrHistogram-*.jar"))
    return found[-1] if found and shutil.which("java") else None


@pytest.mark.skipif(hdrhistogram_jar() is None, reason="no java or HdrHistogram jar in ~/.m2")
def test_javas_histogram_log_processor_reads_every_tag(tmp_path: Path) -> None:
    """HdrHistogram's reference implementation reads the log: per tag, its total count is ours."""
    store = store_of(records(1200, seed=9))
    path = write_hlog(store, tmp_path / HLOG_NAME)
    summary = store.summary()
    for tag in ("ttft.all", "ttft.shared", "itl.unique", "e2e.all"):
        out = subprocess.run(
            ["java", "-cp", str(hdrhistogram_jar()), "org.HdrHistogram.HistogramLogProcessor",
             "-i", str(path), "-tag", tag, "-outputValueUnitRatio", "1000"],
            capture_output=True, text=True, timeout=60, check=True,
        ).stdout  # fmt: skip
        total = int(re.search(r"Total count\s*=\s*(\d+)", out).group(1))
        metric, cls = tag.split(".")
        assert total == summary[cls][f"{metric}_ms"]["count"], (tag, out[-500:])
        max_ms = float(re.search(r"Max\s*=\s*([\d.]+)", out).group(1))
        assert max_ms == pytest.approx(store.get(cls).latency[metric].max_ms(), rel=1e-3)


def test_server_scrapes_are_kept_as_a_time_series() -> None:
    m = ServerMetrics()
    for i in range(5):
        m.add(
            {
                "vllm:kv_cache_usage_perc": 0.1 * i,
                "vllm:num_requests_waiting": float(i),
                "vllm:num_requests_running": 2.0,
                "vllm:prefix_cache_hits_total": 30.0 * i,
                "vllm:prefix_cache_queries_total": 100.0 * i if i < 4 else 300.0,
            },
            at=1000.0 + 2 * i,
        )
    s = m.summary().series
    assert s["t"] == [1000.0, 1002.0, 1004.0, 1006.0, 1008.0]
    assert s["kv_cache_usage"][2] == 0.2 and s["num_requests_waiting"][4] == 4.0
    assert s["prefix_cache_hit_rate"] == [None, 0.3, 0.3, 0.3, None]  # no query between the last two


def test_goodput_counts_requests_meeting_every_per_request_target() -> None:
    store = MetricsStore()
    store.set_goodput_targets({ALL: {"e2e": 1000.0}, "shared": {"ttft": 100.0}})
    mk = lambda cls, ttft_ms, e2e_ms: RequestRecord(cls, T0, e2e_us=e2e_ms * 1000, ttft_us=ttft_ms * 1000)  # noqa: E731
    for rec in (mk("shared", 50, 500), mk("shared", 150, 500), mk("unique", 150, 500), mk("unique", 50, 1500)):
        store.add(rec)
    assert store.get("shared").good == 1 and store.get("unique").good == 1
    again = MetricsStore.from_wire(store.to_wire())
    assert again.get(ALL).good == 2 and again.goodput_targets_ms == store.goodput_targets_ms


def test_a_headless_run_leaves_the_interval_log_and_the_html_report(fault_server: str, locust_run, tmp_path) -> None:
    slo = tmp_path / "slo.yaml"
    slo.write_text("slos:\n  - {name: ttft-p95, metric: ttft, percentile: 95, max_ms: 500}\nmin_samples: 5\n")
    export = tmp_path / "bench.json"
    run = locust_run(
        fault_server, "-u", "2", "-r", "2", "-t", "4s", "--slo-file", str(slo),
        "--model", "ttft_ms=20,tokens=4,itl_ms=2", "--shared-prefix-tokens", "50", "--slo-interval-s", "1",
        "--export", "vllm-bench", str(export),
    )  # fmt: skip
    assert run.code == 0, run.stderr[-2000:]
    report = run.report
    by_tag = read_back(run.report_dir / HLOG_NAME)
    for tag, hists in by_tag.items():
        metric, cls = tag.split(".")
        assert sum(h.get_total_count() for h in hists) == report["metrics"][cls][f"{metric}_ms"]["count"], tag
    assert len(by_tag["ttft.all"]) >= 3  # one per second of the run
    html = (run.report_dir / "slo-report.html").read_text()
    assert "ttft-p95" in html and 'data-verdict="pass"' in html and "--export vllm-bench" in html
    bench = json.loads(export.read_text())
    assert bench["completed"] == report["metrics"]["all"]["requests"] - report["metrics"]["all"]["failures"]
    assert bench["request_goodput"] is not None and bench["p95_ttft_ms"] == report["metrics"]["all"]["ttft_ms"]["p95"]


def test_processes_ship_their_intervals_to_the_master(own_fault_server, locust_run, tmp_path: Path) -> None:
    url, _ = own_fault_server
    run = locust_run(
        url, "--processes", "2", "-u", "4", "-r", "4", "-t", "3s", "--stop-timeout", "5", "--slo-interval-s", "1",
        "--model", "ttft_ms=20,tokens=3,itl_ms=2", "--shared-prefix-tokens", "50", "--no-prime-prefixes",
    )  # fmt: skip
    assert run.code == 0, run.stderr[-2000:]
    report = run.report
    assert report["run"]["mode"] == "master"
    series = Report.from_json(report).measurements.intervals
    assert series.interval_s == 1.0 and len(list(series)) >= 2  # workers spawned late on a busy machine: >= 2 of 3
    for metric in INTERVAL_METRICS:
        totals = series.totals(metric)
        for cls in ("all", "shared", "unique"):
            assert totals.get(cls, 0) == report["metrics"][cls][f"{metric}_ms"]["count"], (metric, cls)
    counts = np.array(series.series()["requests"]["all"])
    assert counts.sum() == report["metrics"]["all"]["requests"]
