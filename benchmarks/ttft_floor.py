"""Where does the TTFT error floor come from? A bare blocking-socket client next to slogate's.

benchmarks/capacity.py finds both slogate and `vllm bench serve` ~2.5 ms above the ground truth
even at 20 req/s. This script sends the same requests to the same truth server with the least
client there can be (one blocking socket, keep-alive, the request bytes prebuilt, TTFT stopped
at the first line holding content, no HTTP library, no event loop) and with slogate's open-loop
user, in turn, and prints each one's error against the server's own clock. If the bare client
shows the same floor, it lies in the server and the machine (loopback, wake-ups of idle vCPUs),
not in slogate.

    .venv/bin/python benchmarks/ttft_floor.py [--rate 5] [--seconds 10] [--ttft-ms 100] [--pin 0,1]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ttft_accuracy import percentile, run_slogate, server_truth, start_truth_server


def bare_client(host: str, model: str, rate: float, seconds: int) -> list[float]:
    """TTFTs in ms, one request at a time at `rate` per second, on one keep-alive connection."""
    hostname, port = host.removeprefix("http://").split(":")
    body = json.dumps({"model": model, "stream": True, "messages": [{"role": "user", "content": "hi"}]}).encode()
    request = (
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: {hostname}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode() + body
    sock = socket.create_connection((hostname, int(port)))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    reader = sock.makefile("rb")
    out, gap, next_at = [], 1 / rate, time.perf_counter()
    end = next_at + seconds
    while next_at < end:
        time.sleep(max(0.0, next_at - time.perf_counter()))
        t0 = time.perf_counter()
        sock.sendall(request)
        first = None
        while True:
            line = reader.readline()
            if first is None and line.startswith(b"data: ") and b'"content": " tok' in line:
                first = time.perf_counter()
                out.append((first - t0) * 1000)
            if line == b"0\r\n":  # the chunked terminator after data: [DONE]
                reader.readline()
                break
        next_at += gap
    sock.close()
    return out


def error_row(name: str, requests: int, client: dict[str, float], truth: list[float]) -> str:
    """client p50 / truth p50 / error, and the same at p99."""
    cells = [
        f"{client[p]:.2f} / {percentile(truth, int(p[1:])):.2f} / {client[p] - percentile(truth, int(p[1:])):+.2f}"
        for p in ("p50", "p99")
    ]
    return f"| {name} | {requests} | " + " | ".join(cells) + " |"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rate", type=float, default=5)
    ap.add_argument("--seconds", type=int, default=10)
    ap.add_argument("--ttft-ms", type=float, default=100)
    ap.add_argument("--pin", default="", help="client core,server core (e.g. 0,1); default: not pinned")
    a = ap.parse_args()
    client_core, server_core = a.pin.split(",") if a.pin else ("", "")
    if client_core:
        os.sched_setaffinity(0, {int(client_core)})
    tmp = Path(tempfile.mkdtemp())
    log = tmp / "truth.jsonl"
    server, host = start_truth_server(log, server_core or None)
    model = f"role_first=1,ttft_ms={a.ttft_ms:g},tokens=4,itl_ms=5"
    rows = []
    try:
        since = time.time()
        bare = bare_client(host, model, a.rate, a.seconds)
        bare_pcts = {"p50": percentile(bare, 50), "p99": percentile(bare, 99)}
        rows.append(error_row("bare blocking socket", len(bare), bare_pcts, server_truth(log, since)))
        since = time.time()
        got = run_slogate("open-loop", host, model, a.rate, a.seconds, tmp / "slogate")
        n = json.loads((tmp / "slogate" / "slo-report.json").read_text())["metrics"]["all"]["ttft_ms"]["count"]
        rows.append(error_row("slogate OpenLoopChatUser", n, got, server_truth(log, since)))
    finally:
        server.terminate()
    print(f"\ntrue TTFT {a.ttft_ms:g} ms, {a.rate:g} req/s, {a.seconds} s each, pinned: {a.pin or 'no'}\n")
    print("| client | requests | p50 client / truth / error (ms) | p99 client / truth / error (ms) |")
    print("|---|---|---|---|")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
