"""Conversations (--turns, --think-time-s) and request tags: every follow-up resends the history and
the streamed answer exactly (checked by a server that knows what it streamed), per-tag figures, and
bad input refused before any load."""

import json
import random
from collections.abc import Iterator
from pathlib import Path

import pytest
from slogate.locustfiles.load.datasets import SAMPLE_CHAT
from slogate.locustfiles.load.workload import Workload, WorkloadConfig, parse_range
from slogate.slo.gate.judge import UnknownClass, check_classes
from slogate.slo.gate.metrics import MetricsStore
from slogate.slo.gate.record import ALL, FIRST_TURN, FOLLOW_UP, RequestRecord, conversation_tag_names
from slogate.slo.gate.report import Report, RunInfo
from slogate.slo.gate.saved import load_result
from slogate.slo.gate.spec import load_spec
from slogate.slo.gate.verdict import Verdict
from slogate.slo.outputs.html import render_html
from slogate.slo.outputs.render import render_markdown
from slogate.slo.plugin import web_ui
from slogate.slo.rejudge import judge_file

from tests import conversation_server
from tests.load.test_users import USERS, Harness


@pytest.fixture(scope="module")
def checker() -> Iterator[str]:
    proc, url = conversation_server.spawn()
    yield url
    proc.terminate()
    proc.wait(timeout=10)


def stats(url: str) -> dict[str, int]:
    import urllib.request

    with urllib.request.urlopen(f"{url}/stats", timeout=10) as resp:
        return json.loads(resp.read())


def workload(**kw) -> Workload:
    return Workload(WorkloadConfig(seed=3, shared_prefix_tokens=20, prompt_nonce="n", **kw), "m", 1.3)


def test_a_follow_up_is_the_previous_messages_the_answer_and_a_new_user_message() -> None:
    w, rng = workload(turns=(3, 3)), random.Random(1)
    first = w.next_request(rng)
    assert (first.turn, first.turns, first.tags) == (1, 3, (FIRST_TURN, "turn_1"))
    second = w.follow_up(first, ' an "answer"\n', rng)
    assert second.messages[:2] == first.messages and second.request_class == first.request_class
    assert second.messages[2] == {"role": "assistant", "content": ' an "answer"\n'}
    assert second.messages[3]["role"] == "user" and second.messages[3] != first.messages[1]
    assert second.body["messages"] == second.messages and second.tags == (FOLLOW_UP, "turn_2")
    assert second.has_follow_up and not w.follow_up(second, "x", rng).has_follow_up


def test_single_turn_requests_carry_no_conversation_tags_and_keep_their_shapes() -> None:
    one, ranged = workload(), workload(turns=(1, 1), think_time_s=(0.0, 0.0))
    a, b = random.Random(5), random.Random(5)
    assert [one.next_request(a).body for _ in range(20)] == [ranged.next_request(b).body for _ in range(20)]
    req = one.next_request(a)
    assert req.tags == () and not req.has_follow_up
    assert "turns" not in one.config.describe() and "endpoint" not in one.config.describe()
    described = workload(turns=(2, 4)).config.describe()
    assert described["turns"] == json.loads(json.dumps(described))["turns"] == [2, 4]


def test_turns_and_think_times_are_drawn_within_their_range() -> None:
    w, rng = workload(turns=(2, 4), think_time_s=(0.5, 1.5)), random.Random(2)
    assert {w.next_request(rng).turns for _ in range(200)} == {2, 3, 4}
    assert all(0.5 <= w.think_time_s(rng) <= 1.5 for _ in range(200))


def test_turn_tags_are_bounded_however_long_the_conversation() -> None:
    assert conversation_tag_names(1) == []
    assert conversation_tag_names(3) == [FIRST_TURN, FOLLOW_UP, "turn_1", "turn_2", "turn_3"]
    assert conversation_tag_names(10**9)[-2:] == ["turn_8", "turn_9+"] and len(conversation_tag_names(10**9)) == 11
    w, rng = workload(turns=(12, 12)), random.Random(0)
    req = w.next_request(rng)
    while req.has_follow_up:
        req = w.follow_up(req, "a", rng)
    assert req.tags == (FOLLOW_UP, "turn_9+")
    assert workload(shared_fraction=1.0).config.available_tags() == [ALL, "shared"]


@pytest.mark.parametrize(
    ("option", "text", "kind"),
    [("--turns", "0", int), ("--turns", "5-2", int), ("--turns", "x", int), ("--think-time-s", "-1", float)],
)
def test_bad_ranges_are_refused_in_one_line(option: str, text: str, kind: type) -> None:
    with pytest.raises(ValueError, match=option) as e:
        field = option.lstrip("-").replace("-", "_")
        WorkloadConfig(**{field: parse_range(text, option, kind)})
    assert "\n" not in str(e.value)


def tagged(started: float, cls: str, turn: int, ttft_ms: float, cached: int | None = None) -> RequestRecord:
    tags = (FIRST_TURN if turn == 1 else FOLLOW_UP, f"turn_{turn}")
    return RequestRecord(
        cls, started, e2e_us=int(ttft_ms * 2000), ttft_us=int(ttft_ms * 1000), itl_us=[1000] * 9,
        prompt_tokens=100 * turn, completion_tokens=10, cached_tokens=cached, tags=tags,
    )  # fmt: skip


def conversation_store() -> MetricsStore:
    store = MetricsStore()
    for i in range(10):
        store.add(tagged(100.0 + i, "shared", 1, 50, cached=0))
        store.add(tagged(100.5 + i, "unique", 2, 20, cached=150))
    return store


def test_each_tag_has_its_own_figures_and_all_counts_each_request_once() -> None:
    store = conversation_store()
    assert store.class_names() == [ALL, "shared", "unique", FIRST_TURN, FOLLOW_UP, "turn_1", "turn_2"]
    assert store.get(ALL).requests == 20 and store.get(ALL).latency["itl"].count == 180
    first, follow = store.get(FIRST_TURN), store.get(FOLLOW_UP)
    assert (first.requests, follow.requests) == (10, 10)
    assert first.latency["ttft"].max_ms() == pytest.approx(50, rel=0.01)
    assert follow.latency["ttft"].max_ms() == pytest.approx(20, rel=0.01)
    summary = store.summary()
    assert summary[FIRST_TURN]["prompt_cache_hit_rate"] == 0 and summary["turn_2"]["mean_prompt_tokens"] == 200
    assert summary[FOLLOW_UP]["prompt_cache_hit_rate"] == 0.75 and summary[ALL]["prompt_cache_hit_rate"] == 0.5
    unreported = MetricsStore()
    unreported.add(tagged(1.0, "shared", 1, 5))
    assert unreported.summary()[FIRST_TURN]["prompt_cache_hit_rate"] is None


def test_tags_survive_the_wire_and_merge_exactly() -> None:
    a, b = conversation_store(), conversation_store()
    a.merge(MetricsStore.from_wire(json.loads(json.dumps(b.to_wire()))))
    assert a.get(FOLLOW_UP).requests == 20 and a.get(ALL).requests == 40
    assert a.get("turn_2").latency["ttft"].count == 20 and a.get(FOLLOW_UP).cached_reported == 20


def test_goodput_counts_each_tags_targets() -> None:
    store = MetricsStore()
    store.set_goodput_targets({FOLLOW_UP: {"ttft": 30.0}})
    for turn, ttft in ((1, 50), (2, 20), (2, 40)):
        store.add(tagged(1.0, "shared", turn, ttft))
    # The first turn is not held to the follow-up target; the 40 ms follow-up misses it.
    assert (store.get(ALL).good, store.get(FIRST_TURN).good, store.get(FOLLOW_UP).good) == (2, 1, 1)


def saved_report(tmp_path: Path) -> Path:
    path = tmp_path / "slo-report.json"
    report = Report(Verdict.UNGATED, ["measured"], RunInfo(model="m"), conversation_store())
    path.write_text(json.dumps(report.to_json()))
    return path


def test_every_report_shows_each_tag_with_its_prompt_tokens_and_cached_share() -> None:
    report = Report(Verdict.UNGATED, ["measured"], RunInfo(model="m"), conversation_store())
    markdown = render_markdown(report)
    assert "| prompt tok | cached |" in markdown
    assert next(line for line in markdown.splitlines() if line.startswith("| follow_up |")).endswith(
        "| 200.0 | 75.0% |"
    )
    html = render_html(report)
    assert "<td>turn_2</td>" in html and "<th>cached</th>" in html and "75.0%" in html
    items = [row["item"] for row in web_ui.rows(report)]
    assert "TTFT follow_up" in items and "prompt follow_up: mean 200.0 tokens, 75.0% reported cached" in items


def test_a_saved_report_is_judged_on_its_tags(tmp_path: Path) -> None:
    path = saved_report(tmp_path)
    assert {FIRST_TURN, FOLLOW_UP, "turn_2"} <= set(load_result(path).classes)
    slo = tmp_path / "slo.yaml"
    slo.write_text("slos:\n  - {metric: ttft, percentile: 95, max_ms: 30, class: follow_up}\nmin_samples: 5\n")
    assert judge_file(str(path), str(slo), str(tmp_path / "out")) == 0
    slo.write_text("slos:\n  - {metric: ttft, percentile: 95, max_ms: 30, class: first_turn}\nmin_samples: 5\n")
    assert judge_file(str(path), str(slo), str(tmp_path / "out")) == 1
    slo.write_text("slos:\n  - {metric: ttft, percentile: 95, max_ms: 30, class: turn_5}\n")
    assert judge_file(str(path), str(slo), str(tmp_path / "out")) == 2
    with pytest.raises(UnknownClass, match="classes available: all, shared, unique, first_turn"):
        check_classes(load_spec(str(slo)), load_result(path).classes, "this result")


@pytest.mark.parametrize("user_class", USERS)
def test_follow_ups_resend_the_streamed_answer_byte_for_byte(checker: str, user_class: type) -> None:
    before = stats(checker)
    harness = Harness(user_class, checker, "checker", "--turns", "3", "--shared-fraction", "0.5")
    records = harness.call(9)
    assert [r.tags[1] for r in records] == ["turn_1", "turn_2", "turn_3"] * 3
    assert all(r.ok for r in records), [r.error_message for r in records if not r.ok]
    after = stats(checker)
    assert after["mismatches"] == before["mismatches"]
    assert after["follow_ups"] - before["follow_ups"] == 6 and after["max_messages"] >= 6
    # The server counts the resent history as cached: 10 tokens per message after the first two.
    assert [r.cached_tokens for r in records[:3]] == [0, 20, 40]


def test_a_failed_turn_ends_its_conversation(fault_server: str) -> None:
    # Every other request fails (HTTP 503): each conversation fails at its second turn.
    records = Harness(USERS[0], fault_server, "mix=ok+http_503,tokens=2", "--turns", "3").call(6)
    assert [(r.tags[1], r.ok) for r in records] == [("turn_1", True), ("turn_2", False)] * 3
    assert all(r.error_kind == "http_5xx" for r in records if not r.ok)


def test_open_loop_conversations_and_per_tag_reports(checker: str, locust_run) -> None:
    before = stats(checker)
    run = locust_run(
        checker, "-u", "1", "-t", "3s", "--arrival-rate", "4", "--turns", "2-3", "--think-time-s", "0-0.1",
        "--model", "checker", "--shared-prefix-tokens", "20", locustfile="open-loop",
    )  # fmt: skip
    metrics = run.report["metrics"]
    after = stats(checker)
    assert run.code == 0, run.stderr[-2000:]
    assert after["mismatches"] == before["mismatches"] and metrics["all"]["failures"] == 0
    follow_ups = after["follow_ups"] - before["follow_ups"]
    # Every follow-up the client finished reached the server, and the server saw no other than those in flight
    # at the stop (`unfinished`): one cut before its body was sent, the server never counts.
    ended, unfinished = metrics[FOLLOW_UP]["requests"], metrics[FOLLOW_UP]["unfinished"]
    assert follow_ups >= 8 and ended <= follow_ups <= ended + unfinished, (ended, unfinished, follow_ups)
    assert metrics[FIRST_TURN]["requests"] + metrics[FOLLOW_UP]["requests"] == metrics["all"]["requests"]
    assert metrics[FIRST_TURN]["prompt_cache_hit_rate"] == 0 and metrics[FOLLOW_UP]["prompt_cache_hit_rate"] > 0
    assert {"turn_1", "turn_2", "turn_3"} <= set(metrics) and "turn_4" not in metrics
    summary = (run.report_dir / "slo-summary.md").read_text()
    assert "| follow_up |" in summary and "| turn_3 |" in summary
    assert run.report["run"]["workload"]["turns"] == [2, 3]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--turns", "0"], "--turns must be"),
        (["--turns", "5-2"], "--turns must be"),
        (["--think-time-s", "-1"], "--think-time-s must be"),
        (["--turns", "3", "--dataset", str(SAMPLE_CHAT)], "--turns does not apply to --dataset"),
        (["--endpoint", "foo"], "--endpoint must be one of chat"),
        (
            ["--slo-file", "SLO"],
            "class 'follow_up' is not measured by this workload (--shared-fraction 0.5, --turns 1); classes available",
        ),
        (  # the option that removed the class is named
            ["--slo-file", "SHARED_SLO", "--shared-fraction", "0"],
            "class 'shared' is not measured by this workload (--shared-fraction 0, --turns 1)",
        ),
    ],
)
def test_bad_conversation_options_exit_2_before_any_load(
    checker: str, locust_run, tmp_path: Path, args: list[str], message: str
) -> None:
    slo = tmp_path / "slo.yaml"
    slo.write_text("slos:\n  - {metric: ttft, percentile: 95, max_ms: 30, class: follow_up}\n")
    before = stats(checker)
    shared = tmp_path / "shared.yaml"
    shared.write_text("slos:\n  - {metric: ttft, percentile: 95, max_ms: 30, class: shared}\n")
    args = [{"SLO": str(slo), "SHARED_SLO": str(shared)}.get(a, a) for a in args]
    run = locust_run(checker, "-u", "1", "-t", "2s", "--model", "checker", *args)
    errors = [line for line in run.stderr.splitlines() if "slogate: error" in line]
    assert run.code == 2 and len(errors) == 1 and message in errors[0], run.stderr[-1500:]
    assert run.report["verdict"] == "error" and stats(checker) == before


@pytest.mark.parametrize("endpoint", ["completions", "responses"])
def test_the_endpoint_option_picks_the_path_body_and_events(fault_server: str, endpoint: str) -> None:
    harness = Harness(USERS[0], fault_server, "tokens=3", "--endpoint", endpoint, "--turns", "2")
    records = harness.call(2)
    assert harness.user.path == f"/v1/{endpoint}" and harness.user.workload.config.describe()["endpoint"] == endpoint
    assert [(r.ok, r.tags[1], r.completion_tokens) for r in records] == [(True, "turn_1", 3), (True, "turn_2", 3)]


def test_the_sdk_user_refuses_other_endpoints_before_any_load(checker: str, locust_run) -> None:
    before = stats(checker)
    run = locust_run(checker, "-u", "1", "-t", "2s", "--endpoint", "completions", locustfile="openai")
    errors = [line for line in run.stderr.splitlines() if "slogate: error" in line]
    assert run.code == 2 and len(errors) == 1 and "streams chat only" in errors[0], run.stderr[-1500:]
    assert stats(checker) == before


@pytest.mark.vllm
def test_vllm_reports_cached_tokens_for_a_follow_ups_history(vllm_server: str) -> None:
    """The CPU profiles turn on --enable-prompt-tokens-details: a follow-up's resent history is
    served from the prefix cache, and vLLM says how much of it."""
    harness = Harness(
        USERS[0], vllm_server, "tiny", "--turns", "2", "--shared-prefix-tokens", "200", "--max-tokens", "8"
    )
    first, second = harness.call(2)
    assert first.ok and second.ok, (first.error_message, second.error_message)
    assert first.cached_tokens is not None and second.prompt_tokens > first.prompt_tokens
    assert second.cached_tokens >= first.prompt_tokens // 2  # the history, in whole cache blocks
