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
    """A stream writer that keeps what it wrote."""

    def __init__(self) -> None:
        self.writes: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.writes.append(data)

    async def drain(self) -> None:
        pass

    def close(self) -> None:
        pass

    @property
    def text(self) -> str:
        return b"".join(self.writes).decode()


def post(server: fault.Server, model: str, stream: bool = True) -> Writer:
    """One chat request answered by `server`: its writer."""
    body = json.dumps({"model": model, "stream": stream, "messages": []}).encode()
    writer = Writer()
    asyncio.run(server.route("POST", "/v1/chat/completions", body, writer, time.time()))  # type: ignore[arg-type]
    return writer


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


def test_each_request_waits_its_factor_times_ttft_and_itl_and_logs_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The waits the server asks for, recorded rather than slept (real sleeps on a busy machine run late)."""
    asked: list[float] = []
    sleep = asyncio.sleep

    async def record(seconds: float) -> None:
        asked.append(seconds)
        await sleep(0)

    monkeypatch.setattr(asyncio, "sleep", record)
    log = tmp_path / "answered.jsonl"
    server = fault.Server(str(log))
    model, ttft_ms, itl_ms, tokens = "lognormal=0.6,seed=3,ttft_ms=40,itl_ms=15,tokens=4", 40, 15, 4
    waits = []
    for _ in range(6):
        asked.clear()
        writer = post(server, model)
        assert "[DONE]" in writer.text
        waits.append(list(asked))
    rows = fault.read_log(log)
    factors = [row["factor"] for row in rows]
    draws = lognormal_factors(0.6, 3)
    assert factors == [next(draws) for _ in range(6)]  # in arrival order, from the seed
    assert max(factors) / min(factors) > 1.5  # they do vary: the check below tells them apart
    for f, asked_for in zip(factors, waits, strict=True):
        expected = [f * ttft_ms / 1000] + [f * itl_ms / 1000] * (tokens - 1)
        assert asked_for == pytest.approx(expected, rel=1e-9)


def test_without_lognormal_nothing_is_drawn_or_logged(tmp_path: Path) -> None:
    log = tmp_path / "answered.jsonl"
    server = fault.Server(str(log))
    post(server, "ttft_ms=1,tokens=2")
    assert "factor" not in json.loads(log.read_text()) and not server.factors


@pytest.mark.parametrize("value", ["0", "-1", "abc", "inf"])
def test_a_bad_sigma_is_a_400_that_says_why(value: str) -> None:
    writer = post(fault.Server(None), f"lognormal={value},tokens=2")
    assert writer.text.startswith("HTTP/1.1 400") and ("lognormal" in writer.text or "float" in writer.text)
    with pytest.raises(ValueError, match="lognormal: must be a sigma > 0"):
        parse_behaviour("lognormal=0")
