"""End to end against the real vLLM CPU server (tiny generated model): shared prefixes are
served from the prefix cache, so their TTFT is lower than that of unique prefixes."""

import pytest

pytestmark = pytest.mark.vllm


def test_headless_run_shows_the_prefix_cache_effect_per_class(vllm_server: str, locust_run, tmp_path) -> None:
    slo = tmp_path / "slo.yaml"
    slo.write_text(
        "slos:\n  - {metric: ttft, percentile: 95, max_ms: 5000}\n  - {metric: error_rate, max: 0}\n"
        "  - {metric: prefix_cache_hit_rate, min: 0.2}\n"
        "min_samples: 10\nwarmup_s: 1\n"
    )
    run = locust_run(
        vllm_server,
        "-u", "1", "-r", "1", "-t", "15s", "--slo-file", str(slo), "--server-metrics-interval", "1",
        "--shared-prefixes", "2", "--shared-prefix-tokens", "1000", "--user-message-tokens", "32",
        "--max-tokens", "8", "--ignore-eos", "--seed", "3",
    )  # fmt: skip
    assert run.code == 0, run.stdout[-3000:] + run.stderr[-3000:]
    report = run.report
    shared, unique = report["metrics"]["shared"], report["metrics"]["unique"]
    assert shared["ttft_ms"]["count"] >= 10 and unique["ttft_ms"]["count"] >= 10
    assert shared["ttft_ms"]["p50"] < unique["ttft_ms"]["p50"]
    # Lengths are calibrated in the server's own tokens and reported from `usage`.
    assert 900 <= shared["mean_prompt_tokens"] <= 1300 and 900 <= unique["mean_prompt_tokens"] <= 1300
    assert shared["mean_output_tokens"] == 8.0
    assert report["run"]["model"] == "tiny"
    assert report["metrics"]["all"]["errors_by_kind"] == {}
    # Server side, from /metrics: half the requests reuse a cached 1,000-token prefix.
    server = report["server"]
    assert server["available"] and server["scrapes"] >= 5
    assert 0.2 <= server["prefix_cache_hit_rate"] <= 0.9
    assert server["server_ttft_ms"]["count"] >= shared["ttft_ms"]["count"] + unique["ttft_ms"]["count"]
    assert server["client_server_ttft_gap_ms"] > 0  # the client's clock includes HTTP and the network


def test_openai_sdk_user_measures_the_same_server(vllm_server: str, tmp_path, locust_run) -> None:
    run = locust_run(
        vllm_server,
        "-u", "1", "-t", "6s", "--shared-prefix-tokens", "500", "--max-tokens", "4", "--ignore-eos",
        locustfile="openai",
    )  # fmt: skip
    report = run.report
    assert report["verdict"] == "ungated"
    assert report["metrics"]["all"]["requests"] >= 5 and report["metrics"]["all"]["failures"] == 0
    assert report["metrics"]["all"]["mean_output_tokens"] == 4.0
