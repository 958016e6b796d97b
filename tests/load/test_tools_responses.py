"""Tool calls on `/v1/responses` (locustfiles/load/output_check.py, sse.py): the tools in the Responses
API's flat shape, each call timed by its first `function_call_arguments.delta` and checked whole from
its `output_item.done`, against streams recorded from vLLM 0.32 (tiny model, `--enable-auto-tool-choice
--tool-call-parser pythonic`), crafted events and the fault server."""

import json
import random
from pathlib import Path

import pytest
from slogate.locustfiles.load.sse import SHAPE_ERRORS, SseParser, apply_responses_event
from slogate.locustfiles.load.timer import StreamTimer
from slogate.locustfiles.load.workload import Workload, WorkloadConfig
from slogate.slo.gate.record import ErrorKind, RequestRecord

from tests.conftest import DATA
from tests.load.test_tools import SCHEMA, TOOLS, fault_stream
from tests.load.test_tools import spec as chat_spec


def spec(**kw: str):
    return chat_spec(endpoint="responses", **kw)


def test_the_tools_go_in_the_responses_apis_flat_shape() -> None:
    fields = spec(tools=TOOLS, tool_choice="get_time").body_fields()
    chat = json.loads(Path(TOOLS).read_text())
    assert fields["tools"] == [{"type": "function", **t["function"]} for t in chat]
    assert fields["tools"][1]["name"] == "get_time" and "function" not in fields["tools"][1]
    assert fields["tool_choice"] == {"type": "function", "name": "get_time"}
    assert spec(tools=TOOLS, tool_choice="required").body_fields()["tool_choice"] == "required"
    both = spec(tools=TOOLS, response_format=SCHEMA).body_fields()
    assert "tool_choice" not in both and both["text"]["format"]["type"] == "json_schema"


def run(output, payloads: list[bytes]) -> RequestRecord:
    """The events at 10 ms, 20 ms, ... through the responses applier, the check armed as a user arms it."""
    timer = StreamTimer("all", 0.0, t0=0.0)
    timer.capture_answer()
    timer.output = output.capture() if output is not None else None
    for i, payload in enumerate(payloads):
        if apply_responses_event(payload, timer, (i + 1) * 0.01):
            return timer.finish((i + 1) * 0.01)
    raise AssertionError("no end")


def recorded(name: str) -> list[bytes]:
    return SseParser().feed((DATA / "streams" / name).read_bytes())


def test_vllms_streamed_function_calls_are_timed_and_checked() -> None:
    named = recorded("responses_tool_call_named.sse")
    first_delta = next(i for i, p in enumerate(named) if b"function_call_arguments.delta" in p)
    record = run(spec(tools=TOOLS, tool_choice="get_time"), named)
    assert record.ok and record.ttftc_us == record.ttft_us == (first_delta + 1) * 10_000
    required = spec(tools=TOOLS, tool_choice="required")
    assert run(required, recorded("responses_tool_call_required.sse")).ok  # get_time, "UTC"
    # xgrammar let a raw tab into the city string: strict JSON (RFC 8259; Python's json, JavaScript's
    # JSON.parse) refuses an unescaped control character, so the application would fail on it too.
    tab = run(required, recorded("responses_tool_call_control_char.sse"))
    assert tab.error_kind == ErrorKind.INVALID_OUTPUT and "Invalid control character" in (tab.error_message or "")
    wrong = run(spec(tools=TOOLS, tool_choice="get_weather"), named)  # the server called another tool
    assert wrong.error_kind == ErrorKind.INVALID_OUTPUT and "tool call 'get_time', with --tool-choice get_weather" in (
        wrong.error_message or ""
    )
    unchecked = run(None, named)  # without --tools nothing is gathered: the hot path as it was
    assert unchecked.ok and unchecked.ttftc_us is None and unchecked.ttft_us == record.ttft_us


def event(kind: str, **fields: object) -> bytes:
    return json.dumps({"type": kind, **fields}).encode()


def call_events(*calls: tuple[str, str]) -> list[bytes]:
    """Each (name, arguments) as vLLM streams a function call: added, argument deltas, done."""
    out = [event("response.created", response={})]
    for index, (name, arguments) in enumerate(calls):
        ids = {"output_index": index, "item_id": f"fc_{index}"}
        item = {"id": f"fc_{index}", "type": "function_call", "name": name, "arguments": "", "status": "in_progress"}
        out.append(event("response.output_item.added", output_index=index, item=item))
        out += [event("response.function_call_arguments.delta", **ids, delta=c) for c in arguments]
        done = item | {"arguments": arguments, "status": "completed"}
        out.append(event("response.output_item.done", output_index=index, item=done))
    usage = {"input_tokens": 9, "output_tokens": 64}
    return [*out, event("response.completed", response={"status": "incomplete", "usage": usage})]


def test_each_call_is_checked_whole_and_a_cut_one_is_invalid_output() -> None:
    required = spec(tools=TOOLS, tool_choice="required")
    two = run(
        required, call_events(("get_time", '{"timezone": "UTC"}'), ("get_weather", '{"city": "Oslo", "days": 1}'))
    )
    assert two.ok and two.ttftc_us == 30_000  # the first argument delta: after created and added
    # max_output_tokens reached inside a second call (seen on vLLM 0.32 with `required`): its arguments cut short.
    cut = run(required, call_events(("get_time", '{"timezone": "UTC"}'), ("get_time", '{"')))
    assert cut.error_kind == ErrorKind.INVALID_OUTPUT and "tool call 'get_time': arguments is not JSON" in (
        cut.error_message or ""
    )
    assert cut.ttft_us == 30_000  # a failure keeps its first token's time
    out_of_range = run(required, call_events(("get_weather", '{"city": "Paris", "days": 9}')))
    assert "at days: 9 is greater than the maximum of 7" in (out_of_range.error_message or "")
    # Each call is kept, in arrival order, whatever its output_index says: a bad first one is not replaced.
    same_index = [p.replace(b'"output_index": 1', b'"output_index": 0') for p in call_events(
        ("get_time", '{"timezone": "Mars"}'), ("get_time", '{"timezone": "UTC"}')
    )]  # fmt: skip
    assert "at timezone: 'Mars' is not one of" in (run(required, same_index).error_message or "")
    # A call whose arguments came and whose done item never did, in a stream that still ended: not checked
    # whole, so not valid (the arguments were never given whole).
    unclosed = [p for p in call_events(("get_time", '{"timezone": "UTC"}')) if b"output_item.done" not in p]
    assert run(spec(tools=TOOLS), unclosed).error_message == (
        "a tool call's arguments came, never its response.output_item.done"
    )
    timer = StreamTimer("all", 0.0, t0=0.0)
    timer.output = required.capture()
    with pytest.raises(SHAPE_ERRORS):  # of another shape: the stream readers count it as a protocol failure
        apply_responses_event(event("response.output_item.done", output_index=0, item="x"), timer, 0.1)


def test_a_call_after_answer_text_is_timed_by_its_first_arguments_delta() -> None:
    """auto: the model may write before it calls; TTFT is the text's first token, TTFTC the call's."""
    text_then_call = [
        event("response.created", response={}),
        event("response.output_text.delta", output_index=0, delta="Let me check."),
        *call_events(("get_time", '{"timezone": "UTC"}'))[1:],
    ]
    record = run(spec(tools=TOOLS), text_then_call)
    assert record.ok and record.ttft_us == 20_000 and record.ttftc_us == 40_000  # after the call's added item


def test_the_fault_server_streams_a_function_call_on_responses(fault_server: str) -> None:
    tools = spec(tools=TOOLS, tool_choice="get_weather")
    record = fault_stream(fault_server, "responses", "tool_call=1,tokens=4,itl_ms=20", tools)
    assert record.ok and record.ttftc_us == record.ttft_us, record.error_message
    bad = fault_stream(fault_server, "responses", "tool_call=1,json=3,tokens=4", tools)
    assert bad.error_kind == ErrorKind.INVALID_OUTPUT and "tool call 'get_weather'" in (bad.error_message or "")


def test_the_options_tools_replace_a_dataset_entrys_tools_and_its_choice(tmp_path: Path) -> None:
    """An entry's chat-shaped `tool_choice` would be refused on responses (vLLM 0.32: HTTP 400) and unknown
    to the check: with --tools, the entry's tools and choice give way to the options' own."""
    entry = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 8, "tools": [{"type": "function"}]}
    entry["tool_choice"] = {"type": "function", "function": {"name": "get_time"}}
    dataset = tmp_path / "d.jsonl"
    dataset.write_text(json.dumps(entry | {"temperature": 0.5}) + "\n")
    config = WorkloadConfig(endpoint="responses", dataset=str(dataset), tools=TOOLS)
    body = Workload(config, "m", 1.0).next_request(random.Random(0)).body
    assert "tool_choice" not in body and [t["name"] for t in body["tools"]] == ["get_weather", "get_time"]
    assert body["temperature"] == 0.5  # the entry's other fields still go out
    named = WorkloadConfig(endpoint="responses", dataset=str(dataset), tools=TOOLS, tool_choice="get_weather")
    assert Workload(named, "m", 1.0).next_request(random.Random(0)).body["tool_choice"] == {
        "type": "function",
        "name": "get_weather",
    }
