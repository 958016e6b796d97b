"""Ramp stages for open-loop load: `--stages "30s:1,60s:4,30s:8"` runs 1 user for 30 s, then 4
for 60 s, then 8 for 30 s, and ends. Each open-loop user sends `--arrival-rate` requests/s, so
the stages are rate stages: with `--arrival-rate 2` the run above offers 2, 8, then 16 req/s.
Works headless and in the web UI (Locust drives a `LoadTestShape` in both)."""

from __future__ import annotations

from typing import Any

from locust import LoadTestShape, events
from locust.util.timespan import parse_timespan
from slogate.locustfiles.load.options import workload_options
from slogate.slo.plugin.parser import group


@events.init_command_line_parser.add_listener
def _add_arguments(parser: Any) -> None:
    group(parser, "slogate: stages")(
        "--stages", type=str, default="", help='Ramp stages "DURATION:USERS,...", e.g. "30s:1,60s:4"'
    )


def parse_stages(text: str) -> list[tuple[float, int]]:
    """[(end time in s, users)] from "30s:1,60s:4"; a one-line ValueError for bad input."""
    stages, end = [], 0.0
    for part in filter(None, (p.strip() for p in text.split(","))):
        duration, sep, users = part.partition(":")
        try:
            seconds, count = parse_timespan(duration), int(users)
        except ValueError:
            raise ValueError(f"--stages: {part!r} is not DURATION:USERS (e.g. 30s:4)") from None
        if not sep or seconds <= 0 or count < 0:
            raise ValueError(f"--stages: {part!r} is not DURATION:USERS (e.g. 30s:4)")
        end += seconds
        stages.append((end, count))
    if not stages:
        raise ValueError('--stages is required with this locustfile, e.g. --stages "30s:1,60s:4"')
    return stages


class RateStages(LoadTestShape):
    def tick(self) -> tuple[int, float] | None:
        stages = parse_stages(workload_options(self.runner.environment).stages)
        elapsed = self.get_run_time()
        for end, users in stages:
            if elapsed < end:
                return users, max(users, 1)  # reach each stage's users within a second
        return None
