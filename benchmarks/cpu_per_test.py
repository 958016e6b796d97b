"""A pytest plugin: each test's machine-wide CPU (from /proc/stat, Linux) and wall time, to find where
the suite's CPU goes. Machine-wide on purpose: the servers, Locust runs and browsers a test starts are
its cost too, so run it one test at a time with nothing else on the machine:

    PYTHONPATH=benchmarks .venv/bin/python -m pytest -p cpu_per_test -p no:xdist -q \\
        -m "not vllm and not alone" --cpu-per-test /tmp/cpu.tsv

It writes one row per test (node id, CPU seconds, wall seconds) and prints the totals and the tests
that used the most CPU."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

TICKS_PER_S = os.sysconf("SC_CLK_TCK")
SHOWN = 15
ROWS = pytest.StashKey[list[tuple[str, float, float]]]()  # node id, CPU s, wall s


def busy_cpu_s() -> float:
    """CPU seconds all cores spent outside idle and I/O wait since boot."""
    with open("/proc/stat") as stat:
        user, nice, system, _idle, _iowait, irq, softirq = map(int, stat.readline().split()[1:8])
    return (user + nice + system + irq + softirq) / TICKS_PER_S


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--cpu-per-test", metavar="FILE", help="write each test's CPU and wall seconds (TSV) to FILE")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    cpu_s, began = busy_cpu_s(), time.monotonic()
    yield
    item.config.stash.setdefault(ROWS, []).append((item.nodeid, busy_cpu_s() - cpu_s, time.monotonic() - began))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    rows = config.stash.get(ROWS, [])
    if not rows:
        return
    out = config.getoption("--cpu-per-test")
    if out:
        Path(out).write_text("".join(f"{name}\t{cpu:.2f}\t{wall:.2f}\n" for name, cpu, wall in rows))
    terminalreporter.section("CPU per test (machine-wide)")
    total_cpu, total_wall = sum(r[1] for r in rows), sum(r[2] for r in rows)
    terminalreporter.line(f"{len(rows)} tests: {total_cpu:.1f} CPU-s in {total_wall:.1f} s")
    for name, cpu, wall in sorted(rows, key=lambda r: -r[1])[:SHOWN]:
        terminalreporter.line(f"{cpu:6.1f} CPU-s {wall:6.1f} s  {name}")
