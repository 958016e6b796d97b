"""The SSE reader and the chat-event mapping: framing, TTFT semantics, usage, errors."""

import json

import pytest
from slogate.locustfiles.sse import SseParser, StreamErrorEvent, StreamProtocolError, apply_chat_event
from slogate.locustfiles.timer import StreamTimer
from slogate.slo.record import ErrorKind


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
