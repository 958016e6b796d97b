"""Reasoning streams (docs/workloads/reasoning.md): TTFT at the first token of any kind, TTFO at the
first output token after the reasoning, the reasoning's time and tokens, for chat (raw SSE and the
openai SDK) and responses, from streams in vLLM 0.32's shape (tests/data/streams/*_reasoning.sse)."""

import json
from pathlib import Path

import pytest
from openai.types.chat import ChatCompletionChunk
from slogate.launch.fault_formats import ResponsesFormat
from slogate.locustfiles.load.sse import SseParser, apply_chat_event, apply_responses_event
from slogate.locustfiles.load.timer import StreamTimer
from slogate.locustfiles.load.users_openai import _apply_chunk
from slogate.slo.gate.judge import judge
from slogate.slo.gate.metrics import MetricsStore
from slogate.slo.gate.record import RequestRecord
from slogate.slo.gate.report import RunInfo
from slogate.slo.gate.spec import parse_spec
from slogate.slo.outputs.html import render_html
from slogate.slo.outputs.prometheus import exposition
from slogate.slo.outputs.render import render_junit, render_markdown

from tests.conftest import DATA

STREAMS = DATA / "streams"
MS = 0.001  # one event a millisecond on the replay clock


def replay(name: str, apply=apply_chat_event) -> RequestRecord:
    """The fixture's events applied one a millisecond (event i at i+1 ms), finished at the end."""
    timer = StreamTimer("shared", 0.0, 0.0)
    payloads = SseParser().feed((STREAMS / name).read_bytes())
    for i, payload in enumerate(payloads):
        if apply(payload, timer, (i + 1) * MS):
            break
    return timer.finish((len(payloads) + 1) * MS)


def test_a_vllm_reasoning_chat_stream_times_ttft_ttfo_and_the_reasoning() -> None:
    # Event 1: role; 2-6: reasoning; 7: the reasoning's end and the answer's start; 8-11: answer.
    rec = replay("chat_reasoning.sse")
    assert rec.ttft_us == 2000  # the first reasoning delta: TTFT keeps its meaning
    assert rec.ttfo_us == 7000  # the first delta with answer text
    assert rec.reasoning_us == 5000 == rec.ttfo_us - rec.ttft_us
    assert rec.reasoning_tokens == 7  # usage's completion_tokens_details, not the 6 reasoning events
    assert rec.completion_tokens == 11 and len(rec.itl_us) == 9  # every token event, reasoning too


def test_real_vllm_deepseek_r1_streams_whose_usage_counts_no_reasoning_tokens() -> None:
    # Recorded from vLLM 0.32 CPU (`--reasoning-parser deepseek_r1`, the tiny model with <think> and
    # </think> added, random weights): the output has no <think> (a template opens it), so vLLM's
    # usage says 0 reasoning tokens; the events are counted instead.
    rec = replay("chat_reasoning_vllm.sse")  # 1: role; 2-4: reasoning; 5-24: answer (`</think>` as text)
    assert (rec.ttft_us, rec.ttfo_us, rec.reasoning_us) == (2000, 5000, 3000)
    assert rec.reasoning_tokens == 3 and rec.completion_tokens == 24
    # All 24 tokens reasoning, in 24 deltas of which 2 are empty (half a UTF-8 character): no answer,
    # so every output token was reasoning (22 events, usage's 0).
    rec = replay("responses_reasoning_vllm.sse", apply_responses_event)
    assert rec.ok and rec.ttft_us == 5000 and rec.ttfo_us is None and rec.reasoning_us == 27000
    assert rec.reasoning_tokens == 24 == rec.completion_tokens


def test_a_stream_without_reasoning_has_ttfo_equal_to_ttft() -> None:
    rec = replay("chat.sse")
    assert rec.ttft_us is not None and rec.ttfo_us == rec.ttft_us
    assert rec.reasoning_us is None and rec.reasoning_tokens == 0


def test_a_vllm_reasoning_responses_stream() -> None:
    # 1-2: created, in progress; 3-4: the reasoning item; 5-8: reasoning deltas; 9-13: its end and
    # the message item; 14-16: answer deltas; then the .done events and response.completed.
    rec = replay("responses_reasoning.sse", apply_responses_event)
    assert (rec.ttft_us, rec.ttfo_us, rec.reasoning_us) == (5000, 14000, 9000)
    assert rec.reasoning_tokens == 4 and rec.completion_tokens == 7


def chunk(delta: dict) -> bytes:
    return json.dumps({"choices": [{"index": 0, "delta": delta, "finish_reason": None}]}).encode()


@pytest.mark.parametrize("field", ["reasoning", "reasoning_content"])
def test_reasoning_without_usage_details_counts_its_events_and_a_stream_of_reasoning_only_has_no_ttfo(
    field: str,
) -> None:
    timer = StreamTimer("shared", 0.0, 0.0)
    for i in range(3):
        apply_chat_event(chunk({field: f" r{i}"}), timer, (i + 1) * MS)
    rec = timer.finish(10 * MS)  # max_tokens reached while reasoning: no answer at all
    assert rec.ok and rec.ttft_us == 1000 and rec.ttfo_us is None
    assert rec.reasoning_us == 9000  # to the end of the stream
    assert rec.reasoning_tokens == 3 and rec.completion_tokens == 3


def test_a_tool_call_is_output_and_a_delta_of_reasoning_and_tool_call_ends_the_reasoning() -> None:
    call = [{"index": 0, "function": {"arguments": "{"}}]
    timer = StreamTimer("shared", 0.0, 0.0)
    apply_chat_event(chunk({"reasoning": "hm"}), timer, 1 * MS)
    apply_chat_event(chunk({"reasoning": "ok", "tool_calls": call}), timer, 4 * MS)
    apply_chat_event(chunk({"tool_calls": call}), timer, 5 * MS)
    rec = timer.finish(6 * MS)
    assert (rec.ttft_us, rec.ttfo_us, rec.reasoning_us, rec.reasoning_tokens) == (1000, 4000, 3000, 2)
    assert rec.itl_us == [3000, 1000]  # three token events


def test_the_openai_sdk_user_reads_the_same_stream_the_same_way() -> None:
    timer = StreamTimer("shared", 0.0, 0.0)
    payloads = SseParser().feed((STREAMS / "chat_reasoning.sse").read_bytes())
    for i, payload in enumerate(payloads[:-1]):  # the SDK ends at [DONE] itself
        _apply_chunk(ChatCompletionChunk.model_validate_json(payload), timer, (i + 1) * MS)
    sdk = timer.finish((len(payloads) + 1) * MS)
    raw = replay("chat_reasoning.sse")
    assert (sdk.ttft_us, sdk.ttfo_us, sdk.reasoning_us, sdk.reasoning_tokens) == (2000, 7000, 5000, 7)
    assert (sdk.ttft_us, sdk.ttfo_us, sdk.reasoning_us, sdk.reasoning_tokens, sdk.itl_us) == (
        raw.ttft_us,
        raw.ttfo_us,
        raw.reasoning_us,
        raw.reasoning_tokens,
        raw.itl_us,
    )


def reasoning_report() -> dict:
    """A judged run of 20 requests that reasoned 200 ms after a 50 ms TTFT, and its outputs."""
    store = MetricsStore()
    for i in range(20):
        store.add(
            RequestRecord("shared", 100.0 + i, e2e_us=300_000, ttft_us=50_000, itl_us=[10_000] * 9,
                          completion_tokens=10, ttfo_us=250_000, reasoning_us=200_000, reasoning_tokens=6)
        )  # fmt: skip
    slos = [
        {"name": "ttfo-p95", "metric": "ttfo", "percentile": 95, "max_ms": 300},
        {"name": "think-p50", "metric": "reasoning", "percentile": 50, "max_ms": 100, "class": "shared"},
    ]
    report = judge(parse_spec({"slos": slos, "min_samples": 5, "warmup_s": 0}), store, RunInfo())
    return {
        "json": report.to_json(),
        "markdown": render_markdown(report),
        "junit": render_junit(report),
        "html": render_html(report),
        "prometheus": exposition(report)[0].decode(),
    }


def test_ttfo_reasoning_time_and_tokens_are_gated_and_in_every_report() -> None:
    out = reasoning_report()
    summary = out["json"]["metrics"]["all"]
    assert summary["ttfo_ms"]["p95"] == pytest.approx(250, rel=1e-3)
    assert summary["reasoning_ms"]["p50"] == pytest.approx(200, rel=1e-3)
    assert summary["reasoning_tokens"] == 120 and summary["mean_reasoning_tokens"] == 6.0
    verdicts = {o["name"]: o["result"] for o in out["json"]["slos"]}
    assert verdicts == {"ttfo-p95": "pass", "think-p50": "fail"} and out["json"]["verdict"] == "fail"
    assert "| TTFO p95 | reasoning p50 |" in out["markdown"] and "think-p50" in out["markdown"]
    assert 'name="ttfo-p95"' in out["junit"] and 'name="think-p50"' in out["junit"]
    assert "<th>TTFO p95</th><th>reasoning p50</th>" in out["html"] and "ttfo-p95" in out["html"]
    prom = out["prometheus"]
    assert 'slogate_time_to_first_output_token_seconds_count{class="all"} 20' in prom
    assert 'slogate_reasoning_time_seconds_count{class="all"} 20' in prom


def test_the_fault_servers_reasoning_shows_as_ttfo_equal_to_ttft_plus_the_reasoning_time(
    fault_server: str, locust_run, tmp_path: Path
) -> None:
    slo = tmp_path / "slo.yaml"
    slo.write_text(
        "slos:\n  - {name: ttfo-p95, metric: ttfo, percentile: 95, max_ms: 5000}\nmin_samples: 3\nwarmup_s: 0\n"
    )
    model = "ttft_ms=50,reasoning_tokens=4,reasoning_ms=300,tokens=3,itl_ms=5"
    run = locust_run(fault_server, "-u", "2", "-r", "2", "-t", "3s", "--slo-file", str(slo), "--model", model,
                     "--shared-prefix-tokens", "20")  # fmt: skip
    assert run.code == 0, run.stderr[-2000:]
    m = run.report["metrics"]["all"]
    ttft, ttfo, reasoning = (m[f"{k}_ms"]["mean"] for k in ("ttft", "ttfo", "reasoning"))
    assert ttft >= 50 and reasoning >= 300  # each at least the server's own delay
    # Every request reasoned, so each one's TTFO is its TTFT plus its reasoning, and so are the means
    # (percentiles do not add); within the histograms' resolution.
    assert ttfo == pytest.approx(ttft + reasoning, abs=5)
    assert m["reasoning_tokens"] == 4 * m["requests"] and m["output_tokens"] == 7 * m["requests"]
    assert "TTFO p95" in (run.report_dir / "slo-summary.md").read_text()
    assert 'name="ttfo-p95"' in (run.report_dir / "slo-junit.xml").read_text()


def dechunked(raw: bytes) -> bytes:
    """The body of HTTP chunks as the fault server's formats write them."""
    body = b""
    while raw:
        size, rest = raw.split(b"\r\n", 1)
        body, raw = body + rest[: int(size, 16)], rest[int(size, 16) + 2 :]
    return body


def test_the_responses_format_of_fault_formats_reasons_as_vllm_does() -> None:
    fmt = ResponsesFormat()
    raw = (
        fmt.opening(True)
        + fmt.reasoning(" a")
        + fmt.reasoning(" b")
        + fmt.token(" x")
        + fmt.closing(1, True, True, False)
    )
    timer = StreamTimer("shared", 0.0, 0.0)
    for i, payload in enumerate(SseParser().feed(dechunked(raw))):
        apply_responses_event(payload, timer, (i + 1) * MS)
    rec = timer.finish(1.0)
    assert rec.ttft_us is not None and rec.ttfo_us is not None and rec.ttfo_us > rec.ttft_us
    assert rec.reasoning_tokens == 2 and rec.completion_tokens == 3
