"""Capacity of one load-generator core: the highest rate at which the client's TTFT stays
within 1 ms (p99) of the server's ground truth. slogate's raw SSE user (open loop), its openai-SDK
user (closed loop, as many users as keep the rate) and `vllm bench serve`'s asyncio client are
measured side by side, at the same rates, against the same fault server; the client is pinned to
one core and the server to another.

    .venv/bin/python benchmarks/capacity.py [--rates 20,50,100,200,400] [--tokens 50] [--seconds 8]

The server sends no role-only chunk here (role_first=0), so `vllm bench serve` 0.32's TTFT,
which stops at the first chunk, is comparable.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
from ttft_accuracy import VLLM_BENCH, VLLM_PYTHON, percentile, start_truth_server  # noqa: E402


def truth_p99(log: Path, since: float) -> tuple[float, int]:
    rows = [json.loads(line) for line in log.read_text().splitlines()]
    vals = [
        (r["first_content_at"] - r["arrived"]) * 1000 for r in rows if r["arrived"] >= since and r["first_content_at"]
    ]
    return (percentile(vals, 99) if vals else float("nan")), len(vals)


def slogate(host: str, model: str, locust_args: list[str], seconds: int, out: Path, core: str) -> float | None:
    subprocess.run(
        ["taskset", "-c", core, sys.executable, "-m", "locust", "--headless", "--host", host, "-t", f"{seconds}s",
         "--model", model, "--shared-prefix-tokens", "20", "--no-prime-prefixes", "--only-summary",
         "--slo-report-dir", str(out), "--server-metrics-interval", "0", *locust_args],
        capture_output=True, check=False,
    )  # fmt: skip
    report = json.loads((out / "slo-report.json").read_text())
    return report["metrics"]["all"]["ttft_ms"]["p99"]


def open_loop_args(rate: float, locustfile: Path = ROOT / "locustfiles" / "chat_open_loop.py") -> list[str]:
    users = max(1, round(rate / 25))
    return ["-f", str(locustfile), "-u", str(users), "-r", str(users), "--arrival-rate", str(rate / users),
            "--max-in-flight", "512"]  # fmt: skip


def unstamped_args(rate: float) -> list[str]:
    return [*open_loop_args(rate, ROOT / "benchmarks" / "unstamped_users.py"), "UnstampedOpenLoopChatUser"]


def closed_loop_sdk_args(rate: float, stream_s: float) -> list[str]:
    """As many back-to-back users as make `rate` requests/s with streams `stream_s` long."""
    users = max(1, round(rate * stream_s))
    return ["-f", str(ROOT / "locustfiles" / "chat_openai.py"), "-u", str(users), "-r", str(users)]


def vllm_bench(python: Path, host: str, model: str, rate: float, seconds: int, core: str) -> float | None:
    out = subprocess.run(
        ["taskset", "-c", core, str(python), "-c", VLLM_BENCH, "--backend", "openai-chat",
         "--endpoint", "/v1/chat/completions", "--base-url", host, "--model", model,
         "--tokenizer", str(Path.home() / ".cache/slogate/models/tiny"), "--dataset-name", "random",
         "--random-input-len", "16", "--random-output-len", "4", "--num-prompts", str(int(rate * seconds)),
         "--request-rate", str(rate), "--percentile-metrics", "ttft", "--metric-percentiles", "99"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    found = re.search(r"P99 TTFT \(ms\):\s+([\d.]+)", out.stdout)
    return float(found.group(1)) if found else None


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rates", default="20,50,100,200,400")
    ap.add_argument("--tokens", type=int, default=50)
    ap.add_argument("--itl-ms", type=float, default=10)
    ap.add_argument("--ttft-ms", type=float, default=100)
    ap.add_argument("--seconds", type=int, default=8)
    a = ap.parse_args()
    cores = sorted(os.sched_getaffinity(0))
    client_core, server_core = str(cores[0]), str(cores[-1])
    tmp = Path(tempfile.mkdtemp())
    log = tmp / "truth.jsonl"
    server, host = start_truth_server(log, server_core)
    model = f"role_first=0,ttft_ms={a.ttft_ms:g},tokens={a.tokens},itl_ms={a.itl_ms:g}"
    stream_s = (a.ttft_ms + a.tokens * a.itl_ms) / 1000
    clients = {
        "slogate ChatStreamUser (open loop)": lambda rate, out: slogate(
            host, model, open_loop_args(rate), a.seconds, out, client_core
        ),
        "slogate ChatStreamUser (open loop), no receive stamps": lambda rate, out: slogate(
            host, model, unstamped_args(rate), a.seconds, out, client_core
        ),
        "slogate OpenAIChatUser (SDK, closed loop)": lambda rate, out: slogate(
            host, model, closed_loop_sdk_args(rate, stream_s), a.seconds, out, client_core
        ),
    }
    if VLLM_PYTHON.exists():
        clients["vllm bench serve 0.32"] = lambda rate, out: vllm_bench(
            VLLM_PYTHON, host, model, rate, a.seconds, client_core
        )
    rows = []
    try:
        for rate in (float(r) for r in a.rates.split(",")):
            for i, (name, run) in enumerate(clients.items()):
                since = time.time()
                got = run(rate, tmp / f"{i}-{rate:g}")
                truth, n = truth_p99(log, since)
                rows.append((rate, name, got, truth, n))
    finally:
        server.terminate()
    print(f"client pinned to core {client_core}, server to core {server_core}; {a.tokens} chunks/response, "
          f"{a.itl_ms:g} ms apart; true TTFT {a.ttft_ms:g} ms\n")  # fmt: skip
    print("| req/s | chunks/s | client | client TTFT p99 | server truth p99 | error p99 | requests |")
    print("|---|---|---|---|---|---|---|")
    for rate, name, got, truth, n in rows:
        err = "-" if got is None else f"{got - truth:+.1f} ms"
        shown = "-" if got is None else f"{got:.1f}"
        print(f"| {rate:g} | {rate * a.tokens:,.0f} | {name} | {shown} | {truth:.1f} | {err} | {n} |")
    print("\nCapacity (the highest rate measured with p99 error < 1 ms, and every lower rate too):")
    for name in clients:
        print(f"- {name}: {capacity([(rate, got, truth) for rate, n_, got, truth, _ in rows if n_ == name])}")


def capacity(points: list[tuple[float, float | None, float]]) -> str:
    """The highest rate below which every measured rate kept its p99 error under 1 ms."""
    best = None
    for rate, got, truth in sorted(points):
        if got is None or got - truth >= 1.0:
            break
        best = rate
    return "below the lowest rate measured" if best is None else f"{best:g} req/s"


if __name__ == "__main__":
    main()
