"""Record two real `/metrics` scrapes of vLLM next to this file: vllm-0.32.0-1.prom and -2.prom.

Run it with the project's interpreter once `slogate setup-cpu` has installed the CPU build:

    .venv/bin/python tests/data/metrics/record_vllm.py

It starts the `cpu-tiny` profile (vLLM 0.32.0, CPU build, the tiny generated model), sends two
priming requests, scrapes, sends ten more that share a long prefix (so the prefix cache hits), then
eight long ones at once, and scrapes again while those run (so the gauges are not all zero). The
SGLang and TGI fixtures beside it cannot be recorded here (neither runs on these machines):
make_fixtures.py builds them.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.request
from pathlib import Path

from slogate.launch.launcher import start_profile
from slogate.launch.server import free_port

HERE = Path(__file__).resolve().parent
PREFIX = " ".join(f"word{i}" for i in range(300))


def complete(url: str, prompt: str, max_tokens: int = 8) -> None:
    body = {"model": "tiny", "prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True}
    body = json.dumps(body).encode()
    req = urllib.request.Request(f"{url}/v1/completions", body, {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as resp:
        resp.read()


def scrape(url: str) -> str:
    with urllib.request.urlopen(f"{url}/metrics", timeout=30) as resp:
        return resp.read().decode()


def main() -> None:
    launched = start_profile("cpu-tiny", "127.0.0.1", free_port(), install=False, on_progress=print)
    url = launched.server.url
    try:
        for i in range(2):
            complete(url, f"priming {i}")
        (HERE / "vllm-0.32.0-1.prom").write_text(scrape(url))
        for i in range(10):
            complete(url, f"{PREFIX} question {i}")
        burst = [threading.Thread(target=complete, args=(url, f"{PREFIX} long {i}", 2000)) for i in range(8)]
        for t in burst:
            t.start()
        time.sleep(1.0)
        (HERE / "vllm-0.32.0-2.prom").write_text(scrape(url))
        for t in burst:
            t.join()
    finally:
        launched.server.stop()


if __name__ == "__main__":
    main()
