"""Tool calls and structured output (locustfiles/load/output_check.py): the options' files checked
at start, what each request sends, the tool calls gathered from the stream and the output judged at
its end (`invalid_output`), against recorded events and the fault server's scripted output."""

import http.client
import json
import time
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from slogate.locustfiles.load.endpoints import ENDPOINTS
from slogate.locustfiles.load.output_check import load
from slogate.locustfiles.load.sse import SseParser, apply_chat_event, apply_responses_event
from slogate.locustfiles.load.timer import StreamTimer
from slogate.locustfiles.load.workload import Workload, WorkloadConfig
from slogate.slo.gate.record import ErrorKind, RequestRecord

from tests.conftest import DATA, ROOT, server_log
from tests.load.test_users import USERS, Harness
from tests.stream_client import _measure

TOOLS = str(ROOT / "locustfiles" / "data" / "tools.json")
SCHEMA = str(ROOT / "locustfiles" / "data" / "schema.json")


def spec(**kw: str):
    out = load(WorkloadConfig(**kw))
    assert out is not None
    return out


def write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


# --- the options, checked at start ------------------------------------------------------------


def test_no_option_no_check() -> None:
    assert load(WorkloadConfig()) is None


@pytest.mark.parametrize(
    ("files", "options", "message"),
    [
        ({"t.json": "[{"}, {"tools": "t.json"}, r"--tools .*t\.json: not JSON: "),
        ({"t.json": '{"type": "function"}'}, {"tools": "t.json"}, "not a list of tools"),
        ({"t.json": "[]"}, {"tools": "t.json"}, "not a list of tools"),
        ({"t.json": '[{"type": "function"}]'}, {"tools": "t.json"}, "entry 0: not "),
        ({"t.json": "[3]"}, {"tools": "t.json"}, "entry 0: not "),
        (
            {"t.json": '[{"type": "function", "function": {"name": "f", "parameters": {"type": "objekt"}}}]'},
            {"tools": "t.json"},
            "tool 'f': parameters: not a valid JSON schema: 'objekt' is not valid",
        ),
        (
            {"t.json": json.dumps([{"type": "function", "function": {"name": "f"}}] * 2)},
            {"tools": "t.json"},
            "tool 'f' is defined twice",
        ),
        ({}, {"tools": "missing.json"}, "--tools .*missing.json: cannot read it: No such file"),
        ({"s.json": "[1]"}, {"response_format": "s.json"}, "not a JSON schema"),
        ({"s.json": '{"type": 5}'}, {"response_format": "s.json"}, "--response-format .*: not a valid JSON schema"),
        (
            {"s.json": '{"$ref": "#/definitions/nope"}'},
            {"response_format": "s.json"},
            r"\$ref '#/definitions/nope' does not resolve",
        ),
        ({"s.json": '{"$ref": "https://example.com/s.json"}'}, {"response_format": "s.json"}, "does not resolve"),
        ({}, {"tool_choice": "required"}, "--tool-choice needs --tools"),
        ({}, {"tools": TOOLS, "tool_choice": "get_wether"}, r"or a tool of --tools \(get_weather, get_time\)"),
        ({}, {"tools": TOOLS, "endpoint": "completions"}, "--tools applies to --endpoint chat, responses, not "),
    ],
)
def test_bad_options_are_one_line_errors(tmp_path: Path, files: dict, options: dict, message: str) -> None:
    for name, text in files.items():
        write(tmp_path, name, text)
    options = {
        k: (str(tmp_path / v) if v.endswith(".json") and not Path(v).is_absolute() else v) for k, v in options.items()
    }
    with pytest.raises(ValueError, match=message) as e:
        load(WorkloadConfig(**options))
    assert "\n" not in str(e.value)


def test_a_trace_takes_none_of_them() -> None:
    with pytest.raises(ValueError, match="do not apply to --trace"):
        load(WorkloadConfig(response_format=SCHEMA), trace=True)


def test_each_endpoint_gets_the_fields_it_takes() -> None:
    chat = spec(tools=TOOLS, tool_choice="required", response_format=SCHEMA).body_fields()
    assert [t["function"]["name"] for t in chat["tools"]] == ["get_weather", "get_time"]
    assert chat["tool_choice"] == "required"
    schema = json.loads(Path(SCHEMA).read_text())
    assert chat["response_format"] == {"type": "json_schema", "json_schema": {"name": "schema", "schema": schema}}
    named = spec(tools=TOOLS, tool_choice="get_time").body_fields()["tool_choice"]
    assert named == {"type": "function", "function": {"name": "get_time"}}
    assert "tool_choice" not in spec(tools=TOOLS).body_fields()  # the server's default
    assert spec(response_format=SCHEMA, endpoint="completions").body_fields() == {
        "response_format": chat["response_format"]
    }
    responses = spec(response_format=SCHEMA, endpoint="responses").body_fields()
    assert responses == {"text": {"format": {"type": "json_schema", "name": "schema", "schema": schema}}}


def test_every_request_carries_them_and_its_check(tmp_path: Path) -> None:
    config = WorkloadConfig(tools=TOOLS, tool_choice="required", shared_prefix_tokens=5, user_message_tokens=5)
    workload = Workload(config, "m", 1.0)
    import random

    req = workload.next_request(random.Random(0))
    assert req.body["tool_choice"] == "required" and len(req.body["tools"]) == 2
    assert req.output is not None and req.output.forces_call
    assert all("tools" in body for body in workload.priming_requests())  # the same prefix, cached as measured
    assert Workload(WorkloadConfig(), "m", 1.0).next_request(random.Random(0)).output is None
    assert "tools" not in WorkloadConfig().describe()  # a baseline recorded before them still compares
    assert config.describe()["tool_choice"] == "required"


# --- the output, judged at the end of the stream ------------------------------------------------


def chat_events(*deltas: dict) -> list[bytes]:
    chunks = [{"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}]
    chunks += [{"choices": [{"index": 0, "delta": d}]} for d in deltas]
    chunks.append({"choices": [], "usage": {"prompt_tokens": 9, "completion_tokens": len(deltas)}})
    return [json.dumps(c).encode() for c in chunks] + [b"[DONE]"]


def call(arguments: str, name: str | None = None, index: int = 0) -> dict:
    function = {"arguments": arguments} | ({"name": name} if name else {})
    return {"tool_calls": [{"index": index, "function": function}]}


def run_chat(output, events: list[bytes]) -> RequestRecord:
    """The events at 10 ms, 20 ms, ... through the chat applier, with the check armed as a user arms it."""
    timer = StreamTimer("all", 0.0, t0=0.0)
    timer.capture_answer()
    timer.output = output.capture()
    for i, payload in enumerate(events):
        if apply_chat_event(payload, timer, (i + 1) * 0.01):
            return timer.finish((i + 1) * 0.01)
    raise AssertionError("no end")


def test_tool_calls_gathered_from_their_deltas_are_checked_and_timed() -> None:
    tools = spec(tools=TOOLS, tool_choice="required")
    good = run_chat(
        tools, chat_events({"content": "hm"}, call("", "get_weather"), call('{"city": "Paris", '), call('"days": 2}'))
    )
    assert good.ok and good.ttft_us == 20_000 and good.ttftc_us == 30_000
    two = chat_events(
        call('{"city": "Oslo", "days": 1}', "get_weather"), call('{"timezone": "UTC"}', "get_time", index=1)
    )
    assert run_chat(tools, two).ok
    cases = {
        '{"city": "Paris", "days": ': "tool call 'get_weather': arguments is not JSON",
        '{"city": "Paris", "days": 9}': "do not match its parameters: at days: 9 is greater than the maximum of 7",
        '{"city": "Paris"}': "at (root): 'days' is a required property",
    }
    for arguments, message in cases.items():
        bad = run_chat(tools, chat_events(call(arguments, "get_weather")))
        assert bad.error_kind == ErrorKind.INVALID_OUTPUT and message in (bad.error_message or ""), bad.error_message
        assert bad.ttft_us == 20_000  # a failure keeps its first token's time, as every failure does
    unknown = run_chat(tools, chat_events(call("{}", "rm_rf")))
    assert unknown.error_message == "tool call 'rm_rf': no such tool in --tools"
    named = spec(tools=TOOLS, tool_choice="get_time")
    assert (
        "with --tool-choice get_time"
        in run_chat(named, chat_events(call('{"city": "a", "days": 1}', "get_weather"))).error_message
    )
    assert (
        run_chat(spec(tools=TOOLS, tool_choice="none"), chat_events(call("{}", "get_time"))).error_kind
        == ErrorKind.INVALID_OUTPUT
    )


def test_a_forced_call_streamed_as_answer_text_is_checked_in_that_form() -> None:
    """vLLM without a --tool-call-parser: guided decoding forces the call's JSON as content."""
    required = spec(tools=TOOLS, tool_choice="required")
    text = '[{"name": "get_weather", "parameters": {"city": "Rome", "days": 3}}]'
    ok = run_chat(required, chat_events(*({"content": c} for c in (text[:10], text[10:]))))
    assert ok.ok and ok.ttftc_us == ok.ttft_us == 20_000  # the call's first token: the answer's first
    thought = run_chat(required, chat_events({"reasoning": "hm"}, *({"content": c} for c in (text[:10], text[10:]))))
    assert thought.ok and thought.ttft_us == 20_000 and thought.ttftc_us == thought.ttfo_us == 30_000  # not the thought
    bad = run_chat(
        required, chat_events({"content": '[{"name": "get_weather", "parameters": {"city": 1, "days": 3}}]'})
    )
    assert bad.error_kind == ErrorKind.INVALID_OUTPUT and "at city: 1 is not of type 'string'" in bad.error_message
    assert "not a list of calls" in run_chat(required, chat_events({"content": '{"name": "x"}'})).error_message
    named = spec(tools=TOOLS, tool_choice="get_time")
    assert run_chat(named, chat_events({"content": '{"timezone": "UTC"}'})).ok
    assert run_chat(named, chat_events({"content": '{"timezone": "Mars"}'})).error_kind == ErrorKind.INVALID_OUTPUT
    # auto: a plain answer is a valid one, and no tool call has no TTFTC.
    auto = run_chat(spec(tools=TOOLS), chat_events({"content": "It is sunny."}))
    assert auto.ok and auto.ttftc_us is None


def test_a_structured_answer_must_be_json_of_the_schema() -> None:
    fmt = spec(response_format=SCHEMA)
    assert run_chat(fmt, chat_events({"content": '{"city": "Lima",'}, {"content": ' "days": 7}'})).ok
    for text, message in [
        ("Sure! Here", "the answer is not JSON"),
        ('{"city": "Lima", "days": 7, "x": 1}', "Additional properties are not allowed ('x' was unexpected)"),
        ("[" * 100_000 + "]" * 100_000, "the answer is not JSON (nested deeper"),  # deeper than the parser: no crash
    ]:
        bad = run_chat(fmt, chat_events({"content": text}))
        assert bad.error_kind == ErrorKind.INVALID_OUTPUT and message in bad.error_message, bad.error_message
    # responses: the answer is its output_text deltas
    timer = StreamTimer("all", 0.0, t0=0.0)
    timer.capture_answer()
    timer.output = spec(response_format=SCHEMA, endpoint="responses").capture()
    for piece in ('{"city": "Lima", ', '"days": "7"}'):
        apply_responses_event(json.dumps({"type": "response.output_text.delta", "delta": piece}).encode(), timer, 0.1)
    assert "at days: '7' is not of type 'integer'" in timer.finish(0.2).error_message


def test_a_tool_call_delta_of_another_shape_is_a_protocol_failure_not_a_crash() -> None:
    from slogate.locustfiles.load.sse import SHAPE_ERRORS

    timer = StreamTimer("all", 0.0, t0=0.0)
    timer.output = spec(tools=TOOLS).capture()
    with pytest.raises(SHAPE_ERRORS):
        apply_chat_event(json.dumps({"choices": [{"delta": {"tool_calls": ["x"]}}]}).encode(), timer, 0.1)
    # arguments that are not a string are left out: the call then fails its check, it does not crash
    record = run_chat(
        spec(tools=TOOLS),
        chat_events(call("", "get_time"), {"tool_calls": [{"index": 0, "function": {"arguments": 5}}]}),
    )
    assert record.error_kind == ErrorKind.INVALID_OUTPUT


def test_the_hot_path_is_unchanged_without_the_options() -> None:
    timer = StreamTimer("all", 0.0, t0=0.0)
    for i, payload in enumerate(chat_events(call('{"x": 1}', "f"))):
        apply_chat_event(payload, timer, (i + 1) * 0.01)
    record = timer.finish(0.1)
    assert record.ok and record.ttftc_us is None and timer.answer is None  # nothing gathered, nothing checked


# --- the fault server's scripted output ---------------------------------------------------------


def fault_stream(url: str, endpoint: str, model: str, output) -> RequestRecord:
    body = ENDPOINTS[endpoint].body(model, [{"role": "user", "content": "hi"}], 8, 0.0, False) | output.body_fields()
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=5)
    timer = StreamTimer("all", time.time(), time.perf_counter())
    timer.capture_answer()
    timer.output = output.capture()
    try:
        return _measure(conn, ENDPOINTS[endpoint], json.dumps(body).encode(), timer)
    finally:
        conn.close()


@pytest.mark.parametrize("endpoint", sorted(ENDPOINTS))
def test_the_fault_server_scripts_valid_and_invalid_output(fault_server: str, endpoint: str) -> None:
    fmt = spec(response_format=SCHEMA, endpoint=endpoint)
    expected = {"json=1": None, "json=2": "not JSON", "json=3": "at city: 3 is not of type 'string'"}
    for model, message in expected.items():
        record = fault_stream(fault_server, endpoint, f"{model},tokens=4", fmt)
        if message is None:
            assert record.ok, record.error_message
        else:
            assert record.error_kind == ErrorKind.INVALID_OUTPUT and message in record.error_message, (
                record.error_message
            )
    if endpoint == "chat":
        tools = spec(tools=TOOLS, tool_choice="get_weather")
        record = fault_stream(fault_server, "chat", "tool_call=1,tokens=4,itl_ms=20", tools)
        assert record.ok and record.ttftc_us == record.ttft_us
        bad = fault_stream(fault_server, "chat", "tool_call=1,json=3,tokens=4", tools)
        assert bad.error_kind == ErrorKind.INVALID_OUTPUT and "tool call 'get_weather'" in bad.error_message


# --- the users, in process and in a run --------------------------------------------------------


@pytest.mark.parametrize("user_class", USERS)
def test_both_users_send_the_tools_and_check_each_output(fault_server: str, user_class: type) -> None:
    forced = ("--tools", TOOLS, "--tool-choice", "get_weather")
    good = Harness(user_class, fault_server, "tool_call=1,tokens=4,ttft_ms=30,itl_ms=10", *forced).call(2)
    assert all(r.ok and r.ttftc_us is not None and r.ttftc_us >= 30_000 for r in good), good
    bad = Harness(user_class, fault_server, "json=3,tokens=4", "--response-format", SCHEMA).call(1)
    assert bad[0].error_kind == ErrorKind.INVALID_OUTPUT and "at city: 3 is not of type" in bad[0].error_message


def test_a_run_counts_invalid_output_in_its_reports_and_bad_files_exit_2(
    own_fault_server: tuple[str, Path], locust_run, tmp_path: Path
) -> None:
    url, log = own_fault_server
    run = locust_run(
        url, "-u", "2", "-r", "2", "-t", "2s", "--no-prime-prefixes", "--shared-prefix-tokens", "20",
        "--model", "tool_call=1,json=3,tokens=4", "--tools", TOOLS, "--tool-choice", "required",
    )  # fmt: skip
    assert run.code == 0, run.stderr[-2000:]  # no SLO file: measured, not gated
    total = run.report["metrics"]["all"]
    assert total["requests"] > 0 and total["errors_by_kind"] == {"invalid_output": total["requests"]}
    assert f"Failures by kind: invalid_output {total['requests']}." in (run.report_dir / "slo-summary.md").read_text()
    assert "invalid_output" in (run.report_dir / "slo-report.html").read_text()
    assert run.report["run"]["workload"]["tool_choice"] == "required"
    started = time.time()
    bad = tmp_path / "bad.json"
    bad.write_text('[{"type": "function", "function": {"name": "f", "parameters": {"type": 3}}}]')
    refused = locust_run(url, "-u", "1", "-t", "2s", "--model", "tokens=2", "--tools", str(bad))
    errors = [line for line in refused.stderr.splitlines() if "slogate: error" in line]
    assert refused.code == 2 and len(errors) == 1 and "not a valid JSON schema" in errors[0], refused.stderr[-1500:]
    assert not server_log(log, 1, timeout_s=1, since=started)  # refused before any load (a row comes late)


# --- streams recorded from vLLM 0.32 (tiny model, --enable-auto-tool-choice --tool-call-parser pythonic) ---


def replay(name: str, output) -> RequestRecord:
    """A recorded stream through the SSE reader and the chat applier, its events 10 ms apart."""
    timer = StreamTimer("all", 0.0, t0=0.0)
    timer.capture_answer()
    timer.output = output.capture()
    payloads = SseParser().feed((DATA / "streams" / name).read_bytes())
    for i, payload in enumerate(payloads):
        if apply_chat_event(payload, timer, (i + 1) * 0.01):
            return timer.finish((i + 1) * 0.01)
    raise AssertionError("no end")


def test_vllms_streamed_tool_calls_are_gathered_and_checked() -> None:
    # A named call: `get_time` with an enum argument, which guided decoding makes the model finish.
    named = replay("chat_tool_call_named.sse", spec(tools=TOOLS, tool_choice="get_time"))
    assert named.ok and named.ttftc_us == named.ttft_us == 20_000  # the role chunk is not a token
    # `required`, the string argument never closed: cut at max_tokens 64 (finish_reason length).
    cut = replay("chat_tool_call_cut.sse", spec(tools=TOOLS, tool_choice="required"))
    assert cut.error_kind == ErrorKind.INVALID_OUTPUT and cut.ttftc_us is None
    assert cut.error_message.startswith("tool call 'get_weather': arguments is not JSON (Unterminated string")
