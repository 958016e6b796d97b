"""Mooncake trace replay, Locust-free: validation, schedule, shards, implied hit rate, tags, and
token-exact prompts (with fake tokenizers here; with vLLM's own in the vllm-marked test)."""

import json
import os
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
from slogate.locustfiles.load import server
from slogate.locustfiles.load.trace import (
    SAMPLE_TRACE,
    TraceError,
    TraceRequest,
    implied_prefix_cache,
    load_trace,
    sample_trace_lines,
    schedule,
    shard,
)
from slogate.locustfiles.load.trace_prompts import PromptBuilder, PromptError

from tests.conftest import DATA

HANDMADE = DATA / "traces" / "handmade.jsonl"
GOOD = {"timestamp": 0, "input_length": 1000, "output_length": 10, "hash_ids": [1, 2]}


def write_trace(tmp_path: Path, *lines: str | dict) -> Path:
    path = tmp_path / "trace.jsonl"
    path.write_text("".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines))
    return path


# --- validation -------------------------------------------------------------------------------


def test_loads_every_field_and_skips_blank_lines() -> None:
    requests = load_trace(HANDMADE, block_tokens=4)
    assert [r.line for r in requests] == [1, 2, 3, 5, 6]
    assert requests[1] == TraceRequest(2, 100.0, 10, 5, (1, 2, 3), "chat")
    assert requests[4].timestamp_ms == 400.5 and requests[4].request_class is None
    assert requests[1].block_sizes(4) == [4, 4, 2]


BAD_LINES = [
    ("{not json", "not valid JSON"),
    ("[1, 2]", "expected a JSON object, got list"),
    ({**GOOD, "timestamp": None}, "'timestamp' must be a number of ms, got None"),
    ({k: v for k, v in GOOD.items() if k != "timestamp"}, "missing field 'timestamp'"),
    ({k: v for k, v in GOOD.items() if k != "input_length"}, "missing field 'input_length'"),
    ({k: v for k, v in GOOD.items() if k != "output_length"}, "missing field 'output_length'"),
    ({k: v for k, v in GOOD.items() if k != "hash_ids"}, "missing field 'hash_ids'"),
    ({**GOOD, "timestamp": -1}, "'timestamp' must be >= 0, got -1"),
    ({**GOOD, "timestamp": True}, "'timestamp' must be a number of ms, got True"),
    ({**GOOD, "input_length": -5}, "'input_length' must be >= 1, got -5"),
    ({**GOOD, "input_length": 1000.0}, "'input_length' must be an integer, got 1000.0"),
    ({**GOOD, "output_length": 0}, "'output_length' must be >= 1, got 0"),
    ({**GOOD, "output_length": -3}, "'output_length' must be >= 1, got -3"),
    ({**GOOD, "hash_ids": [1, -2]}, "'hash_ids' must be a list of integers >= 0"),
    ({**GOOD, "hash_ids": "1,2"}, "'hash_ids' must be a list of integers >= 0"),
    ({**GOOD, "class": ""}, "'class' must be a non-empty string, got ''"),
    ({**GOOD, "class": 3}, "'class' must be a non-empty string, got 3"),
    ({**GOOD, "class": "prefix_hit"}, "'class' 'prefix_hit' is a name slogate gives requests itself"),
    ({**GOOD, "class": "turn_3"}, "'class' 'turn_3' is a name slogate gives requests itself"),
    (
        {**GOOD, "input_length": 4000, "hash_ids": list(range(9))},
        "hash_ids has 9 blocks but input_length 4000 allows at most 8 (block 512 tokens)",
    ),
    (
        {**GOOD, "input_length": 4000, "hash_ids": [1, 2, 3]},
        "hash_ids has 3 blocks but input_length 4000 needs 8 (block 512 tokens)",
    ),
    ({**GOOD, "hash_ids": []}, "hash_ids has 0 blocks but input_length 1000 needs 2 (block 512 tokens)"),
]


@pytest.mark.parametrize(("bad", "message"), BAD_LINES, ids=[m for _, m in BAD_LINES])
def test_a_bad_line_is_one_error_naming_file_and_line(tmp_path: Path, bad: str | dict, message: str) -> None:
    path = write_trace(tmp_path, GOOD, {**GOOD, "timestamp": 5}, bad, GOOD)
    with pytest.raises(TraceError) as caught:
        load_trace(path)
    text = str(caught.value)
    assert text.startswith(f"{path}:3: ") and message in text
    assert "\n" not in text


def test_unsorted_timestamps_name_both_lines(tmp_path: Path) -> None:
    path = write_trace(tmp_path, GOOD, {**GOOD, "timestamp": 2000}, {**GOOD, "timestamp": 1000})
    with pytest.raises(TraceError, match=r":3: timestamp 1000 is before line 2's 2000 \(a trace must be sorted"):
        load_trace(path)


def test_the_block_size_decides_how_many_blocks_fit(tmp_path: Path) -> None:
    path = write_trace(tmp_path, {**GOOD, "input_length": 1000, "hash_ids": [1, 2, 3, 4]})
    assert load_trace(path, block_tokens=256)[0].block_sizes(256) == [256, 256, 256, 232]
    with pytest.raises(TraceError, match=r":1: hash_ids has 4 blocks but input_length 1000 allows at most 2"):
        load_trace(path)


def test_an_empty_or_missing_file_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="no requests"):
        load_trace(write_trace(tmp_path, ""))
    with pytest.raises(TraceError, match=r"absent\.jsonl: cannot read: No such file"):
        load_trace(tmp_path / "absent.jsonl")


# --- schedule and shards ----------------------------------------------------------------------


def requests_at(*ms: float) -> list[TraceRequest]:
    return [TraceRequest(i + 1, t, 10, 1, (i,), None) for i, t in enumerate(ms)]


def test_schedule_keeps_the_trace_times_scaled_by_the_speedup() -> None:
    trace = requests_at(0, 500, 2000, 2000, 7000)
    assert [s.send_at_s for s in schedule(trace)] == [0.0, 0.5, 2.0, 2.0, 7.0]
    assert [s.send_at_s for s in schedule(trace, speedup=4)] == [0.0, 0.125, 0.5, 0.5, 1.75]
    assert [s.send_at_s for s in schedule(trace, speedup=0.5)] == [0.0, 1.0, 4.0, 4.0, 14.0]


def test_start_offset_and_limit_select_a_window_timed_from_its_start() -> None:
    trace = requests_at(0, 500, 2000, 2000, 7000)
    window = schedule(trace, start_s=0.5)
    assert [(s.request.line, s.send_at_s) for s in window] == [(2, 0.0), (3, 1.5), (4, 1.5), (5, 6.5)]
    assert [s.request.line for s in schedule(trace, start_s=1.0, limit=2)] == [3, 4]
    assert [s.send_at_s for s in schedule(trace, speedup=2, start_s=2.0, limit=5)] == [0.0, 0.0, 2.5]
    assert schedule(trace, start_s=8.0) == []


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"speedup": 0}, "--trace-speedup must be > 0"),
        ({"speedup": float("nan")}, "--trace-speedup must be > 0"),
        ({"start_s": -1}, "--trace-start-s must be >= 0"),
        ({"limit": 0}, "--trace-limit must be >= 1"),
    ],
)
def test_bad_schedule_options_are_refused(options: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        schedule(requests_at(0), **options)


def test_shards_split_the_schedule_and_keep_every_time() -> None:
    full = schedule(requests_at(*range(0, 1000, 10)))
    shards = [shard(full, i, 3) for i in range(3)]
    assert sorted((s for part in shards for s in part), key=lambda s: s.request.line) == full
    assert [len(part) for part in shards] == [34, 33, 33]
    assert all(part == sorted(part, key=lambda s: s.send_at_s) for part in shards)
    assert shards[1][0].send_at_s == full[1].send_at_s == 0.01
    assert shard(full, 0, 1) == full
    with pytest.raises(ValueError, match="shard 3 of 3"):
        shard(full, 3, 3)


# --- prefix sharing: implied hit rate and tags ------------------------------------------------


def test_the_implied_hit_rate_of_a_hand_made_trace() -> None:
    """Blocks of 4 tokens: [1,2] | [1,2,3]: 1,2 hit | [9] | [1,2,3]: all hit, but block 3 was sent
    as 2 tokens, so 10 of its 12 tokens | [1,7]: 1 hits. 6 of 11 blocks, 22 of 38 tokens."""
    stats = implied_prefix_cache(schedule(load_trace(HANDMADE, block_tokens=4)), block_tokens=4)
    assert (stats.blocks, stats.hit_blocks, stats.tokens, stats.hit_tokens) == (11, 6, 38, 22)
    assert stats.block_hit_rate == 6 / 11 and stats.token_hit_rate == 22 / 38


def test_a_block_after_a_miss_does_not_hit() -> None:
    trace = [TraceRequest(1, 0, 8, 1, (1, 2), None), TraceRequest(2, 1, 8, 1, (3, 2), None)]
    stats = implied_prefix_cache(schedule(trace), block_tokens=4)
    assert (stats.hit_blocks, stats.hit_tokens) == (0, 0)


def test_the_hit_rate_counts_only_what_the_window_sends() -> None:
    trace = load_trace(HANDMADE, block_tokens=4)
    stats = implied_prefix_cache(schedule(trace, start_s=0.2), block_tokens=4)
    assert (stats.blocks, stats.hit_blocks) == (6, 1)  # [9] | [1,2,3] all new | [1,7]: 1 hits


def test_the_schedule_says_whether_each_first_block_was_seen_and_keeps_the_class() -> None:
    scheduled = schedule(load_trace(HANDMADE, block_tokens=4))
    assert [(s.request.request_class, s.prefix_hit) for s in scheduled] == [
        (None, False),
        ("chat", True),
        (None, False),
        ("chat", True),
        (None, True),
    ]
    assert [s.prefix_hit for s in shard(schedule(load_trace(HANDMADE, block_tokens=4)), 1, 2)] == [True, True]


# --- token-exact prompts ----------------------------------------------------------------------

MULTI_TOKEN = {"people", "government", "information", "relationship", "organization"}


def word_counter(text: str) -> int:
    """A tokenizer that never merges across words and splits a few words in two."""
    return sum(2 if word in MULTI_TOKEN else 1 for word in text.split())


def test_calibration_keeps_only_single_token_words() -> None:
    builder = PromptBuilder.calibrate(word_counter, block_tokens=16)
    assert builder.exact and len(builder.words) == 64
    assert not {w.strip() for w in builder.words} & MULTI_TOKEN
    assert all(w.startswith(" ") and word_counter(w) == 1 for w in builder.words)


def test_prompts_are_exactly_input_length_tokens() -> None:
    builder = PromptBuilder.calibrate(word_counter, block_tokens=512)
    for request in load_trace(SAMPLE_TRACE)[:40]:
        assert word_counter(builder.prompt(request)) == request.input_length


def test_equal_ids_give_identical_blocks_and_distinct_ids_distinct_ones() -> None:
    builder = PromptBuilder.calibrate(word_counter, block_tokens=4)
    a = builder.prompt(TraceRequest(1, 0, 12, 1, (5, 6, 7), None))
    b = builder.prompt(TraceRequest(2, 0, 10, 1, (5, 6, 8), None))
    assert a.split()[:8] == b.split()[:8] and a.split()[8:] != b.split()[8:]
    # every id of a large range gets its own block, even at 4 tokens a block
    blocks = {builder.block(h, 4) for h in range(20_000)}
    assert len(blocks) == 20_000


def test_a_short_block_is_the_start_of_the_full_one() -> None:
    """A turn's short last block is the start of the next turn's full block, so it shares it."""
    builder = PromptBuilder.calibrate(word_counter, block_tokens=32)
    assert builder.block(7, 32).startswith(builder.block(7, 5))
    assert word_counter(builder.block(7, 5)) == 5


def test_the_nonce_changes_every_block_and_nothing_else_does() -> None:
    words = PromptBuilder.calibrate(word_counter, block_tokens=64).words
    run1, run1_again, run2 = (PromptBuilder(words, 64, nonce) for nonce in ("a", "a", "b"))
    assert run1.block(3, 64) == run1_again.block(3, 64)
    assert run1.block(3, 64) != run2.block(3, 64)
    assert word_counter(run2.block(3, 64)) == 64


def test_every_process_builds_the_same_block(tmp_path: Path) -> None:
    """Blocks do not depend on Python's per-process string hashing (`--processes` workers)."""
    code = (
        "from slogate.locustfiles.load.trace_prompts import PromptBuilder;"
        "print(PromptBuilder.calibrate(lambda t: len(t.split()), 64, 'n').block(123, 64))"
    )
    here = PromptBuilder.calibrate(lambda t: len(t.split()), 64, "n").block(123, 64)
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    other = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert other.stdout.rstrip("\n") == here


def test_a_tokenizer_that_merges_across_words_is_refused() -> None:
    def merging(text: str) -> int:
        words = len(text.split())
        return words if words == 1 else words - words // 10  # some pairs merge into one token

    with pytest.raises(PromptError, match="merges across words"):
        PromptBuilder.calibrate(merging, block_tokens=64)


def test_a_tokenizer_without_single_token_words_is_refused() -> None:
    with pytest.raises(PromptError, match="only 0 single-token words"):
        PromptBuilder.calibrate(lambda text: 3 * len(text.split()), block_tokens=64)


def test_without_tokenize_blocks_are_still_shared_but_not_exact() -> None:
    calls = []
    builder = PromptBuilder.calibrate(lambda text: calls.append(text), block_tokens=8)  # always None
    assert not builder.exact and len(calls) == 1
    assert builder.block(1, 8) == builder.block(1, 8) != builder.block(2, 8)
    assert len(builder.block(1, 8).split()) == 8


# --- the sample trace -------------------------------------------------------------------------


def test_the_shipped_sample_trace_is_what_the_generator_writes() -> None:
    assert SAMPLE_TRACE.read_text().splitlines() == sample_trace_lines()


def test_the_sample_trace_mixes_shared_prefixes_chains_and_unique_requests() -> None:
    requests = load_trace(SAMPLE_TRACE)
    first_blocks = [r.hash_ids[0] for r in requests]
    shared = {h for h in first_blocks if first_blocks.count(h) >= 10}
    assert len(shared) == 3
    assert sum(1 for h in first_blocks if h not in shared) >= 20  # unique requests
    earlier: list[tuple[int, ...]] = []
    chains = 0
    for r in requests:
        chains += any(len(e) < len(r.hash_ids) and r.hash_ids[: len(e)] == e and len(e) > 4 for e in earlier)
        earlier.append(r.hash_ids)
    assert chains >= 20  # later turns extend an earlier turn beyond its system prefix
    assert all(r.input_length + r.output_length <= 8192 for r in requests)
    assert {r.request_class for r in requests} == {"chat", "agent", "summarize", None}
    stats = implied_prefix_cache(schedule(requests), block_tokens=512)
    assert 0.4 < stats.token_hit_rate < 0.7


# --- against the real tokenizer ---------------------------------------------------------------


def tokenize(host: str, **body: object) -> list[int]:
    request = urllib.request.Request(
        f"{host}/tokenize",
        data=json.dumps({"model": "tiny", "add_special_tokens": False, **body}).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())["tokens"]


@pytest.mark.vllm
def test_prompts_are_token_exact_with_the_servers_tokenizer(vllm_server: str) -> None:
    """Through vLLM's /tokenize: every prompt of the sample trace's first requests is exactly
    `input_length` tokens, and two requests share exactly their common blocks' tokens, as text
    and inside the chat template."""
    builder = PromptBuilder.calibrate(lambda text: server.count_tokens(vllm_server, {}, "tiny", text), 512, "t")
    assert builder.exact
    requests = load_trace(SAMPLE_TRACE)[:30]
    tokens = {r.line: tokenize(vllm_server, prompt=builder.prompt(r)) for r in requests}
    assert [len(tokens[r.line]) for r in requests] == [r.input_length for r in requests]

    def common(a: list[int], b: list[int]) -> int:
        return next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))

    pairs = 0
    for i, a in enumerate(requests):
        for b in requests[i + 1 :]:
            shared_blocks = common(list(a.hash_ids), list(b.hash_ids))
            if shared_blocks == 0:
                continue
            pairs += 1
            sizes = zip(a.block_sizes(512), b.block_sizes(512), strict=False)
            shared_tokens = sum(min(pair) for pair in list(sizes)[:shared_blocks])
            assert tokens[a.line][:shared_tokens] == tokens[b.line][:shared_tokens]
            if shared_blocks < min(len(a.hash_ids), len(b.hash_ids)):  # then they part: distinct blocks
                assert common(tokens[a.line], tokens[b.line]) - shared_tokens < 4
    assert pairs >= 50

    chat = [
        tokenize(vllm_server, messages=[{"role": "user", "content": builder.prompt(r)}], add_generation_prompt=True)
        for r in requests[:2]
    ]
    template = len(chat[0]) - requests[0].input_length
    assert len(chat[1]) - requests[1].input_length == template  # the template adds the same tokens
    # both start with blocks 0..3 (a system prefix), then part at the next block, after the template's head
    assert requests[0].hash_ids[:5] != requests[1].hash_ids[:5] and requests[0].hash_ids[:4] == (0, 1, 2, 3)
    assert requests[1].hash_ids[:4] == (0, 1, 2, 3)
    assert 2048 < common(chat[0], chat[1]) <= 2048 + template


def prefix_cache_counters(host: str) -> tuple[float, float]:
    """vLLM's prefix-cache (hits, queries) in tokens, summed over its label sets."""
    with urllib.request.urlopen(f"{host}/metrics", timeout=30) as response:
        text = response.read().decode()
    totals = {"vllm:prefix_cache_hits_total": 0.0, "vllm:prefix_cache_queries_total": 0.0}
    for line in text.splitlines():
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if name in totals:
            totals[name] += float(line.rsplit(" ", 1)[1])
    return totals["vllm:prefix_cache_hits_total"], totals["vllm:prefix_cache_queries_total"]


@pytest.mark.vllm
def test_vllm_measures_the_hit_rate_the_sample_trace_implies(vllm_server: str) -> None:
    """Sent one at a time (no request overtakes another's prefill), the sample trace's first
    requests hit vLLM's prefix cache at the token rate the trace implies, within 2 points: vLLM
    caches whole 16-token blocks only, and the chat template adds its own few tokens. (The first
    120 requests, 2026-12-03: implied 0.501, measured 0.494.)"""
    builder = PromptBuilder.calibrate(lambda text: server.count_tokens(vllm_server, {}, "tiny", text), 512, "hit-rate")
    replay = schedule(load_trace(SAMPLE_TRACE), limit=60)
    hits0, queries0 = prefix_cache_counters(vllm_server)
    for scheduled in replay:
        body = {
            "model": "tiny",
            "messages": [{"role": "user", "content": builder.prompt(scheduled.request)}],
            "max_tokens": 1,
        }
        request = urllib.request.Request(
            f"{vllm_server}/v1/chat/completions", json.dumps(body).encode(), {"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=60) as response:
            response.read()
    hits1, queries1 = prefix_cache_counters(vllm_server)
    measured = (hits1 - hits0) / (queries1 - queries0)
    implied = implied_prefix_cache(replay, 512).token_hit_rate
    assert implied > 0.3 and abs(measured - implied) < 0.02, (implied, measured)
