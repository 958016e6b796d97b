"""What the journal (slo/gate/journal.py, slo/plugin/journal.py) costs a single-process run: the
listener adds each record to the journal's delta store too (`RecordListener.tap`), and every
interval one entry is encoded, written and fsynced. Measured side by side in one process, medians
of `--repeats` rounds; also the size of an entry and the time to read a journal back.

    .venv/bin/python benchmarks/journal_cost.py
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import tempfile
import time
from pathlib import Path

from slogate.slo.gate.journal import JOURNAL_NAME, entry, header, load_journal
from slogate.slo.gate.metrics import MetricsStore
from slogate.slo.gate.record import RequestRecord
from slogate.slo.gate.report import RunInfo


def records(n: int, seed: int = 1) -> list[RequestRecord]:
    """Requests of 64 output tokens over 5 s, two classes, as a 20 req/s closed-loop run makes."""
    rng = random.Random(seed)
    start = 1_764_662_400.0
    out = []
    for i in range(n):
        ttft = int(rng.lognormvariate(11, 0.4))
        itl = [int(rng.lognormvariate(9.5, 0.3)) for _ in range(63)]
        out.append(
            RequestRecord(
                request_class="shared" if i % 2 else "unique",
                started_at=start + i * 0.05,
                ttft_us=ttft,
                e2e_us=ttft + sum(itl),
                itl_us=itl,
                prompt_tokens=1000,
                completion_tokens=64,
            )
        )
    return out


def add_all(recs: list[RequestRecord], stores: int) -> float:
    """Seconds to add every record to `stores` stores (1: no journal; 2: with its tap)."""
    targets = [MetricsStore() for _ in range(stores)]
    started = time.perf_counter()
    for rec in recs:
        for store in targets:
            store.add(rec)
    return time.perf_counter() - started


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=2000)
    ap.add_argument("--repeats", type=int, default=7)
    a = ap.parse_args()
    recs = records(a.records)
    one, two = [], []
    for _ in range(a.repeats):  # interleaved, so that the machine's noise falls on both alike
        one.append(add_all(recs, 1))
        two.append(add_all(recs, 2))
    per_one = statistics.median(one) / len(recs) * 1e6
    per_two = statistics.median(two) / len(recs) * 1e6

    interval = recs[:100]  # one 5 s interval at 20 req/s
    delta, total = MetricsStore(), MetricsStore()
    for rec in recs:
        total.add(rec)
    for rec in interval:
        delta.add(rec)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / JOURNAL_NAME
        writes = []
        with path.open("w") as fh:
            fh.write(json.dumps(header(0.0, None, 5.0, RunInfo())) + "\n")
            for _ in range(a.repeats * 10):
                started = time.perf_counter()
                fh.write(json.dumps(entry(time.time(), delta, RunInfo(), total, None), separators=(",", ":")) + "\n")
                fh.flush()
                os.fsync(fh.fileno())
                writes.append(time.perf_counter() - started)
        size = path.stat().st_size / (a.repeats * 10)
        started = time.perf_counter()
        load_journal(path)
        read_s = time.perf_counter() - started
    entries = a.repeats * 10
    print(f"journal cost: {a.records} records of 64 tokens, median of {a.repeats} interleaved rounds")
    print(f"command: .venv/bin/python benchmarks/journal_cost.py --records {a.records} --repeats {a.repeats}")
    print()
    print("| figure | value |")
    print("|---|---|")
    print(f"| add a record: no journal / with its tap | {per_one:.1f} / {per_two:.1f} us ({per_two / per_one:.2f}x) |")
    print(f"| one entry (100 requests, 2 classes): encode + write + fsync, median | "
          f"{statistics.median(writes) * 1000:.2f} ms |")  # fmt: skip
    print(f"| one entry's size | {size / 1000:.1f} KB (an hour at 5 s: {size * 720 / 1e6:.1f} MB) |")
    print(f"| read back {entries} entries (`slogate judge DIR`) | {read_s:.2f} s |")


if __name__ == "__main__":
    main()
