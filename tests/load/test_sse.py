"""The SSE reader and each endpoint's event mapping: framing, TTFT semantics, usage, errors."""

import json

import pytest
from slogate.locustfiles.load.bounds import bounded_bytes
from slogate.locustfiles.load.sse import (
    MAX_LINE_BYTES,
    SseParser,
    StreamErrorEvent,
    StreamProtocolError,
    apply_chat_event,
    apply_completions_event,
    apply_responses_event,
    not_an_event_stream,
)
from slogate.locustfiles.load.timer import StreamTimer
from slogate.slo.gate.record import ErrorKind


def event(obj: object) -> bytes:
    return b"data: " + (obj if isinstance(obj, bytes) else json.dumps(obj).encode()) + b"\n\n"


ROLE = {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}
EMPTY = {"choices": [{"index": 0, "delta": {"content": ""}}]}
FINISH = {"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]}
USAGE = {
    "choices": [],
    "usage": {"prompt_tokens": 12, "completion_tokens": 2, "prompt_tokens_details": {"cached_tokens": 8}},
}


def content(text: str) -> dict:
    return {"choices": [{"index": 0, "delta": {"content": text}}]}


def test_event_split_across_reads_is_reassembled() -> None:
    raw = event(content("hello"))
    p = SseParser()
    assert p.feed(raw[:7]) == []
    assert p.feed(raw[7:20]) == []
    assert p.pending
    assert p.feed(raw[20:]) == [json.dumps(content("hello")).encode()]
    assert not p.pending


def test_several_events_in_one_read_come_out_in_order() -> None:
    p = SseParser()
    out = p.feed(event(ROLE) + event(content("a")) + event(content("b")) + b"data: [DONE]\n\n")
    assert [json.loads(x) for x in out[:3]] == [ROLE, content("a"), content("b")]
    assert out[3] == b"[DONE]"


def test_crlf_comments_and_multiline_data() -> None:
    p = SseParser()
    out = p.feed(b': keep-alive\r\n\r\ndata: {"a":\r\ndata: 1}\r\n\r\nevent: x\nid: 3\ndata:[DONE]\n\n')
    assert out == [b'{"a":\n1}', b"[DONE]"]


def test_a_line_over_the_cap_is_a_protocol_error_whole_or_in_pieces() -> None:
    """Memory is bounded: a 10 MiB line fails at the cap, fed at once or 64 KiB at a time (then
    the parser never holds much more than the cap)."""
    huge = event(content("x" * (10 * MAX_LINE_BYTES)))
    with pytest.raises(StreamProtocolError, match="longer than 1 MiB"):
        SseParser().feed(huge)
    parser, fed = SseParser(), 0
    with pytest.raises(StreamProtocolError, match="longer than 1 MiB"):
        for start in range(0, len(huge), 1 << 16):
            parser.feed(huge[start : start + (1 << 16)])
            fed += 1 << 16
    assert fed <= MAX_LINE_BYTES + (1 << 16)


def test_an_event_of_many_data_lines_over_the_cap_is_a_protocol_error() -> None:
    line = b"data: " + b"y" * 1000 + b"\n"
    with pytest.raises(StreamProtocolError, match="longer than 1 MiB"):
        SseParser().feed(line * (MAX_LINE_BYTES // 1000 + 10))


def test_lines_and_events_up_to_the_cap_are_read() -> None:
    text = "z" * (MAX_LINE_BYTES - 200)
    [payload] = SseParser().feed(event(content(text)))
    assert json.loads(payload) == content(text)


def test_bounded_bytes_passes_short_lines_and_fails_a_long_one() -> None:
    chunks = [b"data: a\n\n", b"data: " + b"b" * 10, b"b\n\n"]
    assert list(bounded_bytes(iter(chunks), limit=100)) == chunks
    long = [b"data: ", b"c" * 60, b"c" * 60, b"\n"]
    with pytest.raises(StreamProtocolError, match="longer than"):
        list(bounded_bytes(iter(long), limit=100))


@pytest.mark.parametrize(
    ("content_type", "refused"),
    [
        ("text/event-stream", False),
        ("text/event-stream; charset=utf-8", False),
        ("Text/Event-Stream", False),
        (None, False),  # no Content-Type: read as events, failing as what it turns out to be
        ("application/json", True),
        ("text/html; charset=utf-8", True),
    ],
)
def test_a_200_that_is_not_an_event_stream_is_refused_naming_its_type(content_type: str | None, refused: bool) -> None:
    error = not_an_event_stream(content_type)
    assert (error is not None) == refused
    if error is not None:
        assert str(error) == f"HTTP 200 with Content-Type {content_type}, not text/event-stream"


def feed_all(chunks: list[bytes], times: list[float]) -> tuple[StreamTimer, bool]:
    timer = StreamTimer("shared", 0.0, t0=0.0)
    parser, done = SseParser(), False
    for raw, now in zip(chunks, times, strict=True):
        for payload in parser.feed(raw):
            done = apply_chat_event(payload, timer, now) or done
    return timer, done


def test_role_only_and_empty_deltas_do_not_stop_the_ttft_clock() -> None:
    chunks = [
        event(ROLE),
        event(EMPTY),
        event(content("x")),
        event(content("y")),
        event(FINISH),
        event(USAGE),
        event(b"[DONE]"),
    ]
    timer, done = feed_all(chunks, [0.001, 0.050, 0.150, 0.160, 0.161, 0.162, 0.163])
    assert done
    rec = timer.finish(0.163)
    assert rec.ttft_us == 150_000  # the first content chunk, not the role chunk at 1 ms
    assert rec.itl_us == [10_000]  # only between token events; the finish chunk is not a token
    assert (rec.prompt_tokens, rec.completion_tokens, rec.cached_tokens) == (12, 2, 8)
    assert rec.e2e_us == 163_000


@pytest.mark.parametrize(
    "delta",
    [{"reasoning_content": "think"}, {"reasoning": "think"}, {"tool_calls": [{"index": 0, "function": {"name": "f"}}]}],
)
def test_reasoning_and_tool_call_deltas_count_as_first_token(delta: dict) -> None:
    timer, _ = feed_all([event(ROLE), event({"choices": [{"delta": delta}]})], [0.01, 0.2])
    assert timer.finish(0.3).ttft_us == 200_000


def test_usage_chunk_without_choices_sets_token_counts() -> None:
    timer, _ = feed_all([event(content("a")), event(USAGE)], [0.1, 0.2])
    assert timer.finish(0.2).completion_tokens == 2


def test_without_usage_tokens_are_counted_from_events() -> None:
    timer, _ = feed_all([event(content("a")), event(content("b")), event(content("c"))], [0.1, 0.2, 0.3])
    assert timer.finish(0.3).completion_tokens == 3


def test_error_event_mid_stream_raises() -> None:
    with pytest.raises(StreamErrorEvent, match="out of memory"):
        feed_all([event(content("a")), event({"error": {"message": "out of memory", "code": 500}})], [0.1, 0.2])


def test_non_json_payload_is_a_protocol_error() -> None:
    with pytest.raises(StreamProtocolError):
        feed_all([b"data: {not json\n\n"], [0.1])


@pytest.mark.parametrize("count", ["5", -1, 2.5, True, [3]])
def test_a_usage_count_that_is_not_a_count_is_a_protocol_error(count: object) -> None:
    usage = {"prompt_tokens": 12, "completion_tokens": count, "prompt_tokens_details": {"cached_tokens": 8}}
    with pytest.raises(StreamProtocolError, match="usage count"):
        feed_all([event(content("a")), event({"choices": [], "usage": usage})], [0.1, 0.2])
    responses_usage = {"input_tokens": 12, "output_tokens": 2, "input_tokens_details": {"cached_tokens": count}}
    with pytest.raises(StreamProtocolError, match="usage count"):
        apply_responses_event(completed(usage=responses_usage), StreamTimer("shared", 0.0, t0=0.0), 0.3)


def test_token_text_that_is_not_a_string_is_a_protocol_error() -> None:
    """Not a token to count (nor, in a conversation, an answer to resend): every endpoint alike."""
    with pytest.raises(StreamProtocolError, match="token text"):
        feed_all([event({"choices": [{"index": 0, "delta": {"content": 5}}]})], [0.1])
    timer = StreamTimer("shared", 0.0, t0=0.0)
    with pytest.raises(StreamProtocolError, match="token text"):
        apply_completions_event(json.dumps({"choices": [{"text": ["a"]}]}).encode(), timer, 0.1)
    with pytest.raises(StreamProtocolError, match="token text"):
        apply_responses_event(typed("response.output_text.delta", delta={"a": 1}), timer, 0.1)


def test_truncated_stream_leaves_pending_bytes_and_no_done() -> None:
    raw = event(content("a")) + event(content("b"))[:-9]
    parser = SseParser()
    timer = StreamTimer("unique", 0.0, 0.0)
    done = any(apply_chat_event(p, timer, 0.1) for p in parser.feed(raw))
    assert not done and parser.pending
    rec = timer.fail(ErrorKind.TRUNCATED, "cut", 0.2)
    assert rec.error_kind is ErrorKind.TRUNCATED and rec.ttft_us == 100_000


def test_done_without_content_is_a_no_content_failure() -> None:
    timer, done = feed_all([event(ROLE), event(b"[DONE]")], [0.01, 0.02])
    assert done
    assert timer.finish(0.02).error_kind is ErrorKind.NO_CONTENT


def test_a_captured_answer_is_the_content_exactly_as_streamed() -> None:
    timer = StreamTimer("shared", 0.0, t0=0.0)
    timer.capture_answer()
    reasoning = {"choices": [{"index": 0, "delta": {"reasoning_content": "hmm"}}]}
    for i, obj in enumerate([ROLE, reasoning, content(" Hello"), content(",\n wörld "), FINISH, USAGE]):
        apply_chat_event(json.dumps(obj).encode(), timer, 0.1 * (i + 1))
    assert "".join(timer.answer or []) == " Hello,\n wörld "
    assert timer.token_events == 3  # reasoning counts as a token, not as answer text


def test_an_answer_is_not_kept_unless_asked_for() -> None:
    timer = StreamTimer("shared", 0.0, t0=0.0)
    apply_chat_event(json.dumps(content("x")).encode(), timer, 0.1)
    assert timer.answer is None


# /v1/completions: `text_completion` chunks; usage and errors as in chat.


def text(piece: str) -> dict:
    return {"object": "text_completion", "choices": [{"index": 0, "text": piece, "finish_reason": None}]}


def test_completions_ttft_is_the_first_non_empty_text() -> None:
    timer = StreamTimer("all", 0.0, t0=0.0)
    timer.capture_answer()
    events = [text(""), text(" a"), text(""), text("b"), USAGE]
    ended = [apply_completions_event(json.dumps(e).encode(), timer, 0.1 * (i + 1)) for i, e in enumerate(events)]
    assert apply_completions_event(b"[DONE]", timer, 0.6) and not any(ended)
    rec = timer.finish(0.6)
    assert rec.ttft_us == 200_000 and rec.itl_us == [200_000]
    assert "".join(timer.answer or []) == " ab" and (rec.prompt_tokens, rec.cached_tokens) == (12, 8)


def test_completions_error_and_non_json_events_raise() -> None:
    timer = StreamTimer("all", 0.0, t0=0.0)
    with pytest.raises(StreamErrorEvent, match="injected"):
        apply_completions_event(b'{"error": {"message": "injected", "code": 500}}', timer, 0.1)
    with pytest.raises(StreamProtocolError):
        apply_completions_event(b'{"choices": [{"text": "tr', timer, 0.1)


# /v1/responses: typed events, no [DONE]; usage in the end event's `response.usage`.


def typed(kind: str, **fields: object) -> bytes:
    return json.dumps({"type": kind, "sequence_number": 0, **fields}).encode()


def completed(kind: str = "response.completed", usage: dict | None = None) -> bytes:
    return typed(kind, response={"status": "completed", "usage": usage})


RESPONSES_USAGE = {"input_tokens": 30, "output_tokens": 2, "input_tokens_details": {"cached_tokens": 16}}


def test_responses_ttft_is_the_first_non_empty_delta_and_the_end_is_response_completed() -> None:
    timer = StreamTimer("all", 0.0, t0=0.0)
    timer.capture_answer()
    events = [
        completed("response.created"),
        typed("response.output_item.added", item={"type": "message", "content": []}),
        typed("response.content_part.added", part={"type": "output_text", "text": ""}),
        typed("response.output_text.delta", delta=""),
        typed("response.output_text.delta", delta=" Hi"),
        typed("response.output_text.delta", delta="!"),
        typed("response.output_text.done", text=" Hi!"),
    ]
    assert not any(apply_responses_event(e, timer, 0.1 * (i + 1)) for i, e in enumerate(events))
    assert apply_responses_event(completed(usage=RESPONSES_USAGE), timer, 0.8)
    rec = timer.finish(0.8)
    assert rec.ttft_us == 500_000 and rec.itl_us == [100_000]
    assert "".join(timer.answer or []) == " Hi!"
    assert (rec.prompt_tokens, rec.completion_tokens, rec.cached_tokens) == (30, 2, 16)


@pytest.mark.parametrize(
    "kind",
    [
        "response.reasoning_text.delta",
        "response.reasoning_summary_text.delta",
        "response.function_call_arguments.delta",
        "response.custom_tool_call_input.delta",
    ],
)
def test_responses_reasoning_and_tool_call_deltas_are_tokens_without_answer_text(kind: str) -> None:
    timer = StreamTimer("all", 0.0, t0=0.0)
    timer.capture_answer()
    apply_responses_event(typed("response.output_item.added", item={"type": "reasoning"}), timer, 0.1)
    apply_responses_event(typed(kind, delta='{"a"'), timer, 0.2)
    assert timer.finish(0.3).ttft_us == 200_000 and timer.answer == []


def test_responses_incomplete_also_ends_the_stream() -> None:
    """OpenAI ends an answer cut at max_output_tokens with `response.incomplete`."""
    timer = StreamTimer("all", 0.0, t0=0.0)
    apply_responses_event(typed("response.output_text.delta", delta="x"), timer, 0.1)
    assert apply_responses_event(completed("response.incomplete", RESPONSES_USAGE), timer, 0.2)
    assert timer.finish(0.2).completion_tokens == 2


def test_responses_without_any_delta_is_no_content_and_without_usage_counts_events() -> None:
    empty = StreamTimer("all", 0.0, t0=0.0)
    assert apply_responses_event(completed(), empty, 0.1)
    assert empty.finish(0.1).error_kind is ErrorKind.NO_CONTENT
    timer = StreamTimer("all", 0.0, t0=0.0)
    for i in range(3):
        apply_responses_event(typed("response.output_text.delta", delta="t"), timer, 0.1 * (i + 1))
    apply_responses_event(completed(), timer, 0.4)
    assert timer.finish(0.4).completion_tokens == 3


@pytest.mark.parametrize(
    "payload",
    [
        typed("error", code="server_error", message="boom", param=None),
        typed("response.failed", response={"status": "failed", "error": {"code": "server_error", "message": "boom"}}),
        b'{"error": {"message": "boom", "type": "InternalServerError", "code": 500}}',  # vLLM's error object
    ],
    ids=["error", "response.failed", "vllm-error-object"],
)
def test_responses_error_events_raise_stream_errors(payload: bytes) -> None:
    with pytest.raises(StreamErrorEvent, match="boom"):
        apply_responses_event(payload, StreamTimer("all", 0.0, t0=0.0), 0.1)


def test_responses_non_json_is_a_protocol_error() -> None:
    with pytest.raises(StreamProtocolError):
        apply_responses_event(b'{"type": "response.output_text.delta", "delta": "tr', StreamTimer("all", 0.0, 0.0), 0.1)
