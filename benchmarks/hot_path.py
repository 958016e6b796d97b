"""CPU per streamed event of the per-chunk hot path alone: `apply_chat_event` and `apply_responses_event`
onto a `StreamTimer`, without the network (benchmarks/client_cpu.py measures the whole user).

Streams of vLLM 0.32's shape: TOKENS content events (chat chunks, responses `output_text.delta`
events), and the same with a reasoning part first (half the events `reasoning` deltas). `--before
REF` also times the hot path as it was at a git ref (its locustfiles/load/sse.py and timer.py, read
with `git show`), side by side in alternating rounds, and prints the medians and their ratio.

    .venv/bin/python benchmarks/hot_path.py [--rounds 7] [--tokens 200000] [--before HEAD]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]


def chat_stream(tokens: int, reasoning: bool) -> list[bytes]:
    head = {"id": "chatcmpl-x", "object": "chat.completion.chunk", "created": 1, "model": "tiny"}

    def chunk(delta: dict) -> bytes:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": None, "token_ids": None}
        return json.dumps({**head, "choices": [choice]}, separators=(",", ":")).encode()

    thinking = tokens // 2 if reasoning else 0
    events = [chunk({"role": "assistant", "content": ""})]
    events += [chunk({"reasoning": f" r{i}"}) for i in range(thinking)]
    events += [chunk({"content": f" t{i}"}) for i in range(tokens - thinking)]
    usage = {"prompt_tokens": 10, "completion_tokens": tokens, "total_tokens": 10 + tokens}
    return [*events, json.dumps({**head, "choices": [], "usage": usage}).encode(), b"[DONE]"]


def responses_stream(tokens: int, reasoning: bool) -> list[bytes]:
    thinking = tokens // 2 if reasoning else 0
    ids = {"item_id": "msg_x", "output_index": 0, "content_index": 0}

    def ev(kind: str, i: int) -> bytes:
        return json.dumps({"type": kind, "sequence_number": i, **ids, "delta": f" t{i}", "logprobs": []}).encode()

    events = [ev("response.reasoning_text.delta", i) for i in range(thinking)]
    events += [ev("response.output_text.delta", i) for i in range(tokens - thinking)]
    return [*events, json.dumps({"type": "response.completed", "response": {"usage": None}}).encode()]


def load(name: str, source: str) -> ModuleType:
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
        f.write(source)
    spec = importlib.util.spec_from_file_location(name, f.name)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def modules_at(ref: str) -> tuple[ModuleType, ModuleType]:
    """sse.py and timer.py as they were at `ref` (sse's own import of the timer is for types only)."""

    def show(path: str) -> str:
        shown = subprocess.run(["git", "show", f"{ref}:{path}"], cwd=ROOT, check=True, capture_output=True)
        return shown.stdout.decode()

    timer = load(f"timer_{ref}", show("locustfiles/load/timer.py"))
    return load(f"sse_{ref}", show("locustfiles/load/sse.py")), timer


def us_per_event(sse: ModuleType, timer_module: ModuleType, endpoint: str, stream: list[bytes]) -> float:
    apply = sse.apply_chat_event if endpoint == "chat" else sse.apply_responses_event
    timer = timer_module.StreamTimer("shared", 0.0, 0.0)
    clock = time.perf_counter
    start = time.process_time()
    for payload in stream:
        apply(payload, timer, clock())
    timer.finish(clock())
    return (time.process_time() - start) / len(stream) * 1e6


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--tokens", type=int, default=200_000)
    ap.add_argument("--before", help="a git ref whose hot path to time beside the current one")
    a = ap.parse_args()
    from slogate.locustfiles.load import sse, timer

    versions = {"now": (sse, timer)}
    if a.before:
        versions[a.before] = modules_at(a.before)
    cases = [(e, r) for e in ("chat", "responses") for r in (False, True)]
    streams = {
        (e, r): (chat_stream if e == "chat" else responses_stream)(a.tokens, r) for e, r in cases
    }  # fmt: skip
    results: dict[tuple[str, str, bool], list[float]] = {}
    for _ in range(a.rounds):
        for name, (s, t) in versions.items():
            for case in cases:
                results.setdefault((name, *case), []).append(us_per_event(s, t, case[0], streams[case]))
    print("| endpoint | stream | " + " | ".join(f"{name} (us/event)" for name in versions) + " |")
    print("|---|---|" + "---|" * len(versions))
    for e, r in cases:
        cells = [f"{statistics.median(results[(name, e, r)]):.3f}" for name in versions]
        print(f"| {e} | {'half reasoning' if r else 'content only'} | " + " | ".join(cells) + " |")
    if a.before:
        for e, r in cases:
            ratio = statistics.median(results[("now", e, r)]) / statistics.median(results[(a.before, e, r)])
            print(f"{e}, {'half reasoning' if r else 'content only'}: now / {a.before} = {ratio:.3f}")


if __name__ == "__main__":
    main()
