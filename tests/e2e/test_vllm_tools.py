"""Tool calls and structured output against the real vLLM CPU server (docs/workloads/tools.md): guided
decoding must make even the tiny model's random weights produce JSON of the schema, so a run has no
`invalid_output`. The session server runs with a tool parser (`--enable-auto-tool-choice
--tool-call-parser pythonic`: vLLM 0.32 refuses `required` and named tool choices without one) and
xgrammar without free whitespace (`--structured-outputs-config '{"backend": "xgrammar",
"disable_any_whitespace": true}'`: otherwise random weights emit whitespace until `--max-tokens`)."""

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.vllm

TOOLS = str(ROOT / "locustfiles" / "data" / "tools.json")
SCHEMA = str(ROOT / "locustfiles" / "data" / "schema.json")
LOAD = ("-u", "2", "-r", "2", "-t", "3s", "--max-tokens", "64", "--shared-prefix-tokens", "100")


def test_guided_decoding_on_vllm_yields_valid_json_and_tool_calls(vllm_server: str, locust_run) -> None:
    structured = locust_run(vllm_server, *LOAD, "--response-format", SCHEMA)
    assert structured.code == 0, structured.stderr[-3000:]
    total = structured.report["metrics"]["all"]
    assert total["requests"] >= 2 and total["errors_by_kind"] == {}, total["errors_by_kind"]  # grammars compile first
    assert total["ttftc_ms"]["count"] == 0  # no tool, no tool call
    called = locust_run(vllm_server, *LOAD, "--tools", TOOLS, "--tool-choice", "required")
    assert called.code == 0, called.stderr[-3000:]
    total = called.report["metrics"]["all"]
    assert total["requests"] >= 2 and total["errors_by_kind"] == {}, total["errors_by_kind"]  # grammars compile first
    # Every answer was a tool call, streamed as `tool_calls` deltas: each has a TTFTC (the TTFT histogram
    # also holds the requests in flight at the stop, with what they had waited).
    assert total["ttftc_ms"]["count"] == total["requests"]
    # /v1/responses: the tools in its flat shape, each call streamed as `function_call_arguments` deltas. A
    # named tool of an enum argument: `required` may start a second call that max tokens cuts short (invalid).
    on_responses = locust_run(
        vllm_server, *LOAD, "--endpoint", "responses", "--tools", TOOLS, "--tool-choice", "get_time"
    )
    assert on_responses.code == 0, on_responses.stderr[-3000:]
    total = on_responses.report["metrics"]["all"]
    assert total["requests"] >= 2 and total["errors_by_kind"] == {}, total["errors_by_kind"]
    assert total["ttftc_ms"]["count"] == total["requests"]
