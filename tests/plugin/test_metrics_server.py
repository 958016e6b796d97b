"""`/slo/metrics` served (slo/outputs/prometheus.py renders it, tests/outputs/test_prometheus.py checks
the exposition): on `--slo-metrics-port` (slo/plugin/metrics_server.py) and on Locust's web port
(slo/plugin/web_ui.py).

The server's app and its start, move and stop in-process; then end to end, against the fault server: a
headless master with two worker processes scraped while it goes, and a web UI run whose scrapes after
Stop equal, count for count, `/slo/status` at that instant and the report the run writes when it quits.
"""

import contextlib
import json
import os
import signal
import socket
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from slogate.launch.locust_command import locust_argv
from slogate.launch.server import free_port
from slogate.slo.outputs.prometheus import exposition
from slogate.slo.plugin.metrics_server import metrics_app, start_metrics_server, stop_metrics_server

from tests.outputs.test_prometheus import Samples, assert_matches_report, full_report, parse, value, with_name
from tests.plugin.test_web_ui import SECRETS, get, get_without_login, start_web_ui

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
