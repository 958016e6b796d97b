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
from typing import TYPE_CHECKING, Any

import gevent
from slogate.slo.gate.intervals import DEFAULT_INTERVAL_S
from slogate.slo.gate.journal import JOURNAL_NAME, entry, header
from slogate.slo.gate.metrics import MetricsStore

if TYPE_CHECKING:  # the gate holds the run that holds its journal
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


class Journal:
    """One run's journal (slo/plugin/run_state.py `Run.journal`): its file while it is written, the
    greenlet appending to it, and what was measured since its last entry (`pending`)."""

    def __init__(self) -> None:
        self.writer: JournalWriter | None = None
        self.greenlet: Any = None
        self.pending = MetricsStore()

    def take_in(self, samples: MetricsStore) -> None:
        """A master's worker samples, for the next entry (while the journal is written)."""
        if self.writer is not None:
            self.pending.merge(samples)

    def pause(self) -> None:
        """No more periodic entries (the load has stopped; `flush_journal` still appends)."""
        if self.greenlet is not None:
            self.greenlet.kill(block=True)
            self.greenlet = None

    def close(self) -> Path | None:
        """Stop the journal; its path, for the caller to remove once the reports hold everything."""
        self.pause()
        writer, self.writer = self.writer, None
        if writer is None:
            return None
        writer.close()
        return writer.path


def start_journal(gate: Gate, directory: str | Path) -> None:
    """Open the journal of the run that starts now and append to it every interval (a failure to
    write is one warning: the run and its final reports do not depend on it)."""
    close_journal(gate)
    run = gate.run
    writer = JournalWriter(directory)
    try:
        writer.open(header(run.started_at or time.time(), run.planned_s, journal_interval_s(gate), gate.run_info()))
    except OSError as e:
        writer.discard()
        log.warning("slogate: cannot write the journal %s (%s): a killed run would leave nothing", writer.path, e)
        return
    journal = run.journal
    journal.writer = writer
    _take_pending(gate)
    journal.greenlet = gevent.spawn(_append_every_interval, gate, journal)


MIN_PERIOD_S = 2.0  # a short --slo-interval-s would otherwise fsync several times a second


def journal_interval_s(gate: Gate) -> float:
    """The journal's period: the time series' interval (5 s unless --slo-interval-s says otherwise), 2 s at least."""
    return max(gate.interval_s or DEFAULT_INTERVAL_S, MIN_PERIOD_S)


def flush_journal(gate: Gate, block: bool = False, complete: bool = False) -> None:
    """Append what was measured since the last entry (also, `block`ing, at a second signal just
    before the process exits; `complete`, the judged run's last, with its stop)."""
    run = gate.run
    journal = run.journal
    writer = journal.writer
    if writer is None:
        return
    delta = _take_pending(gate)
    try:
        writer.append(
            entry(time.time(), delta, gate.run_info(final=complete), gate.metrics(), run.server_figures(), complete),
            block,
        )
    except OSError as e:
        log.warning(
            "slogate: cannot append to the journal %s (%s): removed; a killed run would leave nothing", writer.path, e
        )
        if journal.writer is not writer:  # a reset has opened a new one since, at the same path: keep it
            writer.close()
            return
        writer.discard()
        # Not close_journal: called from the periodic greenlet, it would kill that greenlet, so
        # itself, half-way; the greenlet ends by itself at its next look.
        journal.writer = None
        run.listener.tap_into(None)


def _take_pending(gate: Gate) -> MetricsStore:
    """What was measured since the last entry, and a new store for what comes next: the master
    merges its workers' reports into it (slo/plugin/wire.py), a single process's listener adds
    each record to it as well as to the run's store (`RecordListener.tap`)."""
    journal = gate.run.journal
    taken, journal.pending = journal.pending, MetricsStore(gate.interval_s)
    journal.pending.set_goodput_targets(gate.goodput_targets())
    if not gate.is_master:
        gate.run.listener.tap_into(journal.pending)
    return taken


def _append_every_interval(gate: Gate, journal: Journal) -> None:
    """Until the journal is closed, or its run is no longer the gate's."""
    while journal.writer is not None:
        gevent.sleep(journal_interval_s(gate))
        if gate.run.journal is not journal:
            return
        flush_journal(gate)


def pause_journal(gate: Gate) -> None:
    """No more periodic entries (the load has stopped; `flush_journal` still appends)."""
    gate.run.journal.pause()


def close_journal(gate: Gate) -> Path | None:
    """Stop the run's journal; its path, for the caller to remove once the reports hold everything."""
    gate.run.listener.tap_into(None)
    return gate.run.journal.close()
