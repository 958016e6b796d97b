"""The three endpoints: request bodies, the completions prompt's prefix rule, and each event
applier on streams recorded from vLLM 0.32 (tests/data/streams/, `curl -N` against `slogate
launch cpu-tiny`, a 346-token prompt, 4 tokens with `ignore_eos`; the responses stream is the
second of two identical requests, so its prompt's first 256 tokens were cached); then, against the
real server, a two-turn conversation on each endpoint."""

import json
import urllib.request

import pytest
from slogate.locustfiles.load.endpoints import CHAT, COMPLETIONS, ENDPOINTS, RESPONSES, Endpoint, completion_prompt
from slogate.locustfiles.load.sse import SseParser
from slogate.locustfiles.load.timer import StreamTimer

from tests.conftest import DATA
from tests.stream_client import stream

STREAMS = DATA / "streams"
CONVERSATION = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Hi\nthere"},
]


def test_every_endpoint_is_registered_by_name() -> None:
    assert ENDPOINTS == {"chat": CHAT, "completions": COMPLETIONS, "responses": RESPONSES}
    assert [e.path for e in (CHAT, COMPLETIONS, RESPONSES)] == [
        "/v1/chat/completions",
        "/v1/completions",
        "/v1/responses",
    ]


def test_completions_body_carries_the_conversation_as_text() -> None:
    body = COMPLETIONS.body("m", CONVERSATION, 16, 0.5, True)
    assert body == {
        "model": "m",
        "prompt": "System: Be brief.\n\nUser: Hi\nthere\n\nAssistant:",
        "max_tokens": 16,
        "temperature": 0.5,
        "stream": True,
        "stream_options": {"include_usage": True},
        "ignore_eos": True,
    }
    assert "ignore_eos" not in COMPLETIONS.body("m", CONVERSATION, 16, 0.5, False)


def test_every_dataset_role_and_content_parts_have_a_completions_prompt() -> None:
    """A dataset may use every chat role and content given as parts: the text prompt labels each role
    and keeps the text parts (it used to stop the run's requests with a KeyError)."""
    from slogate.locustfiles.load.datasets import ROLES

    parts = [
        {"type": "text", "text": "look "},
        {"type": "image_url", "image_url": {"url": "x"}},
        {"type": "text", "text": "here"},
    ]
    messages = [{"role": role, "content": parts if role == "user" else role} for role in ROLES]
    prompt = COMPLETIONS.body("m", messages, 8, 0.0, False)["prompt"]
    assert "User: look here\n\n" in prompt and "Developer: developer\n\n" in prompt and "Tool: tool\n\n" in prompt
    assert "Assistant:assistant\n\n" in prompt and prompt.endswith("Tool: tool\n\nAssistant:")


def test_responses_body_carries_the_messages_as_input_items() -> None:
    body = RESPONSES.body("m", CONVERSATION, 16, 0.0, True)
    assert body == {
        "model": "m",
        "input": CONVERSATION,
        "max_output_tokens": 16,
        "temperature": 0.0,
        "stream": True,
        "store": False,
        "ignore_eos": True,
    }
    assert "ignore_eos" not in RESPONSES.body("m", CONVERSATION, 16, 0.0, False)


def test_responses_input_gives_content_parts_the_responses_apis_kinds() -> None:
    uri = "data:image/png;base64,AAAA"
    parts = [{"type": "image_url", "image_url": {"url": uri}}, {"type": "text", "text": "hi"}, {"type": "x"}]
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": parts}]
    sent = RESPONSES.body("m", messages, 16, 0.0, False)["input"]
    assert sent[0] == messages[0] and sent[1]["role"] == "user"
    assert sent[1]["content"] == [
        {"type": "input_image", "image_url": uri},
        {"type": "input_text", "text": "hi"},
        {"type": "x"},  # a kind it does not know: as it is, for the server to judge
    ]
    assert messages[1]["content"] is parts and parts[0]["type"] == "image_url"  # the conversation is not changed


@pytest.mark.parametrize("answer", [" Hello!", "Hello\n\nUser: not a turn", "", " ü \r\n"])
def test_the_next_turns_prompt_starts_with_this_prompt_and_its_answer(answer: str) -> None:
    turn = completion_prompt(CONVERSATION)
    following = [*CONVERSATION, {"role": "assistant", "content": answer}, {"role": "user", "content": "More."}]
    assert completion_prompt(following) == turn + answer + "\n\nUser: More.\n\nAssistant:"


def replay(name: str, endpoint: Endpoint) -> tuple[StreamTimer, list[bytes], int | None]:
    """Feed a recorded stream to `endpoint`'s applier, event i arriving at (i + 1) ms: (the timer,
    the events, the index of the event that ended the stream)."""
    timer = StreamTimer("all", 0.0, t0=0.0)
    timer.capture_answer()
    events = SseParser().feed((STREAMS / name).read_bytes())
    for i, payload in enumerate(events):
        if endpoint.apply_event(payload, timer, (i + 1) / 1000):
            return timer, events, i
    return timer, events, None


def test_recorded_chat_stream() -> None:
    timer, events, end = replay("chat.sse", CHAT)
    assert end == len(events) - 1 and events[end] == b"[DONE]"
    rec = timer.finish((end + 1) / 1000)
    assert rec.ttft_us == 2_000  # event 1: the role-only event 0 does not count
    assert "".join(timer.answer or []) == " /\ufffd /" and len(rec.itl_us) == 1  # empty deltas are no tokens
    assert (rec.prompt_tokens, rec.completion_tokens, rec.cached_tokens) == (346, 4, None)


def test_recorded_completions_stream() -> None:
    timer, events, end = replay("completions.sse", COMPLETIONS)
    assert end == len(events) - 1 and events[end] == b"[DONE]"
    rec = timer.finish((end + 1) / 1000)
    assert rec.ttft_us == 1_000 and len(rec.itl_us) == 3  # every chunk carried text
    assert "".join(timer.answer or []) == "stru:stru:"
    assert (rec.prompt_tokens, rec.completion_tokens, rec.cached_tokens) == (346, 4, None)


def test_recorded_responses_stream() -> None:
    timer, events, end = replay("responses.sse", RESPONSES)
    kinds = [json.loads(e)["type"] for e in events]
    assert end == len(events) - 1 and kinds[end] == "response.completed"  # the end: vLLM sends no [DONE]
    first_delta = kinds.index("response.output_text.delta")
    assert first_delta == 4  # after created, in_progress, output_item.added, content_part.added
    rec = timer.finish((end + 1) / 1000)
    assert rec.ttft_us == (first_delta + 1) * 1_000
    done_text = json.loads(events[kinds.index("response.output_text.done")])["text"]
    assert "".join(timer.answer or []) == done_text == " /\ufffd /"
    assert (rec.prompt_tokens, rec.completion_tokens, rec.cached_tokens) == (346, 4, 256)


def test_the_fault_servers_responses_stream_has_vllms_events_in_order(fault_server: str) -> None:
    body = json.dumps(RESPONSES.body("tokens=2", CONVERSATION, 2, 0.0, False)).encode()
    request = urllib.request.Request(fault_server + RESPONSES.path, body, {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as resp:
        served = resp.read()
    recorded = (STREAMS / "responses.sse").read_bytes()
    assert event_types(served) == event_types(recorded)
    assert served.count(b"event: ") == recorded.count(b"event: ") == len(event_types(recorded))


def event_types(raw: bytes) -> list[str]:
    return [json.loads(payload)["type"] for payload in SseParser().feed(raw)]


PROMPT = " ".join(["You are a terse assistant for load tests; answer in one short plain line."] * 12)


@pytest.mark.vllm
@pytest.mark.parametrize("endpoint", [COMPLETIONS, RESPONSES], ids=lambda e: e.name)
def test_a_two_turn_conversation_against_vllm(vllm_server: str, endpoint: Endpoint) -> None:
    """Turn 2 resends turn 1's answer as streamed and is served; both endpoints take `ignore_eos`
    (vLLM logs a warning for a field it does not know, and reads this one: `ResponsesRequest`
    passes it to the sampling parameters); responses reports the cached prefix (turn 1 left the
    system prompt in the cache), completions has no cached count without
    `--enable-prompt-tokens-details`."""
    first = [{"role": "system", "content": PROMPT}, {"role": "user", "content": "Say hello."}]
    _, rec1, answer = stream(vllm_server, endpoint, "tiny", first, max_tokens=4, ignore_eos=True, timeout_s=60)
    assert rec1.ok, rec1.error_message
    assert rec1.completion_tokens == 4 and rec1.ttft_us > 0 and rec1.prompt_tokens > 300
    second = [*first, {"role": "assistant", "content": answer}, {"role": "user", "content": "Again."}]
    _, rec2, _ = stream(vllm_server, endpoint, "tiny", second, max_tokens=4, ignore_eos=True, timeout_s=60)
    assert rec2.ok, rec2.error_message
    assert rec2.completion_tokens == 4 and rec2.prompt_tokens > rec1.prompt_tokens
    if endpoint is RESPONSES:
        assert rec2.cached_tokens >= 256
