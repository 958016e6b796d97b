"""Slack alerts and baseline regressions: message content, retry bounds, secrets, verdicts."""

import json
import random
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from slogate.slo.histogram import LatencyHistogram
from slogate.slo.metrics import MetricsStore
from slogate.slo.record import RequestRecord
from slogate.slo.regression import BaselineMismatch, RegressionRule, check_compatible, compare, judge
from slogate.slo.report import build_report
from slogate.slo.slack import SlackNotifier, build_message, reasons_to_notify

STUB = Path(__file__).parent / "slack_stub.py"
WEBHOOK_SECRET = "T0SECRET/B0SECRET/xyzWebhookSecret123"
BOT_TOKEN = "xoxb-111-222-botTokenSecret456"
API_KEY = "sk-apiKeySecret789"


@pytest.fixture
def slack_stub(tmp_path: Path) -> Iterator[Callable[[str], tuple[str, Path]]]:
    procs = []

    def start(script: str) -> tuple[str, Path]:
        log = tmp_path / f"slack-{len(procs)}.jsonl"
        proc = subprocess.Popen(
            [sys.executable, str(STUB), "--log", str(log), "--script", script], stdout=subprocess.PIPE, text=True
        )
        procs.append(proc)
        assert proc.stdout is not None
        return f"http://127.0.0.1:{int(proc.stdout.readline().split()[1])}", log

    yield start
    for proc in procs:
        proc.terminate()
        proc.wait(timeout=10)


def received(log: Path) -> list[dict]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def lognormal_hist(n: int, scale: float = 1.0, seed: int = 1) -> LatencyHistogram:
    rng, h = random.Random(seed), LatencyHistogram()
    for _ in range(n):
        h.record_ms(rng.lognormvariate(4.8, 0.3) * scale)  # median ~120 ms
    return h


def report_with(h: LatencyHistogram, workload: dict | None = None, model: str = "m", verdict: str = "pass") -> dict:
    return {
        "schema": "slogate.report/1",
        "verdict": verdict,
        "exit_code": {"pass": 0, "fail": 1}[verdict],
        "reasons": [],
        "slos": [],
        "run": {
            "model": model,
            "target": "http://127.0.0.1:8000",
            "workload": workload or {"seed": 1, "max_tokens": 8},
        },
        "histograms": {"all": {"ttft": h.encode()}},
    }


RULE = RegressionRule("ttft", 95, 10)


def test_identical_distributions_are_not_a_regression() -> None:
    base = report_with(lognormal_hist(3000, seed=1))
    c = compare(RULE, base, report_with(lognormal_hist(3000, seed=2))["histograms"])
    assert c.verdict == "ok" and abs(c.change_pct) < 5
    assert c.interval_pct[0] < 0 < c.interval_pct[1]


def test_a_shifted_distribution_is_a_regression_with_its_interval() -> None:
    base = report_with(lognormal_hist(3000, seed=1))
    c = compare(RULE, base, report_with(lognormal_hist(3000, scale=1.5, seed=2))["histograms"])
    assert c.verdict == "regression" and 40 < c.change_pct < 60
    assert c.interval_pct[0] > 10  # even the low end of the 95% interval exceeds the tolerance


def test_too_few_samples_is_inconclusive_not_a_false_alarm() -> None:
    base = report_with(lognormal_hist(12, seed=1))
    c = compare(RULE, base, report_with(lognormal_hist(12, scale=1.15, seed=2))["histograms"])
    assert c.verdict == "inconclusive"


def test_mismatched_workloads_are_refused() -> None:
    base = report_with(lognormal_hist(100), workload={"seed": 1, "max_tokens": 8})
    with pytest.raises(BaselineMismatch, match="max_tokens=8 differs from this run's max_tokens=64"):
        check_compatible(base, {"model": "m", "workload": {"seed": 1, "max_tokens": 64}})
    with pytest.raises(BaselineMismatch, match="model"):
        check_compatible(base, {"model": "other", "workload": {"seed": 1, "max_tokens": 8}})
    current = report_with(lognormal_hist(100), workload={"seed": 2, "max_tokens": 8})
    judge(current, base, (RULE,), "fail")
    assert current["regression"]["status"] == "refused" and current["exit_code"] == 2


def test_a_regression_fails_a_passing_run_unless_warn_only() -> None:
    base = report_with(lognormal_hist(3000, seed=1))
    for action, verdict, code in (("fail", "fail", 1), ("warn", "pass", 0)):
        current = report_with(lognormal_hist(3000, scale=1.5, seed=2))
        judge(current, base, (RULE,), action)
        assert (current["verdict"], current["exit_code"]) == (verdict, code)
        assert current["regression"]["comparisons"][0]["verdict"] == "regression"


def failing_report() -> dict:
    from slogate.slo.evaluate import evaluate
    from slogate.slo.spec import parse_spec

    store = MetricsStore()
    for i in range(30):
        store.add(RequestRecord("shared", float(i), e2e_us=400_000, ttft_us=300_000))
    spec = parse_spec({"slos": [{"name": "ttft-p95", "metric": "ttft", "percentile": 95, "max_ms": 200}]})
    report = build_report(
        evaluate(spec, store), store, run={"target": "http://vllm:8000", "model": "qwen", "workload": {}}
    )
    base = report_with(lognormal_hist(3000))
    base["run"] = report["run"]
    judge(report, base, (RegressionRule("ttft", 95, 10),), "fail")
    return report


def test_breach_and_regression_message_content() -> None:
    report = failing_report()
    msg = build_message(report, ci_url="https://ci.example/run/7")
    text = json.dumps(msg)
    assert msg["text"] == "slogate FAIL (exit 1)"
    assert "ttft-p95" in text and "p95 ttft[all] <= 200 ms" in text and "observed 300.0" in text
    assert "Against the baseline" in text and "tolerance +10%" in text
    assert "`http://vllm:8000` model `qwen`" in text and "https://ci.example/run/7" in text


def test_the_policy_decides_whether_to_notify() -> None:
    default = {"fail", "regression", "inconclusive", "error"}
    assert reasons_to_notify({"verdict": "pass"}, default, None) == []
    assert reasons_to_notify({"verdict": "pass"}, default | {"pass"}, None) == ["pass"]
    assert reasons_to_notify({"verdict": "pass"}, {"recovery"}, "fail") == ["recovery"]
    assert reasons_to_notify(failing_report(), default, None) == ["fail", "regression"]


def test_webhook_retries_500_then_delivers(slack_stub) -> None:
    url, log = slack_stub("500,200")
    result = SlackNotifier(webhook_url=f"{url}/services/{WEBHOOK_SECRET}", budget_s=10).send(
        build_message(failing_report())
    )
    assert result.ok and result.attempts == 2
    bodies = [json.loads(r["body"]) for r in received(log)]
    assert len(bodies) == 2 and bodies[1]["text"] == "slogate FAIL (exit 1)" and bodies[1]["blocks"]


def test_bot_token_honours_retry_after_on_429(slack_stub) -> None:
    url, log = slack_stub("429:1,200")
    notifier = SlackNotifier(bot_token=BOT_TOKEN, channel="#perf", api_base_url=f"{url}/api/", budget_s=10)
    result = notifier.send(build_message(failing_report()))
    assert result.ok and result.attempts == 2
    first, second = received(log)
    assert second["t"] - first["t"] >= 1.0 and first["path"] == "/api/chat.postMessage"


def test_a_slack_that_keeps_failing_is_given_up_within_the_budget(slack_stub) -> None:
    url, log = slack_stub("503")
    started = time.monotonic()
    result = SlackNotifier(webhook_url=f"{url}/services/{WEBHOOK_SECRET}", budget_s=3).send({"text": "x", "blocks": []})
    assert not result.ok and result.detail == "HTTP 503"
    assert time.monotonic() - started < 8
    assert 2 <= len(received(log)) <= 5


def test_a_long_retry_after_is_not_waited_past_the_budget(slack_stub) -> None:
    url, _ = slack_stub("429:60")
    started = time.monotonic()
    result = SlackNotifier(webhook_url=f"{url}/services/{WEBHOOK_SECRET}", budget_s=3).send({"text": "x", "blocks": []})
    assert not result.ok and result.attempts == 1 and time.monotonic() - started < 5


def test_the_notifier_never_shows_its_credentials() -> None:
    n = SlackNotifier(webhook_url=f"https://hooks.slack.com/services/{WEBHOOK_SECRET}")
    assert WEBHOOK_SECRET not in repr(n) and WEBHOOK_SECRET not in str(vars(n).get("channel"))


# 100 ms TTFT against a 5 ms target: a fail no client delay on a busy machine could explain.
HEADLESS = ["-u", "2", "-r", "2", "-t", "3s", "--model", "ttft_ms=100,tokens=3", "--shared-prefix-tokens", "50"]


def slo(tmp_path: Path, max_ms: float) -> str:
    f = tmp_path / "slo.yaml"
    f.write_text(f"slos:\n  - {{name: ttft-p95, metric: ttft, percentile: 95, max_ms: {max_ms}}}\nmin_samples: 5\n")
    return str(f)


def test_slack_down_changes_neither_the_exit_code_nor_the_report(
    fault_server, locust_run, slack_stub, tmp_path
) -> None:
    url, log = slack_stub("500")
    env = {"SLACK_WEBHOOK_URL": f"{url}/services/{WEBHOOK_SECRET}"}
    run = locust_run(fault_server, *HEADLESS, "--slo-file", slo(tmp_path, 5), env=env, timeout=120)
    assert run.code == 1  # the SLO breach, not Slack, decides
    assert run.report["verdict"] == "fail"
    assert run.report["alerts"]["slack"]["sent"] is False and run.report["alerts"]["slack"]["for"] == ["fail"]
    assert len(received(log)) >= 2  # it did retry
    assert "Slack notification failed after" in run.stderr


def test_a_passing_run_sends_nothing_under_the_default_policy(fault_server, locust_run, slack_stub, tmp_path) -> None:
    url, log = slack_stub("200")
    run = locust_run(
        fault_server, *HEADLESS, "--slo-file", slo(tmp_path, 500), env={"SLACK_WEBHOOK_URL": f"{url}/services/x"}
    )
    assert run.code == 0 and received(log) == []


def test_no_secret_in_any_output(fault_server, locust_run, slack_stub, tmp_path) -> None:
    url, log = slack_stub("429:1,500,200")
    env = {
        "SLACK_WEBHOOK_URL": f"{url}/services/{WEBHOOK_SECRET}",
        "SLACK_BOT_TOKEN": BOT_TOKEN,
        "OPENAI_API_KEY": API_KEY,
    }
    logfile = tmp_path / "locust.log"
    run = locust_run(
        fault_server, *HEADLESS, "--slo-file", slo(tmp_path, 5), "--slack-channel", "#perf",
        "--loglevel", "DEBUG", "--logfile", str(logfile), env=env,
    )  # fmt: skip
    assert run.code == 1
    assert run.report["alerts"]["slack"]["sent"] is True and len(received(log)) == 3
    outputs = {"stdout": run.stdout, "stderr": run.stderr, "logfile": logfile.read_text()}
    outputs.update({p.name: p.read_text() for p in run.report_dir.iterdir()})
    for name, text in outputs.items():
        for secret in (WEBHOOK_SECRET, "xyzWebhookSecret123", BOT_TOKEN, API_KEY):
            assert secret not in text, f"{secret!r} leaked into {name}"


def test_a_saved_baseline_of_another_workload_is_refused_end_to_end(fault_server, locust_run, tmp_path) -> None:
    spec = tmp_path / "slo.yaml"
    spec.write_text(
        "slos:\n  - {metric: ttft, percentile: 95, max_ms: 1000}\nmin_samples: 5\n"
        "regressions:\n  - {metric: ttft, percentile: 50, max_increase_pct: 20}\n"
    )
    first = locust_run(fault_server, *HEADLESS, "--slo-file", str(spec))
    assert first.code == 0
    baseline = tmp_path / "baseline.json"
    save = subprocess.run(
        [
            sys.executable,
            "-m",
            "slogate.cli",
            "baseline",
            "save",
            str(first.report_dir / "slo-report.json"),
            str(baseline),
        ]
    )
    assert save.returncode == 0
    # The fault server is scripted through the model name, so this run's "model" differs.
    slower = [a if a != "ttft_ms=100,tokens=3" else "ttft_ms=300,tokens=3" for a in HEADLESS]
    second = locust_run(fault_server, *slower, "--slo-file", str(spec), "--slo-baseline", str(baseline))
    assert second.report["regression"]["status"] == "refused"  # the model (the fault script) differs
    assert second.code == 2 and "baseline refused" in second.report["reasons"][-1]
