"""End to end against real vLLM CPU serving two LoRA adapters of the tiny model (made offline,
launch/adapters.py): requests spread over them by weight, each adapter gated as its own class, and
vLLM's LoRA figures in the server section. The session's server serves adapters a and b
(tests/session_vllm.py), so this test costs no server start of its own."""

import urllib.request
from pathlib import Path

import pytest

pytestmark = pytest.mark.vllm


def test_requests_spread_over_adapters_each_gated_and_the_server_shows_its_lora_figures(
    vllm_server: str, locust_run, tmp_path: Path
) -> None:
    slo = tmp_path / "slo.yaml"
    slo.write_text(
        "slos:\n  - {metric: ttft, percentile: 95, max_ms: 10000, class: adapter_a}\n"
        "  - {metric: error_rate, max: 0, class: adapter_b}\n"
        "min_samples: 2\n"
    )
    run = locust_run(
        vllm_server,
        "-u", "2", "-r", "2", "-t", "5s", "--slo-file", str(slo), "--server-metrics-interval", "1",
        "--adapters", "a:3,b:1", "--shared-prefix-tokens", "200", "--user-message-tokens", "16",
        "--max-tokens", "8", "--ignore-eos", "--seed", "3",
    )  # fmt: skip
    assert run.code == 0, run.stdout[-3000:] + run.stderr[-3000:]
    report = run.report
    metrics = report["metrics"]
    a, b = metrics["adapter_a"], metrics["adapter_b"]
    assert a["requests"] + b["requests"] == metrics["all"]["requests"]
    assert a["requests"] >= 2 and b["requests"] >= 2  # the 3:1 split by weight: tests/load/test_adapters.py
    assert a["mean_output_tokens"] == b["mean_output_tokens"] == 8.0
    assert metrics["all"]["errors_by_kind"] == {}
    assert report["run"]["workload"]["adapters"] == {"a": 3.0, "b": 1.0}
    lora = report["server"]["lora"]
    assert lora["max_lora"] == 2 and set(lora["adapters_running"]) == {"a", "b"}
    assert 1 <= lora["running_adapters_max"] <= 2
    with urllib.request.urlopen(f"{vllm_server}/metrics", timeout=10) as resp:
        assert b'running_lora_adapters="' in resp.read()
