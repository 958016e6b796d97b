"""A real Prometheus (Debian's `prometheus` and `promtool`, which scripts/test.sh installs as root):
the Grafana dashboard's queries and the alerting rules against what it scrapes and evaluates.

One run: Prometheus (a free port, a temporary storage, every second) scrapes `/slo/metrics` of a
slogate run against the fault server (`--autostart --autoquit`: a web UI run that starts by itself
and keeps serving its final figures for a moment after the load stops, where a headless one quits
at once) and the vLLM CPU server's `/metrics`, which a few requests of the test's own keep busy.
Then every query of deploy/grafana/slogate.json goes through `/api/v1/query`, with Grafana's
template variables replaced as Grafana would: `$class` by every value its own `label_values` query
finds, as a regex `(a|b|c)` (the variable's "All"); `$model_name` by `.*` (its `allValue`);
`$__rate_interval` by 4 s, Grafana's value for a 1 s scrape interval (4 scrape intervals), at an
instant while the load runs, and by a window over the whole run at the final scrape. That final
evaluation is compared with the run's report: the series of `all` start at 0 (a warm-up of 3 s
precedes every figure) and the evaluation instant is a scrape's, so `rate()` over that window,
times the window, is the counter's exact last value, and `histogram_quantile` lands in the bucket
of the report's percentile (slogate's buckets are exact: slo/outputs/prometheus.py). A class's
series appear with its first request, so their first scrape may hold counts `rate()` cannot see
whole: for them, a count short by at most that, a quantile in the next bucket at most.

Without the binaries the tests are skipped, unless SLOGATE_REQUIRE_PROMETHEUS=1 (scripts/test.sh
sets it once it has installed them): then they fail.
"""

from __future__ import annotations

import bisect
import contextlib
import json
import math
import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from slogate.launch.locust_command import locust_argv
from slogate.launch.server import free_port
from slogate.slo.outputs.prometheus import BUCKETS_S

from tests.conftest import ROOT

RULES_DIR = ROOT / "deploy" / "prometheus"
DASHBOARD = ROOT / "deploy" / "grafana" / "slogate.json"
MODEL = "mix=ok+ok+ok+http_429+http_503,ttft_ms=30,tokens=3"
# The mix's error rate is 0.4, but errors answer at once while an `ok` streams: with 4 users, up to 4
# `ok`s are still in flight when 5 requests have ended, so a live figure reaches 4 in 5 = 0.8 (a
# ceiling of 0.5 went pending once in CI). At 0.8 the `errors` objective passes at every scrape.
SLO_FILE = """\
slos:
  - {name: ttft-p95, metric: ttft, percentile: 95, max_ms: 500}
  - {name: ttft-p95-shared, metric: ttft, percentile: 95, max_ms: 20, class: shared}
  - {name: errors, metric: error_rate, max: 0.8}
min_samples: 5
warmup_s: 3
"""
LOAD_S = 8
Result = dict[frozenset[tuple[str, str]], float]  # an instant query's: each series' labels and value
QUANTILE = re.compile(r"^histogram_quantile\(([\d.]+), sum by \(le(?:, class)?\) \(rate\((slogate_|vllm:)")


def binary(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        why = f"{name} not installed (Debian's prometheus package: scripts/test.sh installs it as root)"
        if os.environ.get("SLOGATE_REQUIRE_PROMETHEUS") == "1":
            pytest.fail(why)
        pytest.skip(why)
    return path


# ---------------------------------------------------------------- the alerting rules, by promtool


def promtool(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([binary("promtool"), *args], cwd=cwd, capture_output=True, text=True, timeout=60)


def test_the_alerting_rules_check_and_pass_their_unit_tests(tmp_path: Path) -> None:
    """`promtool check rules` on the rules file and on the PrometheusRule's groups, `promtool test
    rules` on slogate-rules.test.yaml; and the tests catch a rule that alerts too early."""
    operator_rules = tmp_path / "prometheusrule-groups.yaml"
    resource = yaml.safe_load((RULES_DIR / "prometheusrule.yaml").read_text())
    operator_rules.write_text(yaml.safe_dump({"groups": resource["spec"]["groups"]}))
    checked = promtool("check", "rules", "slogate-rules.yaml", str(operator_rules), cwd=RULES_DIR)
    assert checked.returncode == 0 and checked.stdout.count("SUCCESS: 3 rules found") == 2, checked.stdout
    tested = promtool("test", "rules", "slogate-rules.test.yaml", cwd=RULES_DIR)
    assert tested.returncode == 0 and "SUCCESS" in tested.stdout, tested.stdout + tested.stderr
    hasty = tmp_path / "slogate-rules.yaml"
    hasty.write_text((RULES_DIR / "slogate-rules.yaml").read_text().replace("for: 1m", "for: 30s"))
    shutil.copy(RULES_DIR / "slogate-rules.test.yaml", tmp_path)
    failed = promtool("test", "rules", "slogate-rules.test.yaml", cwd=tmp_path)
    assert failed.returncode != 0 and "SlogateSLOBreach" in failed.stdout + failed.stderr


# ---------------------------------------------------------------- the dashboard, on a real Prometheus


class Prometheus:
    """A Prometheus server of the test's own, scraping every second; its HTTP API."""

    def __init__(self, executable: str, tmp: Path, targets: dict[str, tuple[str, str]]) -> None:
        config = {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "rule_files": [str(RULES_DIR / "slogate-rules.yaml")],
            "scrape_configs": [
                {"job_name": job, "metrics_path": path, "static_configs": [{"targets": [address]}]}
                for job, (address, path) in targets.items()
            ],
        }
        (tmp / "prometheus.yml").write_text(yaml.safe_dump(config))
        self.url = f"http://127.0.0.1:{free_port()}"
        self.log = (tmp / "prometheus.log").open("wb")
        self.proc = subprocess.Popen(
            [executable, f"--config.file={tmp / 'prometheus.yml'}", f"--storage.tsdb.path={tmp / 'data'}",
             f"--web.listen-address={self.url.removeprefix('http://')}", "--log.level=warn"],
            stdout=self.log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        # Ready, and every target scraped at least once (`up`, 0 while it does not listen yet): the
        # scrapes start a few seconds after the start (discovery sends its targets every 5 s).
        deadline = time.monotonic() + 30
        while not self.ready() or len(self.query("up", time.time())) < len(targets):
            assert self.proc.poll() is None and time.monotonic() < deadline, self.log_tail()
            time.sleep(0.2)

    def ready(self) -> bool:
        try:
            with urllib.request.urlopen(self.url + "/-/ready", timeout=2) as resp:
                return resp.status == 200
        except (urllib.error.URLError, ConnectionError):
            return False

    def log_tail(self) -> str:
        self.log.flush()
        return Path(self.log.name).read_text()[-3000:]

    def api(self, path: str, **params: Any) -> Any:
        url = f"{self.url}/api/v1/{path}?{urllib.parse.urlencode(params, doseq=True)}"
        try:
            with urllib.request.urlopen(url, timeout=20) as resp:
                body = json.load(resp)
        except urllib.error.HTTPError as e:
            raise AssertionError(f"{params}: {e.read().decode()}") from None
        assert body["status"] == "success", body
        return body["data"]

    def query(self, expr: str, at: float) -> Result:
        """An instant query: each result series' labels and its value."""
        data = self.api("query", query=expr, time=f"{at:.3f}")
        assert data["resultType"] == "vector", (expr, data)
        return {frozenset(r["metric"].items()): float(r["value"][1]) for r in data["result"]}

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


@contextlib.contextmanager
def busy_vllm(url: str) -> Any:
    """Completions sent one after another to the vLLM server until the block ends: its histograms
    and counters move while Prometheus scrapes them. The same long prompt each time, so the prefix
    cache hits from the second request on."""
    stop = threading.Event()
    sent: list[int] = []
    prompt = " ".join(["the quick brown fox jumps over the lazy dog"] * 12)
    body = json.dumps({"model": "tiny", "prompt": prompt, "max_tokens": 4, "ignore_eos": True}).encode()

    def send() -> None:  # with a pause between: the CPU server computes on every core the slogate run needs too
        while not stop.wait(0.2):
            request = urllib.request.Request(url + "/v1/completions", data=body,
                                             headers={"Content-Type": "application/json"})  # fmt: skip
            with urllib.request.urlopen(request, timeout=30) as resp:
                sent.append(resp.status)

    thread = threading.Thread(target=send, daemon=True)
    thread.start()
    try:
        yield sent
    finally:
        stop.set()
        thread.join(timeout=30)


def run_load(fault_server: str, tmp: Path, metrics_port: int) -> subprocess.CompletedProcess[str]:
    """The slogate run: 4 users for LOAD_S seconds, then its final figures served for 3 s more."""
    (tmp / "slo.yaml").write_text(SLO_FILE)
    argv = locust_argv(fault_server, report_dir=tmp / "report", slo_file=tmp / "slo.yaml", headless=False, extra=[
        "--autostart", "--autoquit", "3", "-u", "4", "-r", "4", "-t", f"{LOAD_S}s", "--web-host", "127.0.0.1",
        "--web-port", str(free_port()), "--slo-metrics-port", str(metrics_port), "--model", MODEL,
        "--shared-prefix-tokens", "50", "--slack-notify", "", "--only-summary", "--loglevel", "WARNING"])  # fmt: skip
    with tempfile.TemporaryFile() as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, cwd=tmp, start_new_session=True)
        try:
            code = proc.wait(timeout=LOAD_S + 60)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        out.seek(0)
        return subprocess.CompletedProcess(argv, code, out.read().decode(errors="replace"))


def dashboard_queries() -> tuple[list[str], dict[str, tuple[str, str]]]:
    """The panels' expressions, and each query variable's `label_values(metric, label)`."""
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    variables = {}
    for v in dashboard["templating"]["list"]:
        if v["type"] == "query":
            m = re.fullmatch(r"label_values\(([^,]+), (\w+)\)", v["definition"])
            assert m, v["definition"]
            variables[v["name"]] = (m.group(1), m.group(2))
    return exprs, variables


def bucket_of(seconds: float) -> int:
    """The index of the slogate bucket `(le[i-1], le[i]]` a value falls in (len: above the last)."""
    return bisect.bisect_left(BUCKETS_S, seconds)


@pytest.fixture(scope="session")
def prometheus_binary() -> str:
    """Asked for before `vllm_server`: without Prometheus, skip before waiting for vLLM to start."""
    return binary("prometheus")


def test_every_dashboard_query_runs_on_a_real_prometheus(
    prometheus_binary: str, fault_server: str, vllm_server: str, tmp_path: Path
) -> None:
    metrics_port = free_port()
    vllm = urllib.parse.urlsplit(vllm_server)
    targets = {"slogate": (f"127.0.0.1:{metrics_port}", "/slo/metrics"), "vllm": (vllm.netloc, "/metrics")}
    prometheus = Prometheus(prometheus_binary, tmp_path, targets)
    try:
        with busy_vllm(vllm_server) as vllm_answers:
            run = run_load(fault_server, tmp_path, metrics_port)
        report = json.loads((tmp_path / "report" / "slo-report.json").read_text())
        # ttft-p95-shared fails (30 ms TTFT against 20 ms): a fail, or inconclusive where the self-check
        # finds the client starved on this busy machine (a delay that could explain the failure)
        assert run.returncode == report["exit_code"] in (1, 3), run.stdout[-3000:]
        assert vllm_answers and set(vllm_answers) == {200}
        check_dashboard(prometheus, report)
        check_alerts(prometheus)
    finally:
        prometheus.stop()


def check_dashboard(prometheus: Prometheus, report: dict[str, Any]) -> None:
    requests = prometheus.api("query", query="slogate_requests_total[5m]", time=time.time())["result"]
    scrapes = {r["metric"]["class"]: [(float(t), float(v)) for t, v in r["values"]] for r in requests}
    up = prometheus.api("query", query='up{job="slogate"}[5m]', time=time.time())["result"]
    assert "all" in scrapes, f"no scrape of slogate's figures; its `up`: {up}"
    samples, final = scrapes["all"], report["metrics"]["all"]["requests"]
    assert samples[0][1] == 0 and samples[-1][1] == final > 0, samples  # from 0 (the warm-up) to the report's
    end = samples[-1][0]  # the final scrape: the figures the report has
    live = max(t for t, v in samples if v < final)  # the last scrape while the load ran
    assert live - next(t for t, v in samples if v > 0) >= 2, samples  # a 4 s window then holds load
    window_s = math.ceil(end - samples[0][0]) + 5  # from before the series began
    exprs, variables = dashboard_queries()
    values = {name: prometheus.api(f"label/{label}/values", **{"match[]": metric, "start": samples[0][0], "end": end})
              for name, (metric, label) in variables.items()}  # fmt: skip
    assert set(values["class"]) == set(report["metrics"]) == set(scrapes) >= {"all", "shared", "unique"}
    assert values["model_name"] == ["tiny"]
    classes = "(" + "|".join(re.escape(c) for c in values["class"]) + ")"

    def evaluate(expr: str, rate_interval: str, at: float) -> Result:
        resolved = expr.replace("$class", classes).replace("$model_name", ".*")
        result = prometheus.query(resolved.replace("$__rate_interval", rate_interval), at)
        assert result, f"no data: {resolved}"
        return result

    for expr in exprs:  # live, as the dashboard shows it during the run: data, and numbers
        result = evaluate(expr, "4s", live)
        assert all(math.isfinite(v) and v >= 0 for v in result.values()), (expr, result)
    # A class's series appear with its first request (only `all` is there from the start): its first
    # scrape may hold counts already, which rate() cannot see whole. `unseen` has them per class.
    seen = ReportView(report, window_s, {cls: s[0][1] for cls, s in scrapes.items()})
    for expr in exprs:  # at the final scrape, over the whole run: the report's figures
        seen.check(expr, evaluate(expr, f"{window_s}s", end))


@dataclass
class ReportView:
    """The report's figures, to compare a query's result at the final scrape with (over a window
    of `window_s` seconds, the whole run). `unseen`: each class's requests at its first scrape."""

    report: dict[str, Any]
    window_s: float
    unseen: dict[str, float]

    def check(self, expr: str, result: Result) -> None:
        metrics, slos = self.report["metrics"], {s["name"]: s for s in self.report["slos"]}
        rows = [(dict(labels), value) for labels, value in result.items()]
        counted = {r.get("class", r.get("kind")): round(v * self.window_s, 6) for r, v in rows}  # rate() * window
        if expr.startswith("max by (verdict)"):
            assert rows == [({"verdict": self.report["verdict"]}, 1)]
        elif expr.startswith("max by (objective, state)"):
            assert sorted((r["objective"], r["state"]) for r, _ in rows) == sorted(
                (s["name"], s["result"]) for s in slos.values()
            )
        elif expr in ("slogate_objective_value", "slogate_objective_target"):
            assert {r["objective"] for r, _ in rows} == set(slos)
            for labels, value in rows:
                slo = slos[labels["objective"]]
                latency = slo["unit"] == "ms"
                bound = slo["target"][labels["bound"] + "_ms" * latency] if "bound" in labels else slo["observed"]
                # A ratio's last scrape may miss the outcome of the last requests in flight (seen once: 0.399
                # against the report's figure); a latency bound or a percentile is exact.
                tolerance = {"rel_tol": 1e-6} if latency or "bound" in labels else {"abs_tol": 0.02}
                assert math.isclose(value * (1000 if latency else 1), bound, **tolerance), (labels, value, slo)
        elif m := QUANTILE.match(expr):
            for labels, value in rows:
                self.check_quantile(expr, float(m.group(1)), m.group(2), labels.get("class", "all"), value)
        elif expr.startswith("sum by (class) (rate(slogate_requests_total"):
            assert set(counted) == set(metrics)
            for cls, n in counted.items():  # exact from a first scrape of 0; less by at most what it held
                assert metrics[cls]["requests"] - self.unseen[cls] <= n <= metrics[cls]["requests"], (cls, n)
        elif expr.startswith("sum by (kind) (rate(slogate_failures_total"):
            assert counted == metrics["all"]["errors_by_kind"] and len(counted) == 2  # http_429, http_5xx
        elif expr.startswith("sum(rate(slogate_output_tokens_total"):
            assert list(counted.values()) == [metrics["all"]["output_tokens"]] and counted[None] > 0
        elif expr.startswith(("sum(slogate_unfinished_total", "sum(slogate_dropped_total")):
            assert [v for _, v in rows] == [metrics["all"]["unfinished" if "unfinished" in expr else "dropped"]]
        else:  # vLLM's own figures: not the report's (the load went to the fault server), but sane
            assert expr.startswith(("vllm:", "sum(vllm:", "sum(rate(vllm:")), (
                f"a query this test does not compare: {expr}"
            )
            for labels, value in rows:
                assert math.isfinite(value) and value >= 0, (expr, labels, value)
                if "prefix_cache" in expr:
                    assert 0 < value <= 1, value  # the prompt repeats: hits
                if "kv_cache_usage" in expr:
                    assert value <= 1, value

    def check_quantile(self, expr: str, q: float, source: str, cls: str, value: float) -> None:
        """A `histogram_quantile` of slogate's buckets lands in the bucket of the report's own
        percentile (they hold the nearest rank exactly); for a class whose first scrape held counts
        already, rate() sees only the later requests, whose quantile may lie anywhere among the
        class's values: from the bucket below the report's p50 to its maximum's (a p95 of 36 ms
        came out as 54 ms once, two buckets up). vLLM's is a latency."""
        assert math.isfinite(value) and value > 0, (expr, cls, value)
        if source == "vllm:":
            return
        key = next(
            key for key, name in (("ttft", "first_token"), ("itl", "inter_token"), ("e2e", "e2e")) if name in expr
        )
        figures = self.report["metrics"][cls][f"{key}_ms"]
        reported_ms = figures[f"p{q * 100:g}"]
        if self.unseen[cls] == 0:
            assert bucket_of(value) == bucket_of(reported_ms / 1000), (expr, cls, value, reported_ms)
        else:
            low, high = bucket_of(figures["p50"] / 1000) - 1, bucket_of(figures["max"] / 1000)
            assert low <= bucket_of(value) <= high, (expr, cls, value, figures)


def check_alerts(prometheus: Prometheus) -> None:
    """The rules file loaded and evaluated without an error; the breach alert went pending (its
    `for: 1m` outlasts this run) for the objective that failed and only that one."""
    (group,) = prometheus.api("rules")["groups"]
    assert [(r["name"], r["health"]) for r in group["rules"]] == [
        ("SlogateSLOBreach", "ok"), ("SlogateRunInconclusive", "ok"), ("SlogateClientSaturated", "ok")
    ]  # fmt: skip
    data = prometheus.api("query", query='ALERTS{alertname="SlogateSLOBreach"}[5m]', time=time.time())
    labels = [r["metric"] for r in data["result"]]
    assert [(a["objective"], a["metric"], a["class"], a["alertstate"]) for a in labels] == [
        ("ttft-p95-shared", "ttft", "shared", "pending")
    ]
