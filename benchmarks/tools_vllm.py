"""Tool calls and structured output on real vLLM CPU (docs/workloads/tools.md's table): the cpu-tiny
profile started with a tool parser and compact guided JSON, then one Locust run per workload with
the example files (locustfiles/data/tools.json, schema.json); a Markdown row each.

    .venv/bin/python benchmarks/tools_vllm.py [--seconds 12] [--max-tokens 64]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import subprocess
import tempfile
from pathlib import Path

from slogate.launch.launcher import start_profile
from slogate.launch.locust_command import locust_argv
from slogate.launch.profile import load_profile
from slogate.launch.server import free_port

DATA = Path(__file__).resolve().parents[1] / "locustfiles" / "data"
TOOLS, SCHEMA = str(DATA / "tools.json"), str(DATA / "schema.json")
FLAGS = {
    "enable-auto-tool-choice": True,  # vLLM 0.32 refuses tools without a tool parser
    "tool-call-parser": "pythonic",  # needs no special tokens (the tiny tokenizer has none)
    "structured-outputs-config": {"backend": "xgrammar", "disable_any_whitespace": True},
}
WORKLOADS = {
    "plain chat": (),
    "`--response-format schema.json`": ("--response-format", SCHEMA),
    "`--tools tools.json --tool-choice get_weather`": ("--tools", TOOLS, "--tool-choice", "get_weather"),
    "`--tools tools.json --tool-choice required`": ("--tools", TOOLS, "--tool-choice", "required"),
    "`--tools tools.json --tool-choice auto`": ("--tools", TOOLS, "--tool-choice", "auto"),
    "responses, `--tool-choice get_time`": ("--endpoint", "responses", "--tools", TOOLS, "--tool-choice", "get_time"),
    "responses, `--tool-choice required`": ("--endpoint", "responses", "--tools", TOOLS, "--tool-choice", "required"),
}


def row(name: str, report: dict) -> str:
    a = report["metrics"]["all"]
    ms = lambda key: "-" if a[key]["p50"] is None else f"{a[key]['p50']:,.0f} ms"  # noqa: E731
    invalid = a["errors_by_kind"].get("invalid_output", 0)
    cells = [name, a["requests"], invalid, ms("ttft_ms"), ms("ttftc_ms"), ms("e2e_ms"), a["mean_output_tokens"]]
    return "| " + " | ".join(str(c) for c in cells) + " |"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=int, default=12)
    ap.add_argument("--max-tokens", type=int, default=64)
    a = ap.parse_args()
    profile = load_profile("cpu-tiny")
    profile = dataclasses.replace(profile, args={**profile.args, **FLAGS})
    launched = start_profile(profile, "127.0.0.1", free_port(), install=False, validate=False)
    load = ["-u", "1", "-r", "1", "-t", f"{a.seconds}s", "--max-tokens", str(a.max_tokens), "--seed", "1"]
    load += ["--shared-prefix-tokens", "100", "--only-summary"]
    print("| workload | requests | invalid_output | TTFT p50 | TTFTC p50 | E2E p50 | mean output tokens |")
    print("|---|---|---|---|---|---|---|")
    try:
        for name, extra in WORKLOADS.items():
            with tempfile.TemporaryDirectory() as out:
                argv = locust_argv(launched.server.url, report_dir=out, extra=[*load, *extra])
                subprocess.run(argv, capture_output=True, check=False)
                print(row(name, json.loads((Path(out) / "slo-report.json").read_text())), flush=True)
    finally:
        launched.server.stop()


if __name__ == "__main__":
    main()
