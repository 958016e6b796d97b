"""The journal a run leaves in its report directory while it goes (slo/gate/journal.py): a killed
master or single process is judged from it; a run that ends normally removes it. Unit tests need
no server; the end-to-end ones SIGKILL a real run against the fault server, whose log of the
requests it answered is the ground truth."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml
from slogate.launch.fault_server import read_log
from slogate.launch.locust_command import locust_argv
from slogate.launch.server import free_port
from slogate.slo.gate.facts import INTERRUPTED, KILLED, RUN_TIME, RunStop
from slogate.slo.gate.journal import JOURNAL_NAME, JournalError, entry, header, load_journal
from slogate.slo.gate.judge import judge
from slogate.slo.gate.metrics import MetricsStore
from slogate.slo.gate.record import RequestRecord
from slogate.slo.gate.report import RunInfo
from slogate.slo.gate.spec import parse_spec
from slogate.slo.rejudge import judge_file

from tests.conftest import own_master_port, server_log

STARTED = 1_764_662_400.0
SLO = "slos:\n  - {name: p95, metric: ttft, percentile: 95, max_ms: 200}\nmin_samples: 10\n"


def record(i: int, ttft_ms: float, request_class: str = "shared") -> RequestRecord:
    return RequestRecord(
        request_class=request_class,
        started_at=STARTED + i * 0.1,
        ttft_us=int(ttft_ms * 1000),
        e2e_us=int(ttft_ms * 1000) + 5000,
        itl_us=[1000, 2000],
        prompt_tokens=100,
        completion_tokens=3,
        tags=("turn_1",) if i % 2 else (),
    )


def write_journal(path: Path, deltas: list[list[RequestRecord]], run: RunInfo) -> MetricsStore:
    """A journal of one entry per delta, as the writer makes it; the store of every record."""
    total = MetricsStore()
    lines = [header(STARTED, 60.0, 5.0, run)]
    for n, records in enumerate(deltas, 1):
        delta = MetricsStore()
        for rec in records:
            delta.add(rec)
            total.add(rec)
        total.loop_lag.record_us(100 * n)
        lines.append(entry(STARTED + 5.0 * n, delta, run, total, None))
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return total


def test_the_entries_add_up_to_the_run_exactly_and_it_is_judged_as_killed(tmp_path: Path) -> None:
    records = [record(i, 10 + i % 7, "shared" if i % 3 else "unique") for i in range(90)]
    run = RunInfo(target="http://x", model="m", slo_file="slo.yaml", command="locust -t 60s")
    total = write_journal(tmp_path / JOURNAL_NAME, [records[:40], records[40:41], [], records[41:]], run)
    store, read, server = load_journal(tmp_path / JOURNAL_NAME)
    assert store.summary() == total.summary()  # every class and tag, every histogram, every counter
    assert store.intervals.to_wire() == total.intervals.to_wire()
    assert store.loop_lag.count == total.loop_lag.count and server is None
    assert read.stopped == RunStop(KILLED, 20.0, 60.0)
    assert (read.model, read.target, read.command) == ("m", "http://x", "locust -t 60s")
    report = judge(parse_spec(yaml.safe_load(SLO), "slo.yaml"), store, read)
    assert report.verdict == "inconclusive"  # far below its target, but cut short: too early to judge
    assert report.reasons[0].startswith("Killed after 20 s of 60 s (or still running): judged from its journal")


def test_a_run_that_ended_but_lost_its_reports_is_judged_as_the_run_it_was(tmp_path: Path) -> None:
    """Exit 4 (a full disk at the end) keeps the journal; its last entry, `complete`, says how the
    run ended, so `slogate judge` gives the live verdict, not "killed"."""
    records = [record(i, 10 + i % 7) for i in range(60)]
    run = RunInfo(stopped=RunStop(RUN_TIME, 60.2, 60.0))
    total = MetricsStore()
    lines = [header(STARTED, 60.0, 5.0, run)]
    for n, part in enumerate((records[:30], records[30:]), 1):
        delta = MetricsStore()
        for rec in part:
            delta.add(rec)
            total.add(rec)
        lines.append(entry(STARTED + 30.0 * n, delta, run, total, None, complete=n == 2))
    (tmp_path / JOURNAL_NAME).write_text("".join(json.dumps(line) + "\n" for line in lines))
    store, read, _ = load_journal(tmp_path / JOURNAL_NAME)
    assert read.stopped == RunStop(RUN_TIME, 60.2, 60.0) and store.get("all").requests == 60
    assert judge(parse_spec(yaml.safe_load(SLO), "slo.yaml"), store, read).verdict == "pass"


def test_a_line_cut_off_by_the_kill_is_skipped_and_a_broken_one_before_it_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / JOURNAL_NAME
    write_journal(path, [[record(i, 10) for i in range(20)], [record(i, 10) for i in range(20, 30)]], RunInfo())
    whole = path.read_text()
    path.write_text(whole[: len(whole) - 40])  # the last entry half written
    store, run, _ = load_journal(path)
    assert store.get("all").requests == 20 and run.stopped.after_s == 5.0
    lines = whole.splitlines()
    path.write_text("\n".join([lines[0], lines[1][:30], lines[2]]) + "\n")
    with pytest.raises(JournalError, match=r":2: not a journal line"):
        load_journal(path)
    path.write_text('{"schema": "something else"}\n')
    with pytest.raises(JournalError, match="not a slogate journal"):
        load_journal(path)


def test_slogate_judge_takes_a_report_directory_and_prefers_its_journal(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    write_journal(run_dir / JOURNAL_NAME, [[record(i, 900) for i in range(40)]], RunInfo(slo_file="slo.yaml"))
    (tmp_path / "slo.yaml").write_text(SLO)
    code = judge_file(str(run_dir), str(tmp_path / "slo.yaml"), str(tmp_path / "out"))
    report = json.loads((tmp_path / "out" / "slo-report.json").read_text())
    assert code == 1 and report["verdict"] == "fail"  # 40 samples at 900 ms: a failure certain beyond noise
    assert report["run"]["stopped"]["reason"] == KILLED
    assert report["reasons"][0].startswith("Killed after 5 s of 60 s")
    assert report["metrics"]["all"]["requests"] == 40


def gated_run(url: str, tmp_path: Path, *extra: str) -> tuple[list[str], Path]:
    """The Locust command of a 60 s run gated on `SLO` against the fault server, and its report directory."""
    (tmp_path / "slo.yaml").write_text(SLO)
    report_dir = tmp_path / "report"
    extra = ("-u", "2", "-r", "2", "-t", "60s", "--shared-prefix-tokens", "20", *extra, *own_master_port(extra))
    return locust_argv(url, slo_file=tmp_path / "slo.yaml", report_dir=report_dir, extra=list(extra)), report_dir


def journal_lines(report_dir: Path) -> list[str]:
    """The journal's lines, none before the run writes it or once it has ended and removed it."""
    try:
        return (report_dir / JOURNAL_NAME).read_text().splitlines()
    except FileNotFoundError:
        return []


def journal_entries(report_dir: Path) -> list[dict]:
    return [json.loads(x) for x in journal_lines(report_dir)[1:-1]]  # the last may be half written


def journal_span_s(report_dir: Path) -> float:
    """Seconds from the journal's header to its last complete entry (0 before there is one)."""
    lines = journal_lines(report_dir)
    if len(lines) < 3:
        return 0.0
    return json.loads(lines[-2])["at"] - json.loads(lines[0])["started_at"]


@pytest.mark.parametrize("processes", [1, 2], ids=["single-process", "master-and-two-workers"])
def test_a_killed_run_leaves_a_journal_that_slogate_judge_judges(own_fault_server, tmp_path: Path, processes) -> None:
    """SIGKILL about 10 s into a 60 s run: the directory holds a journal with every request answered
    before its last entry (a master's workers report every 3 s: those before that, less 3 s)."""
    url, answered = own_fault_server
    workers = ["--processes", str(processes)] if processes > 1 else []
    argv, report_dir = gated_run(
        url, tmp_path, "--model", "ttft_ms=20,tokens=2,itl_ms=5", "--slo-interval-s", "2", *workers
    )
    output = tmp_path / "locust.log"
    with output.open("wb") as out:
        proc = subprocess.Popen(argv, cwd=tmp_path, stdout=out, stderr=out, start_new_session=True)
    try:
        while proc.poll() is None and journal_span_s(report_dir) < 8:
            time.sleep(0.2)  # polling the journal: the kill comes once it covers 8 s (about 10 s into the run)
        assert proc.poll() is None, (
            f"the run ended before the kill (exit {proc.returncode}): {output.read_text()[-3000:]}"
        )
        os.kill(proc.pid, signal.SIGKILL)  # the master (or the only process), as the OOM killer would
        proc.wait(timeout=10)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # orphaned workers
    entries = journal_entries(report_dir)
    assert len(entries) >= 3 and not (report_dir / "slo-report.json").exists()
    last_at = entries[-1]["at"]
    lag_s = 0.0 if processes == 1 else 3.0  # a worker's report interval
    done_before = sum(1 for r in read_log(answered) if r["arrived"] + 1.0 < last_at - lag_s)  # ended well before
    code = judge_file(str(report_dir), str(tmp_path / "slo.yaml"), str(tmp_path / "judged"))
    report = json.loads((tmp_path / "judged" / "slo-report.json").read_text())
    assert code == 3 and report["verdict"] == "inconclusive", report["reasons"]
    assert report["run"]["stopped"]["reason"] == KILLED and 7 < report["run"]["stopped"]["after_s"] < 14
    assert report["metrics"]["all"]["requests"] >= done_before > 50
    assert report["run"]["workers"] == processes and report["run"]["model"]


@pytest.mark.parametrize(
    ("signum", "to_group"),
    [(signal.SIGTERM, False), (signal.SIGTERM, True), (signal.SIGINT, True)],
    ids=["sigterm-to-the-master", "sigterm-to-the-process-group", "ctrl-c-to-the-process-group"],
)
def test_a_run_that_ends_removes_its_journal_and_a_signal_waits_for_the_workers(
    own_fault_server, tmp_path, signum: signal.Signals, to_group: bool
) -> None:
    """A signal some 6 s into a 60 s distributed run: exit 3, the interruption in the report and the
    summary, and every request the server answered counted (the workers' last samples included);
    sent to the master, or to its whole process group (a terminal's Ctrl-C, `slogate run`), where
    each worker quits on it too."""
    url, answered = own_fault_server
    argv, report_dir = gated_run(url, tmp_path, "--model", "ttft_ms=20,tokens=2,itl_ms=5", "--processes", "2",
                                 "--stop-timeout", "5", "--slo-interval-s", "2")  # fmt: skip
    proc = subprocess.Popen(
        argv, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        while proc.poll() is None and journal_span_s(report_dir) < 4:
            time.sleep(0.2)  # polling the journal: the signal comes about 6 s in
        if to_group:
            os.killpg(proc.pid, signum)
        else:
            proc.send_signal(signum)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    report = json.loads((report_dir / "slo-report.json").read_text())
    assert proc.returncode == 3 and report["verdict"] == "inconclusive", stderr[-2000:]
    assert report["run"]["stopped"]["reason"] == INTERRUPTED and report["run"]["stopped"]["signal"] == signum.name
    after_s = report["run"]["stopped"]["after_s"]
    assert 4 <= after_s < 30 and f"Interrupted by {signum.name} after {after_s:.0f} s" in stdout, stdout[-2000:]
    assert "Traceback" not in stderr, stderr[-3000:]  # no greenlet killed by the signal
    assert not (report_dir / JOURNAL_NAME).exists()
    total = report["metrics"]["all"]
    if not to_group:
        # The master stopped its workers and waited for them (each flushes its last samples as it stops)
        # before Locust's own quit, which gives them 0.5 s: a loaded machine's workers missed that once.
        # (Signalled too, a worker may stop itself first and quit without this line: its samples went first.)
        assert stderr.count("reported that it has stopped") == 2, stderr[-3000:]
    assert report["run"]["workers_complete"] == 2
    sent = total["requests"] + total["unfinished"]
    assert sent == len(server_log(answered, sent)) > 100


def test_a_second_sigterm_exits_at_once_and_leaves_the_journal(own_fault_server, tmp_path: Path) -> None:
    """The first SIGTERM waits for the requests in flight (--stop-timeout 30, each takes 3 s); the
    second exits 143 at once, after appending what was measured since the journal's last entry."""
    url, answered = own_fault_server
    argv, report_dir = gated_run(
        url, tmp_path, "--model", "ttft_ms=2000,tokens=2,itl_ms=1000", "--stop-timeout", "30", "--slo-interval-s", "1"
    )
    stderr = tmp_path / "stderr.txt"
    with stderr.open("w") as err:
        proc = subprocess.Popen(argv, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=err)
    try:
        while proc.poll() is None and len(read_log(answered)) < 2:
            time.sleep(0.1)  # polling the server's log: the first requests (3 s each) ended, the next are in flight
        proc.send_signal(signal.SIGTERM)
        while proc.poll() is None and "the run is interrupted" not in stderr.read_text():
            time.sleep(0.1)
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=10)
    finally:
        proc.kill()
    assert proc.returncode == 143
    assert f"second SIGTERM: exiting now; `slogate judge {report_dir}` judges the run's journal" in stderr.read_text()
    assert not (report_dir / "slo-report.json").exists()
    code = judge_file(str(report_dir), str(tmp_path / "slo.yaml"), str(tmp_path / "judged"))
    report = json.loads((tmp_path / "judged" / "slo-report.json").read_text())
    assert code == 3 and report["run"]["stopped"]["reason"] == KILLED
    assert report["metrics"]["all"]["requests"] >= 2


# A Ctrl-C landing in a greenlet of its own (a user's, as in a busy run): what reaches the main
# greenlet, where Locust waits for the run, and whether anything else saw it.
SIGINT_IN_A_GREENLET = """
import locust, os, signal, sys, time, types
import gevent
from slogate.slo.plugin.signals import route_workers_ctrl_c, watch_signals
from slogate.slo.plugin.run_state import Run
gate = types.SimpleNamespace(run=Run(started_at=time.time()))
if sys.argv[1] == "judged":
    gate.run.mark_judged()
if sys.argv[1] == "worker":
    route_workers_ctrl_c(locust.events)  # a worker records nothing: its master does
else:
    watch_signals(gate)
def busy():
    os.kill(os.getpid(), signal.SIGINT)
    deadline = time.monotonic() + 1
    while time.monotonic() < deadline:  # the handler runs in this greenlet
        pass
    return "finished"
user = gevent.spawn(busy)
try:
    user.join()
    gevent.sleep(0.5)
    print("main not interrupted;", user.value, gate.run.signal)
except KeyboardInterrupt:
    print("main interrupted;", user.value, gate.run.signal)
"""


@pytest.mark.parametrize(
    ("state", "expected"),
    [
        ("running", "main interrupted; finished SIGINT"),
        ("judged", "main not interrupted; finished None"),
        ("worker", "main interrupted; finished None"),
    ],
)
def test_ctrl_c_in_a_users_greenlet_reaches_the_main_greenlet_only_while_the_run_goes(state, expected) -> None:
    """While the run goes, the KeyboardInterrupt Locust shuts down on reaches the main greenlet and
    no other (no traceback); while the report of an ended run is written, nothing is interrupted. A
    worker (its terminal's Ctrl-C reaches the whole process group) alike: no user killed by it."""
    proc = subprocess.run(
        [sys.executable, "-c", SIGINT_IN_A_GREENLET, state], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0 and proc.stdout.strip() == expected, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr and "KeyboardInterrupt" not in proc.stderr, proc.stderr
    if state == "judged":
        assert "the run has ended; writing its report (a second SIGINT exits now)" in proc.stderr


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_slogate_run_passes_a_signal_on_and_waits_for_the_report(own_fault_server, tmp_path: Path, signum) -> None:
    """`slogate run` is what users and the GitHub Action call: a signal to it reaches Locust once,
    and it waits while Locust stops the load and writes the inconclusive report."""
    url, answered = own_fault_server
    # A target no figure can fail: the 30 busy users' own client delay on a loaded machine (TTFT 240 ms
    # of a 1 ms server, seen in CI) would fail a 200 ms p95 beyond noise, and a run cut short keeps that fail.
    (tmp_path / "slo.yaml").write_text(SLO.replace("max_ms: 200", "max_ms: 10000"))
    report_dir = tmp_path / "report"
    argv = [sys.executable, "-m", "slogate.cli", "run", "--host", url, "--slo-file", str(tmp_path / "slo.yaml")]
    # Busy users (1 ms answers): the signal mostly lands while a user's greenlet runs, where a
    # KeyboardInterrupt raised in place would print a traceback before reaching Locust.
    argv += ["--report-dir", str(report_dir), "--", "-u", "30", "-r", "30", "-t", "60s"]
    argv += ["--model", "ttft_ms=1,tokens=2"]
    proc = subprocess.Popen(argv, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        while proc.poll() is None and len(read_log(answered)) < 30:
            time.sleep(0.2)  # polling the server's log: the run is under way, its users busy
        proc.send_signal(signum)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        proc.kill()
    report = json.loads((report_dir / "slo-report.json").read_text())
    assert proc.returncode == 3 and report["verdict"] == "inconclusive", stderr[-2000:]
    assert report["run"]["stopped"]["signal"] == signal.Signals(signum).name
    assert stdout.rstrip().splitlines()[-1] == f"slogate: reports in {report_dir}/" and "Traceback" not in stderr


def test_a_second_signal_says_where_the_runs_figures_are_as_they_are_on_disk(tmp_path: Path) -> None:
    """A journal there: judge it; the reports written and the journal removed: they are there; neither: nothing."""
    from slogate.slo.plugin.run_state import Run
    from slogate.slo.plugin.settings import ReportOptions
    from slogate.slo.plugin.signals import what_is_left

    report_dir = tmp_path / "report"
    report_dir.mkdir()
    gate = SimpleNamespace(reports=ReportOptions(report_dir=str(report_dir)), run=Run())
    assert what_is_left(gate) == "no journal of the run could be written: nothing is left to judge"
    (report_dir / JOURNAL_NAME).write_text("{}\n")
    assert what_is_left(gate) == f"`slogate judge {report_dir}` judges the run's journal"
    (report_dir / JOURNAL_NAME).unlink()
    (report_dir / "slo-report.json").write_text("{}")
    gate.run.mark_judged()
    assert what_is_left(gate) == f"the reports are in {report_dir}/"


def test_a_web_ui_stopped_before_any_run_leaves_the_report_directory_as_it_was(own_fault_server, tmp_path) -> None:
    """SIGTERM to a web UI locust in which no run ever started: nothing to judge, nothing written
    (an earlier run's report stays)."""
    url, _ = own_fault_server
    report_dir = tmp_path / "report"
    report_dir.mkdir()
    (report_dir / "slo-report.json").write_text('{"an": "earlier run"}')
    port = str(free_port())
    argv = locust_argv(
        url, report_dir=report_dir, headless=False, extra=["--web-host", "127.0.0.1", "--web-port", port]
    )
    proc = subprocess.Popen(argv, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 30
        while proc.poll() is None and time.monotonic() < deadline:
            with contextlib.suppress(OSError), urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=1):
                break  # the web UI answers: Locust is up, waiting for a run
            time.sleep(0.1)
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 0 and "Traceback" not in stderr, stderr[-2000:]
    assert sorted(p.name for p in report_dir.iterdir()) == ["slo-report.json"]
    assert (report_dir / "slo-report.json").read_text() == '{"an": "earlier run"}'
