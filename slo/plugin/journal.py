"""Writes the run's journal (format and reader: slo/gate/journal.py) while the run goes: a greenlet
appends the measurements taken in since the last entry, every interval, flushed and fsynced, so
that a killed master loses at most one interval; the load's stop appends the last. The caller
removes it once the run's reports are written (slo/plugin/hooks.py). A journal that cannot be
written in full (a full disk) is removed at once: a file cut short at its first failed write would
be judged as a run killed then, or, empty, not judged at all."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import time
from pathlib import Path
from typing import Any

import gevent
from slogate.slo.gate.intervals import DEFAULT_INTERVAL_S
from slogate.slo.gate.journal import JOURNAL_NAME, entry, header
from slogate.slo.gate.metrics import MetricsStore
from slogate.slo.plugin.gate import Gate

log = logging.getLogger("slogate")


class JournalWriter:
    """One journal file: the header at `open`, then `append`ed lines, each on disk when it returns."""

    def __init__(self, directory: str | Path) -> None:
        self.path = Path(directory) / JOURNAL_NAME
        self._file: Any = None

    def open(self, first_line: dict[str, Any]) -> None:
        """Start the file with `first_line`, without yielding to other greenlets: no record may
        end between the old journal's last delta and this one's first (`start_journal`)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = open(self.path, "w")  # noqa: SIM115 - kept open for the run's appends
        self.append(first_line, block=True)

    def append(self, line: dict[str, Any], block: bool = False) -> None:
        """Write `line` and wait until it is on disk: in a thread of gevent's pool, so that the
        run's other greenlets go on meanwhile, unless `block` (a process about to exit)."""
        self._file.write(json.dumps(line, separators=(",", ":")) + "\n")
        self._file.flush()
        if block:
            os.fsync(self._file.fileno())
        else:
            gevent.get_hub().threadpool.apply(os.fsync, (self._file.fileno(),))

    def close(self) -> None:
        file, self._file = self._file, None
        if file is not None:
            with contextlib.suppress(OSError):  # closing flushes what a failed write left: reported then
                file.close()

    def discard(self) -> None:
        """Close and remove the file (what could not be written in full is no journal)."""
        self.close()
        self.path.unlink(missing_ok=True)


def start_journal(gate: Gate, directory: str | Path) -> None:
    """Open the journal of the run that starts now and append to it every interval (a failure to
    write is one warning: the run and its final reports do not depend on it)."""
    close_journal(gate)
    writer = JournalWriter(directory)
    try:
        writer.open(header(gate.started_at or time.time(), gate.planned_s, journal_interval_s(gate), gate.run_info()))
    except OSError as e:
        writer.discard()
        log.warning("slogate: cannot write the journal %s (%s): a killed run would leave nothing", writer.path, e)
        return
    gate.journal = writer
    _take_pending(gate)
    gate.journal_greenlet = gevent.spawn(_append_every_interval, gate)


MIN_PERIOD_S = 2.0  # a short --slo-interval-s would otherwise fsync several times a second


def journal_interval_s(gate: Gate) -> float:
    """The journal's period: the time series' interval (5 s unless --slo-interval-s says otherwise), 2 s at least."""
    return max(gate.interval_s or DEFAULT_INTERVAL_S, MIN_PERIOD_S)


def flush_journal(gate: Gate, block: bool = False, complete: bool = False) -> None:
    """Append what was measured since the last entry (also, `block`ing, at a second signal just
    before the process exits; `complete`, the judged run's last, with its stop)."""
    writer = gate.journal
    if writer is None:
        return
    delta = _take_pending(gate)
    server = gate.scraper.metrics.summary() if gate.scraper is not None else gate.server
    try:
        writer.append(entry(time.time(), delta, gate.run_info(final=complete), gate.metrics(), server, complete), block)
    except OSError as e:
        log.warning(
            "slogate: cannot append to the journal %s (%s): removed; a killed run would leave nothing", writer.path, e
        )
        if gate.journal is not writer:  # a reset has opened a new one since, at the same path: keep it
            writer.close()
            return
        writer.discard()
        # Not close_journal: called from the periodic greenlet, it would kill that greenlet, so
        # itself, half-way; the greenlet ends by itself at its next look.
        gate.journal = None
        gate.listener.tap = None


def _take_pending(gate: Gate) -> MetricsStore:
    """What was measured since the last entry, and a new store for what comes next: the master
    merges its workers' reports into it (slo/plugin/wire.py), a single process's listener adds
    each record to it as well as to the run's store (`RecordListener.tap`)."""
    taken, gate.pending = gate.pending, MetricsStore(gate.interval_s)
    gate.pending.set_goodput_targets(gate.goodput_targets())
    if not gate.is_master:
        gate.listener.tap = gate.pending
    return taken


def _append_every_interval(gate: Gate) -> None:
    while gate.journal is not None:
        gevent.sleep(journal_interval_s(gate))
        flush_journal(gate)


def pause_journal(gate: Gate) -> None:
    """No more periodic entries (the load has stopped; `flush_journal` still appends)."""
    if gate.journal_greenlet is not None:
        gate.journal_greenlet.kill(block=True)
        gate.journal_greenlet = None


def close_journal(gate: Gate) -> Path | None:
    """Stop the journal; its path, for the caller to remove once the reports hold everything."""
    pause_journal(gate)
    writer, gate.journal = gate.journal, None
    gate.listener.tap = None
    if writer is None:
        return None
    writer.close()
    return writer.path
