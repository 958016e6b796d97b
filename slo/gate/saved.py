"""Saved results, read back for `slogate judge` (slo/rejudge.py): measurements and run facts.

A result is a slogate `slo-report.json` (judged again from its measurements, e.g. with a new SLO
file or baseline; with its own SLO file it gives the live run's verdict and figures), a report
directory (its journal when a killed run left one, slo/gate/journal.py, else its report), or a
`vllm bench serve --save-result --save-detailed` JSON (class `all`, which is its one class
`vllm_bench`). The format is told from the content. Every bad input is one line and exit 2,
and a report is written all the same.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from slogate.slo.gate.facts import WorkloadFacts, utc_iso
from slogate.slo.gate.journal import JournalError, journal_path, load_journal
from slogate.slo.gate.metrics import MetricsStore
from slogate.slo.gate.record import ALL, PREFIX_CLASSES
from slogate.slo.gate.report import JSON_NAME, Report, ReportError, RunInfo
from slogate.slo.gate.server_figures import ServerFigures
from slogate.slo.gate.vllm_bench import REQUEST_CLASS as VLLM_BENCH_CLASS
from slogate.slo.gate.vllm_bench import VllmBenchError, load_vllm_bench, looks_like_vllm_bench

VLLM_BENCH = "vllm-bench"
# vllm bench's run fields that must match for a baseline comparison to mean anything.
_VLLM_BENCH_WORKLOAD = ("endpoint_type", "request_rate", "burstiness", "max_concurrency")


class ResultError(ValueError):
    """A result file that cannot be judged; str() is one line."""


@dataclass(slots=True)
class SavedRun:
    measurements: MetricsStore
    run: RunInfo
    server: ServerFigures | None = None
    classes: list[str] = field(default_factory=lambda: [ALL])  # the classes an SLO may name


def load_result(path: str | Path, goodput_targets_ms: dict[str, dict[str, float]] | None = None) -> SavedRun:
    """The measurements and run facts in `path`. `goodput_targets_ms` (slo/gate/spec.py `goodput_targets`)
    counts a `vllm bench serve` result's good requests, record by record as they are read; a
    slogate report keeps the counts its run made against the run's own limits."""
    journal = journal_path(path)
    if journal is not None:
        try:
            store, run, server = load_journal(journal)
        except JournalError as e:
            raise ResultError(str(e)) from None
        return SavedRun(store, run, server, _classes(store))
    p = Path(path) / JSON_NAME if Path(path).is_dir() else Path(path)
    try:
        data = json.loads(p.read_text())
    except OSError as e:
        raise ResultError(f"{p}: cannot read result: {e.strerror or e}") from None
    except ValueError:
        raise ResultError(f"{p}: not JSON (expected a slogate slo-report.json or a vllm bench serve result)") from None
    if isinstance(data, dict) and str(data.get("schema", "")).startswith("slogate.report/"):
        try:
            report = Report.from_json(data, str(p))
        except ReportError as e:
            raise ResultError(str(e)) from None
        return SavedRun(report.measurements, report.run, report.server, _classes(report.measurements))
    if looks_like_vllm_bench(data):
        try:
            bench = load_vllm_bench(data, str(p), goodput_targets_ms)
        except VllmBenchError as e:
            raise ResultError(str(e)) from None
        run = RunInfo(
            source=VLLM_BENCH,
            model=bench.model,
            workload=WorkloadFacts({k: bench.facts[k] for k in _VLLM_BENCH_WORKLOAD if k in bench.facts}),
            started_at=utc_iso(bench.started_at),
            duration_s=bench.duration_s,
            notes=list(bench.notes),
            details=dict(bench.facts),
        )
        return SavedRun(bench.store, run, classes=[ALL, VLLM_BENCH_CLASS])  # its requests' one class, by its name
    raise ResultError(
        f"{p}: neither a slogate report (schema 'slogate.report/…') nor a vllm bench serve result "
        "saved with --save-result --save-detailed (per-request 'ttfts', 'itls', 'latencies', ...)"
    )


def _classes(measurements: MetricsStore) -> list[str]:
    """The classes an SLO on a slogate run may name: the prefix classes, and every one measured."""
    measured = [c for c in measurements.class_names() if c not in (ALL, *PREFIX_CLASSES)]
    return [ALL, *PREFIX_CLASSES, *measured]
