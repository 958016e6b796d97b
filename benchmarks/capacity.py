"""Capacity of one load-generator core: the highest rate at which the client's TTFT error stays
under 1 ms at p99. slogate's raw SSE user (open loop, with and without kernel receive stamps),
its openai-SDK user (closed loop, as many users as keep the rate) and `vllm bench serve`'s
asyncio client are measured side by side, at the same rates, against the same fault server;
the client is pinned to one core and the server to another.

    .venv/bin/python benchmarks/capacity.py [--rates 20,50,100,200,400] [--tokens 50] [--seconds 8]

Errors shown:
- p99 difference: the client's TTFT p99 minus the server's own (first write minus the moment its
  handler saw the request). Works for every client, but mixes in the server's tail.
- per request (slogate's open-loop runs, which trace every request; benchmarks/bench_users.py):
  each request is paired with the server's log of it (body digest), and, the two sharing one wall
  clock, split into the send lag (actual send minus schedule) and the read delay (the client's
  first-token time minus the server's write of it). Their sum is all the client adds to a TTFT;
  capacity is judged on its p99. The rest of a TTFT (request transit, the server's queue, its
  work) is the server side's, which is what a load test is for.

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
from collections.abc import Callable
from dataclasses import dataclass, field
from math import nan
from pathlib import Path
from typing import Any

from slogate.launch.locust_command import locust_argv

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from ttft_accuracy import (  # noqa: E402
    VLLM_BENCH,
    VLLM_PYTHON,
    percentile,
    server_ttft_ms,
    start_truth_server,
    truth_rows,
)


@dataclass
class Point:
    rate: float
    client: str
    p99: float | None  # the client's own TTFT p99
    truth_p99: float  # the server's, over the same window
    requests: int
    send_lags: list[float] = field(default_factory=list)  # per paired request (ms)
    read_delays: list[float] = field(default_factory=list)  # the same requests, same order (ms)

    @property
    def difference(self) -> float | None:
        return None if self.p99 is None else self.p99 - self.truth_p99

    @property
    def client_added(self) -> list[float]:
        return [lag + read for lag, read in zip(self.send_lags, self.read_delays, strict=True)]


def pair(trace: Path, rows: list[dict[str, Any]]) -> tuple[list[float], list[float]]:
    """Send lags and read delays (ms) of the traced requests that have exactly one partner in the
    server's log: same body digest, arrival within 50 ms of the send (runs repeat bodies: same seed)."""
    by_digest: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        by_digest.setdefault(r["digest"], []).append(r)
    traced = [json.loads(line) for line in trace.read_text().splitlines()] if trace.exists() else []
    lags, reads = [], []
    for t in traced:
        if t["ttft_us"] is None:
            continue
        lag = (t["send_lag_us"] or 0) / 1e6
        near = [r for r in by_digest.get(t["digest"], []) if abs(r["arrived"] - t["started_at"] - lag) < 0.05]
        if len(near) == 1:
            first_token_seen = t["started_at"] + t["ttft_us"] / 1e6  # started_at is the schedule
            lags.append(lag * 1000)
            reads.append((first_token_seen - near[0]["first_content_at"]) * 1000)
    return lags, reads


def slogate(
    host: str, model: str, load: tuple[str | Path, list[str]], seconds: int, out: Path, core: str,
    trace: Path | None = None,
) -> float | None:  # fmt: skip
    """One run of `load` (a locustfile and its options) on core `core`; the client's TTFT p99."""
    env = {**os.environ, "SLOGATE_TRACE": str(trace)} if trace else None
    out.mkdir(parents=True, exist_ok=True)
    locustfile, locust_args = load
    extra = ["-t", f"{seconds}s", "--model", model, "--shared-prefix-tokens", "20", "--no-prime-prefixes",
             "--only-summary", "--server-metrics-interval", "0", *locust_args]  # fmt: skip
    argv = locust_argv(host, locustfile=locustfile, report_dir=out, extra=extra)
    subprocess.run(["taskset", "-c", core, *argv], capture_output=True, check=False, env=env)
    report = json.loads((out / "slo-report.json").read_text())
    return report["metrics"]["all"]["ttft_ms"]["p99"]


def traced_open_loop(rate: float, user_class: str) -> tuple[Path, list[str]]:
    users = max(1, round(rate / 25))
    return HERE / "bench_users.py", [user_class, "-u", str(users), "-r", str(users),
                                     "--arrival-rate", str(rate / users), "--max-in-flight", "512"]  # fmt: skip


def closed_loop_sdk(rate: float, stream_s: float) -> tuple[str, list[str]]:
    """As many back-to-back users as make `rate` requests/s with streams `stream_s` long."""
    users = max(1, round(rate * stream_s))
    return "openai", ["-u", str(users), "-r", str(users)]


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

    def traced(user_class: str) -> Callable[[float, Path], float | None]:
        return lambda rate, out: slogate(
            host, model, traced_open_loop(rate, user_class), a.seconds, out, client_core, out / "trace"
        )

    clients: dict[str, Callable[[float, Path], float | None]] = {
        "slogate open loop": traced("TracedOpenLoopChatUser"),
        "slogate open loop, no receive stamps": traced("TracedUnstampedOpenLoopChatUser"),
        "slogate SDK user (closed loop)": lambda rate, out: slogate(
            host, model, closed_loop_sdk(rate, stream_s), a.seconds, out, client_core
        ),
    }
    if VLLM_PYTHON.exists():
        clients["vllm bench serve 0.32"] = lambda rate, out: vllm_bench(
            VLLM_PYTHON, host, model, rate, a.seconds, client_core
        )
    points = []
    try:
        for rate in (float(r) for r in a.rates.split(",")):
            for i, (name, run) in enumerate(clients.items()):
                since = time.time()
                out = tmp / f"{i}-{rate:g}"
                got = run(rate, out)
                rows = truth_rows(log, since)
                truth = percentile(server_ttft_ms(rows), 99) if rows else nan
                points.append(Point(rate, name, got, truth, len(rows), *pair(out / "trace", rows)))
    finally:
        server.terminate()
    print(f"client pinned to core {client_core}, server to core {server_core}; {a.tokens} chunks/response, "
          f"{a.itl_ms:g} ms apart; true TTFT {a.ttft_ms:g} ms\n")  # fmt: skip
    print(
        "| req/s | chunks/s | client | TTFT p99 client / server | p99 difference | send lag p50 / p99 "
        "| read delay p50 / p99 | client-added p50 / p99 | requests (paired) |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for pt in points:
        print(" | ".join([f"| {pt.rate:g}", f"{pt.rate * a.tokens:,.0f}", pt.client, *cells(pt)]) + " |")
    print("\nCapacity (the highest rate at which it, and every lower rate measured, kept the p99 under 1 ms):")
    for name in clients:
        mine = [pt for pt in points if pt.client == name]
        by_difference = capacity([(pt.rate, pt.difference) for pt in mine])
        if not any(pt.send_lags for pt in mine):
            print(f"- {name}: by the p99 difference {by_difference}")
            continue
        by_added = capacity([(pt.rate, p99(pt.client_added)) for pt in mine])
        by_read = capacity([(pt.rate, p99(pt.read_delays)) for pt in mine])
        print(f"- {name}: by the p99 difference {by_difference}; by the client-added p99 {by_added}; "
              f"by the read delay p99 {by_read}")  # fmt: skip


def p99(values: list[float]) -> float | None:
    return percentile(values, 99) if values else None


def cells(pt: Point) -> list[str]:
    def p50_p99(values: list[float]) -> str:
        return f"{percentile(values, 50):.2f} / {percentile(values, 99):.2f} ms" if values else "-"

    own = "-" if pt.p99 is None else f"{pt.p99:.1f} / {pt.truth_p99:.1f}"
    diff = "-" if pt.difference is None else f"{pt.difference:+.1f} ms"
    paired = f" ({len(pt.send_lags)})" if pt.send_lags else ""
    return [own, diff, p50_p99(pt.send_lags), p50_p99(pt.read_delays), p50_p99(pt.client_added),
            f"{pt.requests}{paired}"]  # fmt: skip


def capacity(points: list[tuple[float, float | None]]) -> str:
    """The highest rate below which every measured rate kept its p99 error under 1 ms."""
    best = None
    for rate, error in sorted(points):
        if error is None or error >= 1.0:
            break
        best = rate
    return "below the lowest rate measured" if best is None else f"{best:g} req/s"


if __name__ == "__main__":
    main()
