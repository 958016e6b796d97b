"""End to end against real vLLM CPU serving the tiny vision-language model (made offline,
launch/vision_model.py, profile cpu-vision): chat requests with 0 or 1 generated image, each count
gated as its own tag, the image's tokens in the server's usage (docs/workloads/images.md has 4 too:
at ~9 s a request here, too slow for the suite). One server start of its own
(the session's text model has no vision encoder)."""

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from slogate.launch import launcher
from slogate.launch.installation import InstallError
from slogate.launch.profile import load_profile
from slogate.launch.server import free_port

pytestmark = pytest.mark.vllm


@pytest.fixture(scope="module")
def vision_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    profile = load_profile("cpu-vision")
    try:
        vllm = launcher.locate_vllm(profile, install=False)
    except InstallError as e:
        if os.environ.get("SLOGATE_REQUIRE_VLLM") == "1":
            pytest.fail(f"vLLM required but not available: {e}")
        pytest.skip(f"vLLM not installed ({e}); run `slogate setup-cpu`")
    server = launcher.start(
        launcher.plan(profile, vllm, "127.0.0.1", free_port()), tmp_path_factory.mktemp("vl") / "log"
    )
    try:
        server.wait_healthy(profile.health_timeout_s)
        yield server.url
    finally:
        server.stop()


def test_images_per_request_are_tagged_gated_and_counted_in_the_servers_prompt_tokens(
    vision_server: str, locust_run, tmp_path: Path
) -> None:
    slo = tmp_path / "slo.yaml"
    slo.write_text(
        "slos:\n  - {metric: ttft, percentile: 95, max_ms: 60000, class: images_1}\n"
        "  - {metric: error_rate, max: 0, class: images_1}\n"
        "min_samples: 2\n"
    )
    run = locust_run(
        vision_server, "-u", "2", "-r", "2", "-t", "15s", "--slo-file", str(slo), "--images", "0-1",
        "--shared-fraction", "0", "--unique-prefix-tokens", "32", "--user-message-tokens", "16",
        "--max-tokens", "4", "--ignore-eos", "--seed", "2",
    )  # fmt: skip
    assert run.code == 0, run.stdout[-3000:] + run.stderr[-3000:]
    metrics = run.report["metrics"]
    assert metrics["all"]["errors_by_kind"] == {}
    text = metrics["images_0"]["mean_prompt_tokens"]
    # Each image is one 512-pixel tile and a 2x2 split of it at 1024 pixels: 5 x 64 image tokens and
    # their markers, whatever the image's pixels (vLLM counts them in usage.prompt_tokens).
    assert 320 <= metrics["images_1"]["mean_prompt_tokens"] - text <= 400, (text, metrics["images_1"])
    assert metrics["images_1"]["ttft_ms"]["p50"] > metrics["images_0"]["ttft_ms"]["p50"]
