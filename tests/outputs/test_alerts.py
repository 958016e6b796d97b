"""Slack alerts and baseline regressions: message content, retry bounds, secrets, verdicts."""

import json
import random
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from slack_sdk.models.blocks import Block
from slogate.launch.fault_server import read_log
from slogate.slo.gate.judge import judge
from slogate.slo.gate.metrics import MetricsStore
from slogate.slo.gate.record import RequestRecord
from slogate.slo.gate.regression import Baseline, BaselineMismatch, RegressionRule, check_compatible, compare
from slogate.slo.gate.report import Report, RunInfo
from slogate.slo.gate.spec import parse_spec
from slogate.slo.outputs.slack import (
    HEADER_CHARS,
    MAX_BLOCKS,
    SECTION_CHARS,
    NotifyPolicyError,
    SlackNotifier,
    build_message,
    parse_notify,
    reasons_to_notify,
)

from tests.conftest import ROOT

STUB = ROOT / "tests" / "slack_stub.py"
WEBHOOK_SECRET = "T0SECRET/B0SECRET/xyzWebhookSecret123"
BOT_TOKEN = "xoxb-111-222-botTokenSecret456"
API_KEY = "sk-apiKeySecret789"
DEFAULT_POLICY = frozenset({"fail", "regression", "inconclusive", "error"})


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


def lognormal_store(n: int, scale: float = 1.0, seed: int = 1) -> MetricsStore:
    rng, store = random.Random(seed), MetricsStore()
    for i in range(n):
        ttft_us = int(rng.lognormvariate(4.8, 0.3) * scale * 1000)  # median ~120 ms
        store.add(RequestRecord("shared", float(i), e2e_us=ttft_us + 1000, ttft_us=ttft_us))
    return store


RULE = RegressionRule("ttft", 95, 10)
RUN = RunInfo(target="http://127.0.0.1:8000", model="m", workload={"seed": 1, "max_tokens": 8})
REGRESSION_SPEC = {
    "slos": [{"name": "ttft-p95", "metric": "ttft", "percentile": 95, "max_ms": 1000}],
    "regressions": [{"metric": "ttft", "percentile": 95, "max_increase_pct": 10}],
}


def baseline_of(store: MetricsStore, run: RunInfo = RUN, verdict: str = "pass") -> Baseline:
    return Baseline(store, run.model, run.workload, "2026-12-01T00:00:00Z", verdict)


def test_identical_distributions_are_not_a_regression() -> None:
    c = compare(RULE, lognormal_store(3000, seed=1), lognormal_store(3000, seed=2))
    assert c.status == "ok" and abs(c.change_pct) < 5
    assert c.interval_pct[0] < 0 < c.interval_pct[1]


def test_a_shifted_distribution_is_a_regression_with_its_interval() -> None:
    c = compare(RULE, lognormal_store(3000, seed=1), lognormal_store(3000, scale=1.5, seed=2))
    assert c.status == "regression" and 40 < c.change_pct < 60
    assert c.interval_pct[0] > 10  # even the low end of the 95% interval exceeds the tolerance


def test_too_few_samples_is_inconclusive_not_a_false_alarm() -> None:
    c = compare(RULE, lognormal_store(12, seed=1), lognormal_store(12, scale=1.15, seed=2))
    assert c.status == "inconclusive"


def test_mismatched_workloads_are_refused() -> None:
    base = baseline_of(lognormal_store(100))
    with pytest.raises(BaselineMismatch, match="max_tokens=8 differs from this run's max_tokens=64"):
        check_compatible(base, "m", {"seed": 1, "max_tokens": 64})
    with pytest.raises(BaselineMismatch, match="model"):
        check_compatible(base, "other", {"seed": 1, "max_tokens": 8})
    other_run = RunInfo(model="m", workload={"seed": 2, "max_tokens": 8})
    report = judge(parse_spec(REGRESSION_SPEC), lognormal_store(100), other_run, baseline=base)
    assert report.regression.status == "refused" and report.exit_code == 2
    assert report.reasons[-1].startswith("baseline refused: baseline workload seed=1 differs")


def test_a_regression_fails_a_passing_run_unless_warn_only() -> None:
    base = baseline_of(lognormal_store(3000, seed=1))
    for action, verdict, code in (("fail", "fail", 1), ("warn", "pass", 0)):
        spec = parse_spec({**REGRESSION_SPEC, "regression_action": action})
        report = judge(spec, lognormal_store(3000, scale=1.5, seed=2), RUN, baseline=base)
        assert (report.verdict, report.exit_code) == (verdict, code)
        assert report.regression.comparisons[0].status == "regression"


def failing_report() -> Report:
    store = MetricsStore()
    for i in range(30):
        store.add(RequestRecord("shared", float(i), e2e_us=400_000, ttft_us=300_000))
    spec = parse_spec(
        {**REGRESSION_SPEC, "slos": [{"name": "ttft-p95", "metric": "ttft", "percentile": 95, "max_ms": 200}]}
    )
    run = RunInfo(target="http://vllm:8000", model="qwen")
    return judge(spec, store, run, baseline=baseline_of(lognormal_store(3000), run))


def test_breach_and_regression_message_content() -> None:
    report = failing_report()
    msg = build_message(report, ci_url="https://ci.example/run/7", report_path="out/slo-report.json")
    text = json.dumps(msg)
    assert msg["text"].startswith("slogate: FAIL (exit 1)")
    assert "ttft-p95" in text and "p95 ttft[all] <= 200 ms" in text and "observed 300.0 ms" in text
    assert "Against the baseline" in text and "tolerance +10%" in text
    assert "`http://vllm:8000` model `qwen`" in text and "https://ci.example/run/7" in text
    assert "out/slo-report.json" in text


def test_the_policy_decides_whether_to_notify() -> None:
    passing = judge(parse_spec(REGRESSION_SPEC), lognormal_store(100), RUN)
    assert reasons_to_notify(passing, DEFAULT_POLICY) == []
    assert reasons_to_notify(passing, DEFAULT_POLICY | {"pass"}) == ["pass"]
    assert reasons_to_notify(passing, frozenset({"recovery"}), "fail") == ["recovery"]
    assert reasons_to_notify(failing_report(), DEFAULT_POLICY) == ["fail", "regression"]


@pytest.mark.parametrize("typo", ["fial,regresion", "fail,regresion", "FAIL", "fail;pass"])
def test_a_typo_in_the_notify_policy_is_an_error_not_silence(typo: str) -> None:
    with pytest.raises(NotifyPolicyError) as err:
        parse_notify(typo)
    assert "--slack-notify: unknown value" in str(err.value) and "recovery" in str(err.value)
    assert parse_notify("fail, regression") == {"fail", "regression"}


def huge_failing_report(n: int) -> Report:
    """n breached SLOs with long names, n regressions and n reasons: everything breaks at once."""
    store = lognormal_store(200)
    slos = [
        {"name": f"ttft-p{50 + i * 0.4:g}-" + "x" * 120, "metric": "ttft", "percentile": 50 + i * 0.4, "max_ms": 1}
        for i in range(n)
    ]
    rules = [{"metric": "ttft", "percentile": 50 + i * 0.4, "max_increase_pct": 1} for i in range(n)]
    spec = parse_spec({"slos": slos, "regressions": rules})
    report = judge(spec, store, RUN, baseline=baseline_of(lognormal_store(200, scale=0.5)))
    report.reasons.extend(f"reason {i}: " + "y" * 400 for i in range(n))
    return report


@pytest.mark.parametrize("n", [1, 40, 100])
def test_every_message_respects_block_kit_limits(n: int) -> None:
    report = huge_failing_report(n)
    assert len(report.failing) == n and len(report.regression.comparisons) == n
    msg = build_message(report, ci_url="https://ci.example/run/1", report_path="r/slo-report.json")
    assert msg["text"] and len(msg["text"]) <= SECTION_CHARS and len(msg["blocks"]) <= MAX_BLOCKS
    for block in msg["blocks"]:
        Block.parse(block).validate_json()  # slack_sdk's own model raises on any limit
        if block["type"] == "header":
            assert len(block["text"]["text"]) <= HEADER_CHARS
        texts = [block["text"]["text"]] if "text" in block else [e["text"] for e in block["elements"]]
        assert all(len(text) <= SECTION_CHARS for text in texts)
    if n > 10:
        assert "more (see r/slo-report.json)" in json.dumps(msg)
    # Worst first: the highest percentile is the farthest above its 1 ms target.
    breaches = next(b["text"]["text"] for b in msg["blocks"] if "SLOs not met" in b.get("text", {}).get("text", ""))
    assert breaches.split("\n")[1].startswith(f"• *ttft-p{50 + (n - 1) * 0.4:g}-")


def test_webhook_retries_500_then_delivers(slack_stub) -> None:
    url, log = slack_stub("500,200")
    result = SlackNotifier(webhook_url=f"{url}/services/{WEBHOOK_SECRET}", budget_s=10).send(
        build_message(failing_report())
    )
    assert result.ok and result.attempts == 2
    bodies = [json.loads(r["body"]) for r in read_log(log)]
    assert len(bodies) == 2 and bodies[1]["text"].startswith("slogate: FAIL (exit 1)") and bodies[1]["blocks"]


def test_bot_token_honours_retry_after_on_429(slack_stub) -> None:
    url, log = slack_stub("429:1,200")
    notifier = SlackNotifier(bot_token=BOT_TOKEN, channel="#perf", api_base_url=f"{url}/api/", budget_s=10)
    result = notifier.send(build_message(failing_report()))
    assert result.ok and result.attempts == 2
    first, second = read_log(log)
    assert second["t"] - first["t"] >= 1.0 and first["path"] == "/api/chat.postMessage"


def test_a_slack_that_keeps_failing_is_given_up_within_the_budget(slack_stub) -> None:
    url, log = slack_stub("503")
    started = time.monotonic()
    result = SlackNotifier(webhook_url=f"{url}/services/{WEBHOOK_SECRET}", budget_s=3).send({"text": "x", "blocks": []})
    assert not result.ok and result.detail == "HTTP 503"
    assert time.monotonic() - started < 8
    assert 2 <= len(read_log(log)) <= 5


def test_a_long_retry_after_is_not_waited_past_the_budget(slack_stub) -> None:
    url, _ = slack_stub("429:60")
    started = time.monotonic()
    result = SlackNotifier(webhook_url=f"{url}/services/{WEBHOOK_SECRET}", budget_s=3).send({"text": "x", "blocks": []})
    assert not result.ok and result.attempts == 1 and time.monotonic() - started < 30  # not the 60 s asked


def test_the_notifier_never_shows_its_credentials() -> None:
    for n in (
        SlackNotifier(webhook_url=f"https://hooks.slack.com/services/{WEBHOOK_SECRET}"),
        SlackNotifier(bot_token=BOT_TOKEN, channel="#perf"),
    ):
        for shown in (repr(n), str(n), f"{n!r:>10}"):
            assert WEBHOOK_SECRET not in shown and BOT_TOKEN not in shown and "Secret" not in shown


# 400 ms TTFT against a 5 ms target: a fail no client delay on a busy machine could explain.
HEADLESS = ["-u", "2", "-r", "2", "-t", "3s", "--model", "ttft_ms=400,tokens=3", "--shared-prefix-tokens", "50"]


def slo(tmp_path: Path, max_ms: float) -> str:
    f = tmp_path / "slo.yaml"
    f.write_text(f"slos:\n  - {{name: ttft-p95, metric: ttft, percentile: 95, max_ms: {max_ms}}}\nmin_samples: 5\n")
    return str(f)


def test_slack_down_changes_neither_the_exit_code_nor_the_report(
    fault_server, locust_run, slack_stub, tmp_path
) -> None:
    url, log = slack_stub("500")
    env = {"SLACK_WEBHOOK_URL": f"{url}/services/{WEBHOOK_SECRET}"}
    run = locust_run(fault_server, *HEADLESS, "--slo-file", slo(tmp_path, 5), "--slack-timeout-s", "2", env=env)
    assert run.code == 1, run.stdout[-2000:]  # the SLO breach, not Slack, decides
    assert run.report["verdict"] == "fail"
    assert run.report["alerts"]["slack"]["sent"] is False and run.report["alerts"]["slack"]["for"] == ["fail"]
    assert len(read_log(log)) >= 2  # it did retry
    assert "Slack notification failed after" in run.stderr


def test_a_passing_run_sends_nothing_under_the_default_policy(fault_server, locust_run, slack_stub, tmp_path) -> None:
    url, log = slack_stub("200")
    run = locust_run(
        fault_server, *HEADLESS, "--slo-file", slo(tmp_path, 2000), env={"SLACK_WEBHOOK_URL": f"{url}/services/x"}
    )
    assert run.code == 0 and read_log(log) == []


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
    assert run.report["alerts"]["slack"]["sent"] is True and len(read_log(log)) == 3
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
    other = [a if a != "ttft_ms=400,tokens=3" else "ttft_ms=200,tokens=3" for a in HEADLESS]
    second = locust_run(fault_server, *other, "--slo-file", str(spec), "--slo-baseline", str(baseline))
    assert second.report["regression"]["status"] == "refused"  # the model (the fault script) differs
    assert second.code == 2 and "baseline refused" in second.report["reasons"][-1]
