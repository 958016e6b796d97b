"""The gate's configuration and one run's state apart (slo/plugin/gate.py, slo/plugin/run_state.py):
each run starts from a new `Run` (a web-UI rerun inherits nothing of the run before), the run before
is dropped with its greenlets and journal, gates live and die with their environments, and no module
writes into the gate's or a run's attributes."""

from __future__ import annotations

import gc
import re
import weakref
from argparse import Namespace
from pathlib import Path
from types import SimpleNamespace

import gevent
from slogate.slo.gate.facts import INTERRUPTED, Breach, WorkloadFacts
from slogate.slo.gate.journal import JOURNAL_NAME
from slogate.slo.gate.record import RequestRecord
from slogate.slo.plugin.gate import Gate, every_gate, gate_for
from slogate.slo.plugin.journal import start_journal

ROOT = Path(__file__).resolve().parents[2]


def configured_gate(tmp_path: Path) -> Gate:
    opts = Namespace(slo_report_dir=str(tmp_path / "report"), slo_warmup_s=0.0, run_time="30")
    gate = Gate(SimpleNamespace(parsed_options=opts, runner=None, host="http://h:1"))
    gate.configure(with_baseline=True)
    return gate


def record(started_at: float) -> dict:
    return {"slogate_record": RequestRecord("shared", started_at, 301_000, 300_000)}


def test_a_rerun_starts_from_a_new_run_and_the_one_before_is_dropped(tmp_path: Path) -> None:
    """Everything one run learnt (its samples, workload, problems, its stop, its signal, its end)
    stays with it: the next run reads none of it, and the first run's greenlets and journal end."""
    gate = configured_gate(tmp_path)
    first = gate.start_run()
    assert first.planned_s == 30.0 and first.started_at is not None
    gate.on_request(context=record(first.started_at + 1))
    first.note_workload("m", WorkloadFacts.coerce({"seed": 1}))
    first.add_problem("target unreachable")
    first.abort(Breach("ttft", "p95 ttft[all] <= 1 ms", 0.0, 1.0, 30.0, 10, 5.0, 2.0))
    first.interrupt("SIGTERM")
    first.mark_judged()
    first.leave_last_words("FAIL")
    start_journal(gate, tmp_path / "report")
    watcher = gevent.spawn(gevent.sleep, 60)
    first.watch(watcher)
    assert gate.snapshot().measurements.get("all").requests == 1 and first.journal.writer is not None

    second = gate.start_run()
    assert second is gate.run and second is not first
    assert watcher.dead and first.journal.writer is None and (tmp_path / "report" / JOURNAL_NAME).exists()
    report = gate.snapshot(final=True)
    assert report.measurements.get("all").requests == 0 and report.run.model is None and report.run.problems == []
    assert report.run.aborted is None and report.run.stopped is None and report.verdict.exit_code != 1
    assert not second.judged and second.take_last_words() == "" and second.signal is None and second.ended_at is None
    gate.on_request(context=record(second.started_at + 1))  # the listener is the new run's
    assert gate.metrics().get("all").requests == 1 and first.listener.store.get("all").requests == 1


def test_an_interrupted_run_says_so_and_a_stop_by_hand_comes_too_late_for_it(tmp_path: Path) -> None:
    gate = configured_gate(tmp_path)
    assert gate.run.why_stopped(0.0, final=True) is None  # no run yet: nothing to say
    run = gate.start_run()
    run.interrupt("SIGINT")
    ended = run.ended_at
    gate.note_stop_by_hand()
    stop = gate.run_info(final=True).stopped
    assert stop is not None and (stop.reason, stop.signal) == (INTERRUPTED, "SIGINT") and run.ended_at == ended


def test_a_gate_lives_and_dies_with_its_environment() -> None:
    """Kept on the environment itself, not in a table by id(): a collected environment's gate is no
    longer among the process's gates, so a later environment at the same address cannot inherit it."""

    class Env:
        runner = None
        host = ""

    env = Env()
    gate = gate_for(env)
    assert gate_for(env) is gate and gate in every_gate() and gate.environment is env
    gone = weakref.ref(gate)
    del env, gate
    gc.collect()  # (other tests' gates may go too: only this one is checked)
    assert gone() is None  # collected with its environment: no table kept it (every_gate is a WeakSet)


# `gate.x = ...` / `run.x = ...` (also `+=`), wherever the receiver is not the owner's own `self`.
FOREIGN_WRITE = re.compile(r"\b(?:gate|run|first|second)\.[a-z_]+\s*(?:[-+|]?=)(?!=)")


def test_no_module_writes_into_the_gate_or_a_run() -> None:
    """They change through their own methods (`run.mark_flushed`, `run.interrupt`...), never by another
    module setting their attributes (hooks.py once reset 15 of them by hand for a web-UI rerun)."""
    writes = [
        f"{path.relative_to(ROOT)}:{n}: {line.strip()}"
        for path in sorted((ROOT / "slo" / "plugin").glob("*.py"))
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if FOREIGN_WRITE.search(line)
    ]
    assert writes == []
