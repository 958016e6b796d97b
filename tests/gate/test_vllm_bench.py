"""Reading `vllm bench serve --save-result --save-detailed` results (slo/gate/vllm_bench.py).

The samples in tests/data were recorded with vLLM 0.32's own client against the fault server
(tests/data/record_vllm_bench.py): 20 requests each, 6 of them failed (2 HTTP 500, 2 HTTP 429,
2 streams cut after their first chunks). Expected figures are computed here from the JSON lists.
"""

from __future__ import annotations

import json
import math
from datetime import datetime

import pytest
from slogate.slo.gate.record import ErrorKind
from slogate.slo.gate.vllm_bench import (
    CHAT_TTFT_NOTE,
    REQUEST_CLASS,
    VllmBenchError,
    classify_error,
    load_vllm_bench,
    looks_like_vllm_bench,
)

from tests.conftest import DATA

SAMPLES = ("vllm_bench_chat.json", "vllm_bench_completions.json")


def sample(name: str = "vllm_bench_chat.json") -> dict:
    return json.loads((DATA / name).read_text())


def nearest_rank(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[max(1, math.ceil(p / 100 * len(ordered))) - 1]


def close(got_ms: float | None, want_ms: float) -> bool:
    # The histogram keeps 3 significant digits (within 0.1 %); the reader rounds seconds to whole us.
    return got_ms is not None and abs(got_ms - want_ms) <= want_ms * 0.001 + 0.0005


@pytest.mark.parametrize("name", SAMPLES)
def test_sample_loads_with_the_lists_counts(name: str) -> None:
    data = sample(name)
    run = load_vllm_bench(data, name)
    ok = [i for i, e in enumerate(data["errors"]) if not e]
    total = run.store.get("all")
    assert run.store.class_names() == ["all", REQUEST_CLASS]
    assert total.requests == len(data["ttfts"]) == data["num_prompts"] == 20
    assert total.failures == len(data["ttfts"]) - len(ok) == data["failed"] == 6
    assert total.successes == data["completed"] == 14
    assert total.latency["itl"].count == sum(len(data["itls"][i]) for i in ok)
    assert total.output_tokens == sum(data["output_lens"][i] for i in ok) == data["total_output_tokens"]
    assert total.prompt_tokens == sum(data["input_lens"][i] for i in ok) == data["total_input_tokens"]
    assert run.model == data["model_id"] and run.endpoint_type == data["endpoint_type"]
    assert run.duration_s == data["duration"]
    assert run.facts["completed"] == 14 and run.facts["num_prompts"] == 20 and "itls" not in run.facts


@pytest.mark.parametrize("name", SAMPLES)
@pytest.mark.parametrize("metric,field", [("ttft", "ttfts"), ("e2e", "latencies")])
def test_percentiles_match_the_lists(name: str, metric: str, field: str) -> None:
    data = sample(name)
    hist = load_vllm_bench(data, name).store.get("all").latency[metric]
    values_ms = [v * 1000 for v, e in zip(data[field], data["errors"], strict=True) if not e]
    assert hist.count == len(values_ms)
    for p in (50, 90, 95, 99):
        assert close(hist.percentile_ms(p), nearest_rank(values_ms, p)), (p, hist.percentile_ms(p))


@pytest.mark.parametrize("name", SAMPLES)
def test_tpot_is_vllms_definition(name: str) -> None:
    data = sample(name)
    hist = load_vllm_bench(data, name).store.get("all").latency["tpot"]
    tpots_ms = [
        (lat - ttft) / (n - 1) * 1000
        for lat, ttft, n, e in zip(data["latencies"], data["ttfts"], data["output_lens"], data["errors"], strict=True)
        if not e and n > 1
    ]
    assert hist.count == len(tpots_ms) == 12
    for p in (50, 99):
        assert close(hist.percentile_ms(p), nearest_rank(tpots_ms, p))


@pytest.mark.parametrize("name", SAMPLES)
def test_failures_are_counted_by_kind(name: str) -> None:
    data = sample(name)
    errors = [e for e in data["errors"] if e]
    kinds = load_vllm_bench(data, name).store.get("all").errors_by_kind
    assert kinds == {
        "http_5xx": errors.count("Internal Server Error"),
        "http_429": errors.count("Too Many Requests"),
        "truncated": sum("ClientPayloadError" in e for e in errors),
    }
    assert sum(kinds.values()) == 6 and min(kinds.values()) == 2


def test_failed_requests_in_vllm_0_32() -> None:
    """What vLLM 0.32 writes for a failure: ttft 0, no ITL, latency 0, output 0 (partial stream: ttft > 0)."""
    data = sample()
    for i, err in enumerate(data["errors"]):
        if err in ("Internal Server Error", "Too Many Requests"):
            assert (data["ttfts"][i], data["itls"][i], data["latencies"][i], data["output_lens"][i]) == (0, [], 0, 0)
        elif err:
            assert data["ttfts"][i] > 0 and data["latencies"][i] == 0 and data["output_lens"][i] == 0
    assert load_vllm_bench(data, "x").store.get("all").failures == 6


def test_chat_note_only_for_the_chat_backend() -> None:
    chat = load_vllm_bench(sample("vllm_bench_chat.json"), "chat.json")
    completions = load_vllm_bench(sample("vllm_bench_completions.json"), "completions.json")
    assert chat.endpoint_type == "openai-chat" and CHAT_TTFT_NOTE in chat.notes
    assert completions.endpoint_type == "openai" and CHAT_TTFT_NOTE not in completions.notes
    assert completions.notes == []
    assert all("\n" not in note for note in chat.notes)


def test_the_role_chunk_shows_in_the_samples() -> None:
    """The fault server sends the role chunk at once: chat TTFT is the role chunk, completions' is true."""
    chat = load_vllm_bench(sample("vllm_bench_chat.json"), "c").store.get("all").latency["ttft"]
    completions = load_vllm_bench(sample("vllm_bench_completions.json"), "c").store.get("all").latency["ttft"]
    assert (chat.percentile_ms(50) or 0) < 10 < 40 < (completions.percentile_ms(50) or 0)


def test_perf_counter_start_times_go_on_the_wall_clock() -> None:
    data = sample()
    assert max(data["start_times"]) < 1e9  # vLLM 0.32 writes time.perf_counter() readings
    run = load_vllm_bench(data, "x")
    ended = datetime.strptime(data["date"], "%Y%m%d-%H%M%S").timestamp()
    assert run.started_at == pytest.approx(ended - data["duration"])
    total = run.store.get("all")
    assert total.first_start == pytest.approx(run.started_at)
    ok = [i for i, e in enumerate(data["errors"]) if not e]
    span = max(data["start_times"][i] + data["latencies"][i] for i in ok) - min(data["start_times"][i] for i in ok)
    assert total.duration_s == pytest.approx(span, abs=1e-6)


def test_epoch_start_times_are_kept() -> None:
    data = sample()
    data["start_times"] = [1.7e9 + s for s in data["start_times"]]
    run = load_vllm_bench(data, "x")
    assert run.started_at == min(data["start_times"])
    assert run.store.get("all").first_start == pytest.approx(min(data["start_times"]))


def test_without_date_start_times_are_relative() -> None:
    data = sample()
    del data["date"]
    run = load_vllm_bench(data, "x")
    assert run.started_at is None and run.store.get("all").first_start == 0


def test_older_file_without_latencies_or_start_times() -> None:
    data = sample("vllm_bench_completions.json")
    del data["latencies"], data["start_times"], data["endpoint_type"]
    run = load_vllm_bench(data, "old.json")
    assert run.endpoint_type == "openai" and run.facts["endpoint_type"] == "openai"  # from `backend`
    assert len(run.notes) == 2 and "latencies" in run.notes[0] and "start_times" in run.notes[1]
    e2e = run.store.get("all").latency["e2e"]
    assert e2e.count == 14  # a failure's ttft + ITLs is not counted: it has an error
    longest = max(t + sum(g) for t, g, e in zip(data["ttfts"], data["itls"], data["errors"], strict=True) if not e)
    assert close(e2e.max_ms(), longest * 1000)


def test_completed_disagreeing_with_the_lists_is_noted() -> None:
    data = sample("vllm_bench_completions.json")
    data["completed"] = 15
    assert any("15" in n and "14" in n for n in load_vllm_bench(data, "x").notes)


def _drop(field: str):
    return lambda d: d.pop(field)


def _set(field: str, index: int, value: object):
    return lambda d: d[field].__setitem__(index, value)


@pytest.mark.parametrize(
    "mutate,field,words",
    [
        (_drop("itls"), "itls", "missing; save the result with --save-result --save-detailed"),
        (_drop("ttfts"), "ttfts", "missing"),
        (_drop("errors"), "errors", "missing"),
        (_drop("output_lens"), "output_lens", "missing"),
        (lambda d: d["latencies"].pop(), "latencies", "19 items, but 'ttfts' has 20"),
        (lambda d: d["start_times"].append(1.0), "start_times", "21 items"),
        (lambda d: d["itls"].pop(), "itls", "19 items"),
        (_set("ttfts", 3, "abc"), "ttfts", "item 3 is 'abc', not a number"),
        (_set("ttfts", 4, None), "ttfts", "item 4 is None"),
        (_set("ttfts", 4, True), "ttfts", "item 4 is True"),
        (_set("latencies", 0, -1.0), "latencies", "item 0 is -1.0, not a number >= 0"),
        (_set("start_times", 2, "t"), "start_times", "item 2 is 't', not a number"),
        (_set("input_lens", 1, [1]), "input_lens", "item 1 is [1]"),
        (_set("output_lens", 5, float("nan")), "output_lens", "item 5 is nan"),
        (_set("itls", 0, 0.5), "itls", "item 0 is 0.5, not a list of numbers"),
        (lambda d: d["itls"][0].__setitem__(1, "x"), "itls", "item 0[1] is 'x'"),
        (_set("errors", 2, 500), "errors", "item 2 is 500, not a string"),
        (lambda d: d.__setitem__("ttfts", {"a": 1}), "ttfts", "a dict, not a list"),
        (lambda d: d.__setitem__("endpoint_type", "openai-embeddings"), "endpoint_type", "pooling benchmark"),
    ],
)
def test_malformed_content_names_the_file_and_field(mutate, field: str, words: str) -> None:
    data = sample()
    mutate(data)
    with pytest.raises(VllmBenchError) as exc:
        load_vllm_bench(data, "result.json")
    message = str(exc.value)
    assert message.startswith(f"result.json: field {field!r}: "), message
    assert words in message and "\n" not in message


def test_a_result_saved_without_save_detailed() -> None:
    data = sample()
    for name in ("input_lens", "output_lens", "start_times", "ttfts", "itls", "generated_texts", "errors"):
        del data[name]  # what vllm bench serve does without --save-detailed
    assert looks_like_vllm_bench(data)
    with pytest.raises(VllmBenchError, match=r"^result\.json: field 'ttfts': missing; save the result with"):
        load_vllm_bench(data, "result.json")


def test_not_an_object() -> None:
    with pytest.raises(VllmBenchError, match=r"^r\.json: not a JSON object$"):
        load_vllm_bench([1, 2], "r.json")  # type: ignore[arg-type]


def test_empty_lists_load_empty() -> None:
    data = {k: [] for k in ("ttfts", "itls", "errors", "input_lens", "output_lens", "latencies", "start_times")}
    run = load_vllm_bench(data, "x")
    assert run.store.get("all").requests == 0 and run.started_at is None


@pytest.mark.parametrize("name", SAMPLES)
def test_detection_says_yes_for_the_samples(name: str) -> None:
    assert looks_like_vllm_bench(sample(name))


@pytest.mark.parametrize(
    "data",
    [
        {"schema": "slogate.report/1", "metrics": {"all": {"ttft_ms": {"p50": 1.0}}}, "verdict": "pass"},
        {"schema": "slogate.report/1", "ttfts": [], "itls": []},  # a slogate report is never one
        {"a": 1, "b": [1, 2, 3]},
        {"ttfts": "1,2", "itls": []},
        {"results": [{"ttft": 0.1}]},
        {},
        [{"ttfts": [], "itls": []}],
        "ttfts",
        42,
        None,
    ],
)
def test_detection_says_no_for_other_json(data: object) -> None:
    assert not looks_like_vllm_bench(data)


TRACEBACK = 'Traceback (most recent call last):\n  File "x.py", line 1, in f\n    g()\n{}\n'


@pytest.mark.parametrize(
    "message,first_token,kind",
    [
        ("Too Many Requests", False, ErrorKind.HTTP_429),
        ("Internal Server Error", False, ErrorKind.HTTP_5XX),
        ("Service Unavailable", False, ErrorKind.HTTP_5XX),
        ("Gateway Timeout", False, ErrorKind.HTTP_5XX),  # the phrase wins over "timeout"
        ("Bad Request", False, ErrorKind.HTTP_4XX),
        ("Not Found", False, ErrorKind.HTTP_4XX),
        ("HTTP 503: upstream busy", False, ErrorKind.HTTP_5XX),
        ("status code 429", False, ErrorKind.HTTP_429),
        ("404", False, ErrorKind.HTTP_4XX),
        ("rate limit exceeded", False, ErrorKind.HTTP_429),
        ("Never received a valid chunk to calculate TTFT.This response will be marked as failed!", False,
         ErrorKind.NO_CONTENT),
        ("Stream ended without a terminal event.This response will be marked as failed!", True, ErrorKind.TRUNCATED),
        ('{"message": "boom", "code": 500}', True, ErrorKind.STREAM_ERROR),
        (TRACEBACK.format("TimeoutError"), False, ErrorKind.TIMEOUT),
        (TRACEBACK.format("aiohttp.client_exceptions.ServerTimeoutError: Timeout on reading data from socket"), True,
         ErrorKind.TIMEOUT),
        (TRACEBACK.format(
            "aiohttp.client_exceptions.ClientConnectorError: Cannot connect to host 127.0.0.1:1 ssl:default "
            "[Connect call failed ('127.0.0.1', 1)]"), False, ErrorKind.CONNECT),
        (TRACEBACK.format("aiohttp.client_exceptions.ServerDisconnectedError: Server disconnected"), False,
         ErrorKind.CONNECT),
        (TRACEBACK.format("aiohttp.client_exceptions.ServerDisconnectedError: Server disconnected"), True,
         ErrorKind.TRUNCATED),
        (TRACEBACK.format(
            "aiohttp.client_exceptions.ClientPayloadError: Response payload is not completed: "
            "<TransferEncodingError: 400, message='Not enough data to satisfy transfer length header.'>"), True,
         ErrorKind.TRUNCATED),
        (TRACEBACK.format("json.decoder.JSONDecodeError: Expecting value: line 1 column 1 (char 0)"), True,
         ErrorKind.PROTOCOL),
        (TRACEBACK.format("KeyError: 'delta'"), True, ErrorKind.PROTOCOL),
        ("X", False, ErrorKind.PROTOCOL),  # an unknown reason phrase (launch/fault_server.py writes "X")
        ("", False, ErrorKind.PROTOCOL),  # a failed response without any reason phrase
    ],
)  # fmt: skip
def test_classify_error(message: str, first_token: bool, kind: ErrorKind) -> None:
    assert classify_error(message, first_token) is kind


def test_a_failure_is_an_error_or_a_zero_latency() -> None:
    data = sample()
    assert not data["errors"][0] and data["latencies"][0] > 0
    data["errors"][0] = TRACEBACK.format("TimeoutError")
    data["latencies"][1] = 0.0  # a failed response whose reason phrase was empty: error ""
    total = load_vllm_bench(data, "x").store.get("all")
    assert total.failures == 8 and total.errors_by_kind["timeout"] == 1 and total.errors_by_kind["protocol"] == 1
