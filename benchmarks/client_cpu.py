"""CPU cost per streamed chunk of slogate's two users, measured side by side in one run.

The raw SSE user also runs without the kernel's receive stamps (plain `recv` instead of
`recvmsg`), to show what those cost.

Each user streams REQUESTS responses of TOKENS chunks from the local fault server (a separate
process, so only the client's CPU is counted) as fast as the server sends them. Rounds alternate
the users, and the medians over rounds are reported with their ratio.

    .venv/bin/python benchmarks/client_cpu.py [--rounds 5] [--requests 40] [--tokens 500]
"""

from __future__ import annotations

import locust  # noqa: F401  isort: skip  (gevent monkey-patching first)

import argparse
import platform
import statistics
import time

import slogate.locustfiles.load.options  # noqa: F401
from bench_users import UnstampedChatStreamUser
from locust.argument_parser import parse_options
from locust.env import Environment
from locust.event import Events
from slogate.launch import fault_server
from slogate.locustfiles.load.users import ChatStreamUser
from slogate.locustfiles.load.users_openai import OpenAIChatUser


def cpu_us_per_chunk(user_class: type, host: str, requests: int, tokens: int) -> float:
    opts = parse_options(
        ["--model", f"tokens={tokens},ttft_ms=0", "--no-prime-prefixes", "--shared-prefix-tokens", "20"]
    )
    env = Environment(user_classes=[user_class], events=Events(), host=host, parsed_options=opts)
    user = user_class(env)
    user.on_start()
    user.chat()  # warm: connection, lazy imports
    start = time.process_time()
    for _ in range(requests):
        user.chat()
    spent = time.process_time() - start
    user.on_stop()
    return spent / (requests * tokens) * 1e6


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--requests", type=int, default=40)
    ap.add_argument("--tokens", type=int, default=500)
    a = ap.parse_args()
    server, host = fault_server.spawn()
    classes = (ChatStreamUser, UnstampedChatStreamUser, OpenAIChatUser)
    results: dict[str, list[float]] = {cls.__name__: [] for cls in classes}
    try:
        for _ in range(a.rounds):
            for cls in classes:
                results[cls.__name__].append(cpu_us_per_chunk(cls, host, a.requests, a.tokens))
    finally:
        server.terminate()
    raw, unstamped, sdk = (statistics.median(results[cls.__name__]) for cls in classes)
    print(f"machine: {platform.processor() or platform.machine()}, Python {platform.python_version()}")
    print(f"{a.rounds} rounds x {a.requests} requests x {a.tokens} chunks per user\n")
    print("| user | client CPU per chunk (median) | chunks/s one core can parse |")
    print("|---|---|---|")
    print(f"| ChatStreamUser (raw SSE) | {raw:.1f} us | {1e6 / raw:,.0f} |")
    print(f"| ChatStreamUser without receive stamps | {unstamped:.1f} us | {1e6 / unstamped:,.0f} |")
    print(f"| OpenAIChatUser (openai SDK) | {sdk:.1f} us | {1e6 / sdk:,.0f} |")
    print(f"\nSDK / raw CPU ratio: {sdk / raw:.1f}x; receive stamps / none: {raw / unstamped:.2f}x")


if __name__ == "__main__":
    main()
