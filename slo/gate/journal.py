"""The run's journal, `slo-journal.jsonl`: what a killed master (or single process) leaves behind.

While a run goes, the process that judges it appends to its report directory, once per
`--slo-interval-s` (5 s by default), everything measured since the last entry: a `MetricsStore`
delta in its wire form (slo/gate/metrics.py), which merges exactly, so the entries add up to the
run's measurements as of the last one. Each line is flushed and fsynced (slo/plugin/journal.py).
A run that ends normally writes its reports and removes the journal; a journal left in a report
directory is a run that was killed (SIGKILL, the OOM killer, an evicted pod) or is still going.
`slogate judge DIR` reads it (`load_journal`) and judges it as a run cut short: inconclusive, or
a fail where a breach was already certain (slo/gate/judge.py `fold_interrupted`).

    {"slogate_journal": 1, "started_at": 1764662400.0, "target": ..., "slo_file": ..., ...}
    {"at": 1764662405.0, "metrics": {<MetricsStore delta>}, "run": {"model": ..., ...},
     "self_check": {"loop_lag": "HISTF...", "client_cpu_s": 1.2, "client_wall_s": 10.0},
     "server": {<the server section so far, without its series>}}

`run` and `self_check` are the latest values, not deltas (a reader keeps the last). A line cut off
by the kill is skipped: at most the entry being written is lost. A run that ended but could not
write its reports (a full disk: exit 4) ends its journal with a `complete` entry and its stop.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from slogate.slo.gate.facts import KILLED, RunStop, WorkloadFacts, utc_iso
from slogate.slo.gate.histogram import LatencyHistogram
from slogate.slo.gate.metrics import MetricsStore
from slogate.slo.gate.report import RunInfo
from slogate.slo.gate.self_check import MAX_LOOP_LAG_P99_MS
from slogate.slo.gate.server_figures import ServerFigures

JOURNAL_NAME = "slo-journal.jsonl"
FORMAT = 1


class JournalError(ValueError):
    """A journal that cannot be read; str() is one line."""


def header(
    started_at: float,
    planned_s: float | None,
    interval_s: float,
    run: RunInfo,
) -> dict[str, Any]:
    """The journal's first line: the run's facts known at its start."""
    return {
        "slogate_journal": FORMAT,
        "started_at": started_at,
        "planned_s": planned_s,
        "interval_s": interval_s,
        "target": run.target,
        "slo_file": run.slo_file,
        "warmup_s": run.warmup_s,
        "mode": run.mode,
        "command": run.command,
        "max_client_lag_ms": run.max_client_lag_ms,
    }


def entry(
    at: float,
    delta: MetricsStore,
    run: RunInfo,
    total: MetricsStore,
    server: ServerFigures | None,
    complete: bool = False,
) -> dict[str, Any]:
    """One line: the measurements since the last entry (`delta`), and the latest run facts and
    self-check figures (read from `total`, which the delta's own have been left out of). The
    `complete` last entry of a run that ended (its reports then failed to be written) carries why
    it ended (`run.stopped`), so that it is judged as the run it was, not as killed."""
    metrics = delta.to_wire()
    for key in ("loop_lag", "client_cpu_s", "client_wall_s"):
        metrics.pop(key, None)
    line: dict[str, Any] = {
        "at": at,
        "metrics": metrics,
        "run": {
            "model": run.model,
            "workload": run.workload.to_json(),
            "problems": list(run.problems),
            "workers": run.workers,
            "users": run.users,
            "cpu_warning": run.cpu_warning,
        },
        "self_check": {
            "loop_lag": total.loop_lag.encode() if total.loop_lag.count else None,
            "client_cpu_s": total.client_cpu_s,
            "client_wall_s": total.client_wall_s,
        },
    }
    if server is not None:
        line["server"] = {k: v for k, v in server.to_json().items() if k != "series"}
    if complete:
        line["complete"] = True
        line["stopped"] = run.stopped.to_json() if run.stopped is not None else None
    return line


def journal_path(path: str | Path) -> Path | None:
    """The journal `path` names: the file itself, or the one in the report directory `path`."""
    p = Path(path)
    if p.is_dir():
        p = p / JOURNAL_NAME
    return p if p.name == JOURNAL_NAME and p.is_file() else None


def load_journal(path: str | Path) -> tuple[MetricsStore, RunInfo, ServerFigures | None]:
    """The measurements, run facts and server figures a journal holds, as of its last complete
    entry; the run is `run.stopped` killed at that entry's time."""
    p = Path(path)
    try:
        lines = p.read_text().splitlines()
    except OSError as e:
        raise JournalError(f"{p}: cannot read the journal: {e.strerror or e}") from None
    rows = []
    for n, text in enumerate(lines, 1):
        try:
            rows.append(json.loads(text))
        except ValueError:
            if n < len(lines):  # only the last line may be cut off by the kill
                raise JournalError(f"{p}:{n}: not a journal line (not JSON)") from None
    if not rows or not isinstance(rows[0], dict) or rows[0].get("slogate_journal") != FORMAT:
        raise JournalError(f"{p}: not a slogate journal (its first line has no 'slogate_journal': {FORMAT})")
    head, entries = rows[0], rows[1:]
    store = MetricsStore(head.get("interval_s") or 0.0)
    facts: dict[str, Any] = {}
    self_check: dict[str, Any] = {}
    server = None
    try:
        for row in entries:
            store.merge(MetricsStore.from_wire(row["metrics"]))
            facts, self_check = row.get("run") or facts, row.get("self_check") or self_check
            server = ServerFigures.from_json(row["server"]) if row.get("server") else server
    except (KeyError, TypeError, ValueError) as e:
        raise JournalError(f"{p}: a journal entry is malformed ({e})") from None
    if self_check.get("loop_lag"):
        store.loop_lag = LatencyHistogram.decode(self_check["loop_lag"])
    store.client_cpu_s = self_check.get("client_cpu_s", 0.0)
    store.client_wall_s = self_check.get("client_wall_s", 0.0)
    return store, _run_info(head, entries, facts), server


def _run_info(head: dict[str, Any], entries: list[dict[str, Any]], facts: dict[str, Any]) -> RunInfo:
    started = head["started_at"]
    last = entries[-1]["at"] if entries else started
    ended = entries[-1] if entries and entries[-1].get("complete") else None  # the run ended; its reports were lost
    stopped = (
        RunStop.from_json(ended.get("stopped"))
        if ended
        else RunStop(KILLED, round(last - started, 3), head.get("planned_s"))
    )
    workers = facts.get("workers") or 1
    return RunInfo(
        source="locust",
        target=head.get("target"),
        model=facts.get("model"),
        workload=WorkloadFacts.from_json(facts.get("workload")),
        started_at=utc_iso(started),
        ended_at=utc_iso(last),
        duration_s=round(last - started, 3),
        warmup_s=head.get("warmup_s") or 0.0,
        mode=head.get("mode") or "local",
        workers=workers,
        workers_complete=workers,  # a killed master's workers are not the missing part
        users=facts.get("users"),
        slo_file=head.get("slo_file"),
        processes=workers,
        cpu_warning=bool(facts.get("cpu_warning")),
        max_client_lag_ms=head.get("max_client_lag_ms") or MAX_LOOP_LAG_P99_MS,
        problems=list(facts.get("problems") or []),
        command=head.get("command"),
        stopped=stopped,
    )
