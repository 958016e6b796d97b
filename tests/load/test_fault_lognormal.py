"""The fault server's second shape, `lognormal=S`: one service-time factor per request, mean 1,
seeded, logged; its first-token wait and every inter-token gap scaled by it (in-process, no socket)."""

import asyncio
import json
import math
import statistics
import time
from pathlib import Path

import pytest
from slogate.launch import fault_server as fault
from slogate.launch.fault_spec import lognormal_factors, parse_behaviour


class Writer:
    """A stream writer that keeps when each write came (monotonic seconds) and what it wrote."""

    def __init__(self) -> None:
        self.writes: list[tuple[float, bytes]] = []

    def write(self, data: bytes) -> None:
        self.writes.append((time.monotonic(), data))

    async def drain(self) -> None:
        pass

    def close(self) -> None:
        pass

    @property
    def text(self) -> str:
        return b"".join(data for _, data in self.writes).decode()


def post(server: fault.Server, model: str, stream: bool = True) -> tuple[Writer, float]:
    """One chat request answered by `server`: its writer and when it arrived (monotonic)."""
    body = json.dumps({"model": model, "stream": stream, "messages": []}).encode()
    writer = Writer()
    arrived = time.monotonic()
    asyncio.run(server.route("POST", "/v1/chat/completions", body, writer, time.time()))  # type: ignore[arg-type]
    return writer, arrived


def test_factors_have_mean_one_and_median_exp_mu_and_repeat_by_seed() -> None:
    sigma = 0.5
    draws = lognormal_factors(sigma, 0)
    factors = [next(draws) for _ in range(40_000)]
    assert statistics.fmean(factors) == pytest.approx(1, rel=0.02)
    assert statistics.median(factors) == pytest.approx(math.exp(-(sigma**2) / 2), rel=0.02)
    logs = [math.log(f) for f in factors]
    assert statistics.stdev(logs) == pytest.approx(sigma, rel=0.02)
    again, other = lognormal_factors(sigma, 0), lognormal_factors(sigma, 1)
    assert [next(again) for _ in range(100)] == factors[:100]
    assert [next(other) for _ in range(100)] != factors[:100]


def test_each_request_waits_its_factor_times_ttft_and_itl_and_logs_it(tmp_path: Path) -> None:
    log = tmp_path / "answered.jsonl"
    server = fault.Server(str(log))
    model, ttft_ms, itl_ms, tokens = "lognormal=0.6,seed=3,ttft_ms=40,itl_ms=15,tokens=4", 40, 15, 4
    held = []
    for _ in range(6):
        writer, arrived = post(server, model)
        assert "[DONE]" in writer.text
        held.append(writer.writes[-1][0] - arrived)
    rows = [json.loads(line) for line in log.read_text().splitlines()]
    factors = [row["factor"] for row in rows]
    draws = lognormal_factors(0.6, 3)
    assert factors == [next(draws) for _ in range(6)]  # in arrival order, from the seed
    assert max(factors) / min(factors) > 1.5  # they do vary: the check below tells them apart
    for row, hold in zip(rows, held, strict=True):
        f = row["factor"]
        assert row["first_content_at"] - row["arrived"] == pytest.approx(f * ttft_ms / 1000, abs=0.012)
        assert hold == pytest.approx(f * (ttft_ms + (tokens - 1) * itl_ms) / 1000, abs=0.02)


def test_without_lognormal_nothing_is_drawn_or_logged(tmp_path: Path) -> None:
    log = tmp_path / "answered.jsonl"
    server = fault.Server(str(log))
    post(server, "ttft_ms=1,tokens=2")
    assert "factor" not in json.loads(log.read_text()) and not server.factors


@pytest.mark.parametrize("value", ["0", "-1", "abc", "inf"])
def test_a_bad_sigma_is_a_400_that_says_why(value: str) -> None:
    writer, _ = post(fault.Server(None), f"lognormal={value},tokens=2")
    assert writer.text.startswith("HTTP/1.1 400") and ("lognormal" in writer.text or "float" in writer.text)
    with pytest.raises(ValueError, match="lognormal: must be a sigma > 0"):
        parse_behaviour("lognormal=0")
