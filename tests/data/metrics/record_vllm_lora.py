"""Record two real `/metrics` scrapes of vLLM serving LoRA adapters next to this file:
vllm-0.32.0-lora-1.prom and -2.prom (tests/load/test_adapters.py reads them).

Run it with the project's interpreter once `slogate setup-cpu` has installed the CPU build:

    .venv/bin/python tests/data/metrics/record_vllm_lora.py

It starts the `cpu-tiny` profile (vLLM 0.32.0, CPU build) with two generated adapters, `a` and
`b` (launch/adapters.py), sends a request to the base model and one to `a`, scrapes, sends three
to each adapter, then four longer ones (300 tokens) to each at once, and scrapes again while those run (so the
`vllm:lora_requests_info` gauge's latest labels show adapters running).
"""

from __future__ import annotations

import json
import threading
import time
import urllib.request
from pathlib import Path

from slogate.launch import launcher
from slogate.launch.profile import load_profile
from slogate.launch.server import free_port

HERE = Path(__file__).resolve().parent


def complete_as(url: str, model: str, prompt: str, max_tokens: int = 8) -> None:
    """A completion from `model` (the base model or an adapter's name)."""
    body = {"model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True}
    req = urllib.request.Request(
        f"{url}/v1/completions", json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=300) as resp:
        resp.read()


def scrape(url: str) -> str:
    with urllib.request.urlopen(f"{url}/metrics", timeout=30) as resp:
        return resp.read().decode()


def main() -> None:
    profile = load_profile("cpu-tiny")
    plan = launcher.plan(profile, launcher.locate_vllm(profile, False), "127.0.0.1", free_port(), adapters=2)
    server = launcher.start(plan)
    try:
        print(f"healthy after {server.wait_healthy(profile.health_timeout_s):.0f} s")
        complete_as(server.url, "tiny", "priming")
        complete_as(server.url, "a", "priming a")
        (HERE / "vllm-0.32.0-lora-1.prom").write_text(scrape(server.url))
        for i in range(3):
            for model in ("a", "b"):
                complete_as(server.url, model, f"question {i}")
        burst = [
            threading.Thread(target=complete_as, args=(server.url, model, f"long {i}", 300))
            for i in range(4)
            for model in ("a", "b")
        ]
        for t in burst:
            t.start()
        time.sleep(1.0)
        (HERE / "vllm-0.32.0-lora-2.prom").write_text(scrape(server.url))
        for t in burst:
            t.join()
    finally:
        server.stop()


if __name__ == "__main__":
    main()
