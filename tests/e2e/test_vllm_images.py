"""End to end against real vLLM CPU serving the tiny vision-language model (made offline,
launch/vision_model.py, profile cpu-vision): chat requests with 0 or 1 generated image, each count
gated as its own tag, the image's tokens in the server's usage (docs/workloads/images.md has 4 too).
A server of its own (the session's text model has no vision encoder), which scripts/test.sh starts in
the background before the parallel tests."""

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from slogate.launch.installation import InstallError

from tests import session_vllm
from tests.conftest import LocustRun, vllm_missing

pytestmark = pytest.mark.vllm


@pytest.fixture(scope="module")
def vision_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Its own server, or the one the holder started before the parallel tests (tests/session_vllm.py)."""
    state = os.environ.get(session_vllm.STATE_ENV)
    try:
        if state:
            server, _ = session_vllm.adopt(Path(state), session_vllm.VISION)
        else:
            server = session_vllm.start_server(session_vllm.VISION, tmp_path_factory.mktemp("vl") / "log").server
    except InstallError as e:
        vllm_missing(str(e))
    except RuntimeError as e:  # the holder's server did not start
        pytest.fail(str(e))
    try:
        yield server.url
    finally:  # a second of grace: its interpreter lingers 20 s after its shutdown (vLLM 0.32), for nothing
        server.stop(grace_s=1)


# 0 or 1 image per request, the rest of the prompt short and unique: what an image adds shows alone.
WORKLOAD = ("-u", "2", "-r", "2", "--images", "0-1", "--shared-fraction", "0", "--unique-prefix-tokens", "32",
            "--user-message-tokens", "16", "--max-tokens", "4", "--ignore-eos", "--seed", "2")  # fmt: skip


def tokens_an_image_adds(run: LocustRun) -> float:
    """A run of WORKLOAD that passed with no failure: its images_1 requests' mean input tokens over images_0's."""
    assert run.code == 0, run.stdout[-3000:] + run.stderr[-3000:]
    metrics = run.report["metrics"]
    assert metrics["all"]["errors_by_kind"] == {}
    return metrics["images_1"]["mean_prompt_tokens"] - metrics["images_0"]["mean_prompt_tokens"]


def test_images_per_request_are_tagged_gated_and_counted_in_the_servers_prompt_tokens(
    vision_server: str, locust_run, tmp_path: Path
) -> None:
    slo = tmp_path / "slo.yaml"
    slo.write_text(
        "slos:\n  - {metric: ttft, percentile: 95, max_ms: 60000, class: images_1}\n"
        "  - {metric: error_rate, max: 0, class: images_1}\n"
        "min_samples: 2\n"
    )
    run = locust_run(vision_server, *WORKLOAD, "-t", "5s", "--slo-file", str(slo))
    # Each image is one 512-pixel tile and a 2x2 split of it at 1024 pixels: 5 x 64 image tokens and
    # their markers, whatever the image's pixels (vLLM counts them in usage.prompt_tokens).
    assert 320 <= tokens_an_image_adds(run) <= 400, run.report["metrics"]["images_1"]
    metrics = run.report["metrics"]
    assert metrics["images_1"]["ttft_ms"]["p50"] > metrics["images_0"]["ttft_ms"]["p50"]


def test_on_responses_the_images_are_input_image_parts_the_server_counts(vision_server: str, locust_run) -> None:
    """/v1/responses takes the images as `input_image` parts (vLLM 0.32): the same tokens per image as chat."""
    run = locust_run(vision_server, *WORKLOAD, "-t", "4s", "--endpoint", "responses")
    assert 320 <= tokens_an_image_adds(run) <= 400, run.report["metrics"]["images_1"]
