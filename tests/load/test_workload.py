"""Prompts: unique across runs (a per-run nonce), shared prefixes identical across runs, and a
run's exact prompts reproducible from its report."""

import random
import time
from pathlib import Path

from slogate.locustfiles.load.workload import Workload, WorkloadConfig
from slogate.slo.gate.record import SHARED, UNIQUE

from tests.conftest import server_log


def requests(nonce: str, n: int = 300) -> list:
    workload = Workload(WorkloadConfig(seed=7, shared_prefix_tokens=40, prompt_nonce=nonce), "m", 1.3)
    rng = random.Random("7:0:1")  # a user's RNG: the same seed gives the same shapes
    return [workload.next_request(rng) for _ in range(n)]


def messages(reqs: list, cls: str, role: str) -> list[str]:
    return [next(m["content"] for m in r.body["messages"] if m["role"] == role) for r in reqs if r.request_class == cls]


def test_two_runs_share_shared_prefixes_and_nothing_unique() -> None:
    first, second = requests("aaaa"), requests("bbbb")
    assert [r.request_class for r in first] == [r.request_class for r in second]  # shapes reproducible
    assert set(messages(first, SHARED, "system")) == set(messages(second, SHARED, "system"))
    assert not set(messages(first, UNIQUE, "system")) & set(messages(second, UNIQUE, "system"))
    users = lambda reqs: set(messages(reqs, SHARED, "user") + messages(reqs, UNIQUE, "user"))  # noqa: E731
    assert not users(first) & users(second)
    assert [r.body for r in requests("aaaa")] == [r.body for r in first]  # the same nonce: the same prompts


def digests_since(log: Path, started: float) -> list[str]:
    """The prompts' digests of the requests that reached the server at `started` (`time.time()`) or
    later, in arrival order: a run's rows, whatever rows of an earlier run the server logs late."""
    return [row["digest"] for row in sorted(server_log(log, 0, since=started), key=lambda row: row["arrived"])]


def test_a_second_run_sends_no_body_of_the_first_and_its_nonce_reproduces_it(own_fault_server, locust_run) -> None:
    url, log = own_fault_server
    args = ["-u", "1", "-r", "1", "-t", "1s", "--model", "ttft_ms=20,tokens=2", "--shared-prefix-tokens", "50"]
    started = time.time()
    first = locust_run(url, *args)
    first_digests = digests_since(log, started)
    nonce = first.report["run"]["workload"]["prompt_nonce"]
    assert first.code == 0 and len(nonce) >= 8 and len(first_digests) >= 4
    started = time.time()
    second = locust_run(url, *args)
    second_digests = digests_since(log, started)
    assert second.report["run"]["workload"]["prompt_nonce"] != nonce
    assert len(second_digests) >= 4 and not set(first_digests) & set(second_digests)
    started = time.time()
    again = locust_run(url, *args, "--prompt-nonce", nonce)
    again_digests = digests_since(log, started)
    k = min(len(again_digests), len(first_digests))
    assert again.report["run"]["workload"]["prompt_nonce"] == nonce and again_digests[:k] == first_digests[:k]
