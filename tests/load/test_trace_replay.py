"""Trace replay and datasets through Locust, against the fault server that logs every request's
body and arrival (the ground truth for timing and prefix sharing); unit tests need no server."""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

import pytest
from slogate.launch import fault_server as fault
from slogate.locustfiles.load import datasets, replay, trace, trace_prompts
from slogate.locustfiles.load.workload import DATASET_CLASS, Workload, WorkloadConfig
from slogate.slo.gate.record import PREFIX_HIT

from tests.conftest import server_log

BLOCK = 16  # small blocks keep the prompts short; the fault server counts a word as a token
GAP_MS = 60  # between the test trace's requests: arrival order is trace order


def small_trace(path: Path, requests: int = 30) -> list[dict[str, Any]]:
    """The sample generator's prefix structure, at one request every GAP_MS."""
    lines = [json.loads(x) for x in trace.sample_trace_lines(requests, rate=10, seed=3, block_tokens=BLOCK)]
    for i, entry in enumerate(lines):
        entry["timestamp"] = i * GAP_MS
    path.write_text("".join(json.dumps(e) + "\n" for e in lines))
    return lines


@pytest.fixture
def logging_server(tmp_path: Path):
    log = tmp_path / "bodies.jsonl"
    proc, url = fault.spawn(log, log_bodies=True)
    yield url, log
    proc.terminate()
    proc.wait(timeout=10)


def logged(log: Path, rows: int = 0) -> list[dict[str, Any]]:
    """The server's records of streamed requests, in arrival order, once it has logged `rows` (or 10 s on)."""
    return sorted(server_log(log, rows), key=lambda r: r["arrived"])


def pacing_errors_ms(records: list[dict[str, Any]], due_ms: list[float]) -> list[float]:
    """How far each arrival the server saw is from its due time. Sorted, both lists pair up element
    by element, whatever jitter reordered two close arrivals. The trace's zero is not seen at the
    server (the first arrival carries its own jitter, which would shift every other request), so
    the lists are aligned on their median difference."""
    arrivals = sorted(r["arrived"] * 1000 for r in records)
    due = sorted(due_ms)
    shift = statistics.median(a - d for a, d in zip(arrivals, due, strict=True))
    return [abs(a - d - shift) for a, d in zip(arrivals, due, strict=True)]


def prompt_of(record: dict[str, Any]) -> list[str]:
    return record["body"]["messages"][-1]["content"].split()


def test_a_trace_replays_with_its_arrival_times_and_prefix_sharing(logging_server, locust_run, tmp_path) -> None:
    url, log = logging_server
    entries = small_trace(tmp_path / "trace.jsonl")
    # A second user starts a second in, while the first replays: it sends nothing, and must not
    # note the workload without the trace's facts.
    run = locust_run(
        url, "-u", "2", "-r", "1", "--trace", str(tmp_path / "trace.jsonl"), "--trace-block-tokens", str(BLOCK),
        locustfile="trace", timeout=60,
    )  # fmt: skip
    assert run.code == 0, run.stderr[-2000:]  # no --run-time: the run ended with the trace
    records = logged(log, len(entries))
    assert len(records) == len(entries) == run.report["metrics"]["all"]["requests"]
    # Arrival times follow the trace's, as the server saw them. The bounds leave a loaded machine room
    # (the two-process test below paced to a 46 ms median beside other tests once); a burst instead of
    # pacing would be off by ~435 ms median, ~870 ms at most (the trace spans 1,740 ms).
    errors_ms = pacing_errors_ms(records, [e["timestamp"] for e in entries])
    assert statistics.median(errors_ms) < 150 and max(errors_ms) < 600, errors_ms
    # Prefix sharing: every hash id is one text wherever it appears, distinct ids are distinct texts.
    texts: dict[int, str] = {}
    for record, entry in zip(records, entries, strict=True):
        words = prompt_of(record)
        assert len(words) == entry["input_length"]
        assert record["body"]["max_tokens"] == entry["output_length"] and record["body"]["ignore_eos"] is True
        for k, hash_id in enumerate(entry["hash_ids"]):
            block = " ".join(words[k * BLOCK : (k + 1) * BLOCK])
            known = texts.setdefault(hash_id, block)
            assert known.startswith(block) or block.startswith(known), f"hash id {hash_id} differs"
            if len(block) > len(known):
                texts[hash_id] = block
    full = [text for text in texts.values() if len(text.split()) == BLOCK]
    assert len(set(full)) == len(full)
    facts = run.report["run"]["workload"]["trace"]
    scheduled = trace.schedule(trace.load_trace(tmp_path / "trace.jsonl", BLOCK))
    implied = trace.implied_prefix_cache(scheduled, BLOCK)
    assert facts == {
        "file": str(tmp_path / "trace.jsonl"),
        "requests": len(entries),
        "block_tokens": BLOCK,
        "speedup": 1.0,
        "implied_token_hit_rate": round(implied.token_hit_rate, 4),
        "implied_block_hit_rate": round(implied.block_hit_rate, 4),
        "exact": True,
    }
    # Tags: the class of each line, and whether its first block was seen before.
    metrics = run.report["metrics"]
    hits = sum(s.prefix_hit for s in scheduled)
    assert metrics["prefix_hit"]["requests"] == hits and metrics["prefix_miss"]["requests"] == len(entries) - hits
    assert metrics["chat"]["requests"] == sum(e.get("class") == "chat" for e in entries)


def test_workers_each_send_their_share_and_the_master_merges_all(logging_server, locust_run, tmp_path) -> None:
    url, log = logging_server
    entries = small_trace(tmp_path / "trace.jsonl", requests=20)
    run = locust_run(
        url, "--processes", "2", "-u", "2", "-r", "2", "--trace", str(tmp_path / "trace.jsonl"),
        "--trace-block-tokens", str(BLOCK), "--trace-speedup", "2", locustfile="trace", timeout=90,
    )  # fmt: skip
    assert run.code == 0, run.stderr[-2000:]
    records = logged(log, len(entries))
    assert len(records) == len(entries) == run.report["metrics"]["all"]["requests"]
    assert run.report["run"]["workers"] == 2 == run.report["run"]["workers_complete"]
    # Each request near its time, whichever worker sent it; the bounds leave room for a loaded 2-core
    # CI machine (a burst instead of pacing would be off by up to the trace's 570 ms).
    errors_ms = pacing_errors_ms(records, [e["timestamp"] / 2 for e in entries])
    assert statistics.median(errors_ms) < 20 and max(errors_ms) < 150, errors_ms


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ('{"timestamp": 0, "input_length": 10, "output_length": 5, "hash_ids": [0]', "not valid JSON"),
        ('{"timestamp": 0, "input_length": -1, "output_length": 5, "hash_ids": [0]}', "'input_length' must be >= 1"),
        ('{"timestamp": 0, "input_length": 10, "hash_ids": [0]}', "missing field 'output_length'"),
        (
            '{"timestamp": 0, "input_length": 10, "output_length": 5, "hash_ids": [0, 1]}',
            "hash_ids has 2 blocks but input_length 10 allows at most 1",
        ),
    ],
)
def test_a_bad_trace_line_exits_2_before_any_load(logging_server, locust_run, tmp_path, line, message) -> None:
    url, log = logging_server
    path = tmp_path / "bad.jsonl"
    path.write_text('{"timestamp": 0, "input_length": 10, "output_length": 5, "hash_ids": [0]}\n' + line + "\n")
    run = locust_run(url, "-u", "1", "--trace", str(path), locustfile="trace", timeout=60)
    assert run.code == 2
    assert f"slogate: error: {path}:2: {message}" in run.stderr
    assert run.report["verdict"] == "error"
    assert not log.exists() or not log.read_text()  # nothing was sent


def test_unsorted_times_bad_dataset_or_trace_without_its_user_exit_2(logging_server, locust_run, tmp_path) -> None:
    url, log = logging_server
    unsorted = tmp_path / "unsorted.jsonl"
    unsorted.write_text(
        '{"timestamp": 5, "input_length": 10, "output_length": 5, "hash_ids": [0]}\n'
        '{"timestamp": 1, "input_length": 10, "output_length": 5, "hash_ids": [1]}\n'
    )
    run = locust_run(url, "-u", "1", "--trace", str(unsorted), locustfile="trace", timeout=60)
    assert run.code == 2 and f"{unsorted}:2: timestamp 1 is before line 1's 5" in run.stderr
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}\n{"messages": []}\n')
    run = locust_run(url, "-u", "1", "-t", "5s", "--dataset", str(bad), timeout=60)
    assert run.code == 2 and f"{bad}:2: " in run.stderr
    run = locust_run(url, "-u", "1", "-t", "5s", "--trace", str(unsorted), timeout=60)  # the chat locustfile
    assert run.code == 2 and "--trace needs the trace locustfile" in run.stderr
    assert not log.exists() or not log.read_text()


def test_sharegpt_conversations_replay_with_the_servers_answers(logging_server, locust_run, tmp_path) -> None:
    url, log = logging_server
    run = locust_run(url, "-u", "2", "-t", "3s", "--dataset", str(datasets.SAMPLE_SHAREGPT), timeout=60)
    assert run.code == 0, run.stderr[-2000:]
    assert run.report["run"]["workload"]["dataset"] == {
        "file": str(datasets.SAMPLE_SHAREGPT),
        "format": "sharegpt",
        "entries": len(datasets.load_dataset(datasets.SAMPLE_SHAREGPT)),
    }
    humans = {
        turn.messages[-1]["content"]
        for conversation in datasets.load_dataset(datasets.SAMPLE_SHAREGPT)
        for turn in conversation.turns
    }
    follow_ups = [r for r in logged(log) if any(m["role"] == "assistant" for m in r["body"]["messages"])]
    assert follow_ups, "no multi-turn conversation reached its second turn"
    for record in follow_ups:
        messages = record["body"]["messages"]
        assert all(m["content"] for m in messages if m["role"] == "assistant")  # the server's own answers
        assert {m["content"] for m in messages if m["role"] == "user"} <= humans
    assert "follow_up" in run.report["metrics"]


def test_chat_jsonl_requests_pass_their_fields_through(logging_server, locust_run, tmp_path) -> None:
    url, log = logging_server
    path = tmp_path / "chat.jsonl"
    path.write_text(
        '{"messages": [{"role": "user", "content": "alpha"}], "max_tokens": 7, "class": "short", "top_p": 0.5}\n'
        '{"messages": [{"role": "user", "content": "beta"}], "max_tokens": 9}\n'
    )
    run = locust_run(url, "-u", "1", "-t", "2s", "--dataset", str(path), timeout=60)
    assert run.code == 0, run.stderr[-2000:]
    counted = run.report["metrics"]["short"]["requests"] + run.report["metrics"][DATASET_CLASS]["requests"]
    bodies = [r["body"] for r in logged(log, counted)]
    assert {(b["messages"][0]["content"], b["max_tokens"], b.get("top_p")) for b in bodies} == {
        ("alpha", 7, 0.5),
        ("beta", 9, None),
    }
    assert len(bodies) - 1 <= counted <= len(bodies)  # the one request in flight at the stop may be left out


# --- unit tests: no server ----------------------------------------------------------------------


def test_trace_request_is_the_prompt_with_output_length_and_tags() -> None:
    request = trace.TraceRequest(1, 0.0, 20, 5, (3, 4), "chat")
    scheduled = trace.ScheduledRequest(0.0, request, prefix_hit=True)
    workload = Workload(WorkloadConfig(), "m", 1.0)
    builder = trace_prompts.PromptBuilder(["a", " b", " c"], BLOCK)
    req = replay.trace_request(workload, builder, scheduled)
    assert req.request_class == PREFIX_HIT and req.tags == ("chat",)
    assert req.body["max_tokens"] == 5 and req.body["ignore_eos"] is True
    assert req.body["messages"] == [{"role": "user", "content": builder.prompt(request)}]


def test_dataset_workload_sends_each_turn_after_the_previous_answer() -> None:
    workload = Workload(WorkloadConfig(dataset=str(datasets.SAMPLE_SHAREGPT), seed=1), "m", 1.0)
    draws = [workload.next_request(None) for _ in range(5)]  # type: ignore[arg-type]  # no rng: a seeded order
    first = next(r for r in draws if r.has_follow_up)
    conversation = first.conversation
    assert conversation is not None and first.turns == len(conversation.turns) > 1
    assert first.body["max_tokens"] == conversation.turns[0].max_tokens
    second = workload.follow_up(first, "the answer", None)  # type: ignore[arg-type]
    assert second.messages == conversation.messages(1, ["the answer"])
    assert second.body["max_tokens"] == conversation.turns[1].max_tokens
    assert second.tags == ("follow_up", "turn_2") and second.request_class == DATASET_CLASS
    assert workload.describe()["dataset"]["format"] == "sharegpt"
    # The same seed, the same order.
    again = Workload(WorkloadConfig(dataset=str(datasets.SAMPLE_SHAREGPT), seed=1), "m", 1.0)
    assert [again.next_request(None).conversation for _ in range(5)] == [r.conversation for r in draws]  # type: ignore[arg-type]
