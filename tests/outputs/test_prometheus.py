"""`/slo/metrics`: the live report for Prometheus (slo/outputs/prometheus.py), served on Locust's web
port (slo/plugin/web_ui.py) and on `--slo-metrics-port` (slo/plugin/metrics_server.py).

Every exposition here is read back with prometheus-client's own parsers. The unit tests check the
figures against the report they render (bucket counts against the report's percentiles, counters,
objectives, verdict); the end-to-end ones scrape real Locust runs against the fault server: a
headless master on its port while it goes, and a web UI run whose scrapes after Stop equal, count for
count, `/slo/status` at that instant and the report the run writes when it quits.
"""

import contextlib
import json
import math
import os
import random
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from prometheus_client.openmetrics.parser import text_string_to_metric_families as openmetrics_families
from prometheus_client.parser import text_string_to_metric_families
from slogate.launch.locust_command import locust_argv
from slogate.launch.server import free_port
from slogate.slo.gate.histogram import LatencyHistogram, nearest_rank
from slogate.slo.gate.judge import judge
from slogate.slo.gate.metrics import MetricsStore
from slogate.slo.gate.record import ErrorKind, RequestRecord
from slogate.slo.gate.report import Report, RunInfo
from slogate.slo.gate.spec import parse_spec
from slogate.slo.gate.verdict import Outcome, Verdict
from slogate.slo.outputs.prometheus import BUCKETS_S, bucket_counts, exposition
from slogate.slo.plugin.metrics_server import metrics_app, start_metrics_server, stop_metrics_server

from tests.plugin.test_web_ui import SECRETS, get, get_without_login, start_web_ui

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


# ---------------------------------------------------------------- the server of --slo-metrics-port


def call(app: Any, path: str, method: str = "GET", accept: str | None = None) -> tuple[str, dict[str, str], bytes]:
    answer: dict[str, Any] = {}
    environ = {"PATH_INFO": path, "REQUEST_METHOD": method, **({"HTTP_ACCEPT": accept} if accept else {})}
    body = b"".join(app(environ, lambda status, headers: answer.update(status=status, headers=dict(headers))))
    return answer["status"], answer["headers"], body


def test_the_metrics_app_serves_the_snapshot_on_its_paths_only() -> None:
    report = full_report()
    app = metrics_app(lambda: report)
    status, headers, body = call(app, "/slo/metrics")
    assert status == "200 OK" and body == exposition(report)[0] and headers["Content-Length"] == str(len(body))
    assert call(app, "/metrics")[2] == body
    openmetrics = call(app, "/slo/metrics", accept="application/openmetrics-text; version=1.0.0")[1]
    assert openmetrics["Content-Type"].startswith("application/openmetrics-text")
    status, headers, body = call(app, "/slo/metrics", "HEAD")
    assert status == "200 OK" and body == b"" and int(headers["Content-Length"]) > 0
    assert call(app, "/slo/status")[0].startswith("404") and call(app, "/slo/metrics", "POST")[0].startswith("405")


class FakeGate:
    """What the metrics server reads of a gate (which it keys weakly: a SimpleNamespace is neither
    hashable nor weakly referable)."""

    def __init__(self, port: int, worker: bool) -> None:
        report = full_report()
        self.reports = SimpleNamespace(metrics_port=port)
        self.run_options = SimpleNamespace(web_host="127.0.0.1")
        self.is_worker = worker
        self.snapshot = lambda: report


def fake_gate(port: int, worker: bool = False) -> FakeGate:
    return FakeGate(port, worker)


def listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def test_the_server_starts_once_moves_with_the_port_and_stops() -> None:
    first, second = free_port(), free_port()
    gate = fake_gate(first)
    try:
        start_metrics_server(gate)
        start_metrics_server(gate)  # a rerun keeps it
        assert get(f"http://127.0.0.1:{first}/slo/metrics")[0] == 200
        gate.reports = SimpleNamespace(metrics_port=second)  # changed in the web UI form: it moves
        start_metrics_server(gate)
        assert not listening(first) and parse(get(f"http://127.0.0.1:{second}/slo/metrics")[1])
    finally:
        stop_metrics_server(gate)
    assert not listening(second)
    for off in (fake_gate(0), fake_gate(free_port(), worker=True)):
        start_metrics_server(off)
        assert off.reports.metrics_port == 0 or not listening(off.reports.metrics_port)


def test_a_port_in_use_is_a_warning_not_a_crash(caplog: pytest.LogCaptureFixture) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        gate = fake_gate(taken.getsockname()[1])
        start_metrics_server(gate)
        stop_metrics_server(gate)
    assert "cannot listen" in caplog.text


# ---------------------------------------------------------------- end to end, against the fault server

MODEL = "mix=ok+ok+ok+http_429+http_503,ttft_ms=30,tokens=3"


def scrape(url: str) -> Samples | None:
    code, text = get(url)
    return parse(text) if code == 200 else None


def test_a_headless_master_serves_its_figures_while_it_runs(fault_server: str, tmp_path: Path) -> None:
    """A master with two worker processes: the master serves the merged figures, the workers none."""
    port, master_port = free_port(), str(free_port())
    slo = tmp_path / "slo.yaml"
    slo.write_text("slos:\n  - {name: ttft-p95, metric: ttft, percentile: 95, max_ms: 500}\nmin_samples: 5\n")
    argv = locust_argv(fault_server, report_dir=tmp_path / "report", slo_file=slo, extra=[
        "-u", "4", "-r", "4", "-t", "5s", "--model", MODEL, "--shared-prefix-tokens", "50", "--slack-notify", "",
        "--processes", "2", "--master-bind-port", master_port, "--master-port", master_port,
        "--slo-metrics-port", str(port), "--only-summary", "--loglevel", "WARNING"])  # fmt: skip
    url = f"http://127.0.0.1:{port}/slo/metrics"
    texts: list[str] = []
    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(
            argv, stdout=subprocess.DEVNULL, stderr=err, env={**os.environ, **SECRETS}, start_new_session=True
        )
        try:
            deadline = time.monotonic() + 120
            while proc.poll() is None and time.monotonic() < deadline:
                code, text = get(url)
                if code == 200:
                    texts.append(text)
                    elsewhere = get(f"http://127.0.0.1:{port}/slo/status")[0]
                    assert elsewhere in (0, 404)  # only the metrics (0: the run ended meanwhile)
                time.sleep(0.2)  # the polling interval
            proc.wait(timeout=60)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)  # the worker processes too
            proc.wait()
        err.seek(0)
        assert proc.returncode in (0, 1), err.read().decode()[-2000:]
    assert not listening(port)  # gone with the process
    report = json.loads((tmp_path / "report" / "slo-report.json").read_text())
    assert report["run"]["mode"] == "master" and report["run"]["workers"] == 2
    scrapes = [parse(t) for t in texts]
    counts = [value(s, "slogate_requests_total", **{"class": "all"}) for s in scrapes]
    assert len(scrapes) >= 3 and counts[-1] > 0 and counts == sorted(counts)  # cumulative over the run
    final = report["metrics"]["all"]
    assert counts[-1] <= final["requests"]
    last = scrapes[-1]
    assert value(last, "slogate_time_to_first_token_seconds_count", **{"class": "all"}) <= final["ttft_ms"]["count"]
    assert with_name(last, "slogate_objective_state") and sum(with_name(last, "slogate_verdict").values()) == 1
    assert all(secret not in t for t in texts for secret in SECRETS.values())


def test_scrapes_after_stop_equal_the_status_and_the_report(fault_server: str, tmp_path: Path) -> None:
    """Both endpoints, on the web port and on --slo-metrics-port, once the load has stopped: every
    count equals /slo/status at that instant and the report written when Locust quits."""
    port = free_port()
    proc, url = start_web_ui(fault_server, tmp_path, "--model", MODEL, "--slo-metrics-port", str(port))
    try:
        start = urllib.request.Request(url + "/swarm", data=b"user_count=2&spawn_rate=2", method="POST")
        urllib.request.urlopen(start, timeout=10).read()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            live = scrape(url + "/slo/metrics")
            if live and value(live, "slogate_failures_total", **{"class": "all", "kind": "http_429"}) >= 2:
                break
            time.sleep(0.2)
        assert live and value(live, "slogate_requests_total", **{"class": "all"}) >= 5
        assert value(live, "slogate_failures_total", **{"class": "all", "kind": "http_429"}) >= 2
        assert scrape(f"http://127.0.0.1:{port}/slo/metrics")  # the run's own port serves too
        assert get(url + "/stop", post=True)[0] == 200
        while json.loads(get(url + "/stats/requests")[1])["state"] != "stopped" and time.monotonic() < deadline:
            time.sleep(0.2)
        on_web_port, on_own_port = scrape(url + "/slo/metrics"), scrape(f"http://127.0.0.1:{port}/slo/metrics")
        status = json.loads(get(url + "/slo/status")[1])
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    assert on_web_port == on_own_port and on_web_port is not None
    assert_matches_report(on_web_port, status)
    report = json.loads((tmp_path / "report" / "slo-report.json").read_text())
    assert report["metrics"]["all"]["requests"] == status["metrics"]["all"]["requests"]
    assert_matches_report(on_web_port, report)


def test_the_web_ports_metrics_honour_web_login(fault_server: str, tmp_path: Path) -> None:
    proc, url = start_web_ui(fault_server, tmp_path, "--web-login")
    try:
        code, body = get_without_login(url + "/slo/metrics")
        assert code in (200, 302, 401) and "slogate_" not in body
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_the_option_is_a_locust_option() -> None:
    """Registered with Locust's parser (so also read from locust.conf and shown in the web UI form)."""
    from locust.argument_parser import get_parser

    assert get_parser().parse_args(["-f", "x.py"]).slo_metrics_port == 0  # off by default
    assert get_parser().parse_args(["-f", "x.py", "--slo-metrics-port", "9646"]).slo_metrics_port == 9646
