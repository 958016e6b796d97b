"""A report directory that cannot be written: found before any load (exit 2, one line: a path that
is a file, a full disk), or at the end (the verdict printed all the same, exit 4), against the fault
server; a full disk is a tmpfs of the test's own, filled."""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest
from slogate.launch.locust_command import locust_argv
from slogate.slo.plugin.control import check_report_dir
from slogate.slo.plugin.settings import ReportOptions

SLO = "slos:\n  - {name: p95, metric: ttft, percentile: 95, max_ms: 200}\nmin_samples: 5\n"


def test_a_report_directory_that_cannot_be_made_is_refused_before_any_load(own_fault_server, tmp_path) -> None:
    url, answered = own_fault_server
    (tmp_path / "a-file").write_text("")
    argv = locust_argv(url, report_dir=tmp_path / "a-file" / "report", extra=["-u", "1", "-t", "5s"])
    run = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert run.returncode == 2
    lines = [x for x in run.stderr.splitlines() if x.startswith("slogate: error:")]
    where = tmp_path / "a-file" / "report"
    assert lines == [f"slogate: error: the report directory {where}: cannot write there (Not a directory)"]
    assert not answered.exists() or answered.read_text() == ""  # not one request sent


def test_a_report_directory_lost_during_the_run_still_prints_the_verdict_and_exits_4(
    own_fault_server, tmp_path: Path
) -> None:
    url, _ = own_fault_server
    (tmp_path / "slo.yaml").write_text(SLO)
    report_dir = tmp_path / "report"
    extra = ["-u", "1", "-t", "3s", "--model", "ttft_ms=20,tokens=2", "--shared-prefix-tokens", "20"]
    argv = locust_argv(url, slo_file=tmp_path / "slo.yaml", report_dir=report_dir, extra=extra)
    proc = subprocess.Popen(argv, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 30
        while not (report_dir / "slo-journal.jsonl").exists() and time.monotonic() < deadline:
            time.sleep(0.1)  # polling: the run has started once its journal is there
        shutil.rmtree(report_dir)
        report_dir.write_text("")  # a file where the directory was: nothing can be written there
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 4, stderr[-2000:]
    assert "## slogate: PASS (exit 0)" in stdout  # the verdict, printed all the same
    errors = [x for x in stderr.splitlines() if x.startswith("slogate: error:")]
    assert len(errors) == 1 and f"cannot write the reports to {report_dir}/" in errors[0]
    assert "the verdict was PASS (exit 0)" in errors[0]
    assert report_dir.is_file() and report_dir.read_text() == ""  # nothing half written in its place


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 1 MiB tmpfs of this test's own (root may mount one: the tests and CI run as root)."""
    mount = tmp_path / "disk"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)], capture_output=True, text=True
    )
    if done.returncode != 0:
        pytest.skip(f"a full disk needs a tmpfs of its own, and mount was refused: {done.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def fill(disk: Path) -> None:
    """Write until the disk is full (ENOSPC): what is left is not one block."""
    fd = os.open(disk / f"filler-{time.monotonic_ns()}", os.O_WRONLY | os.O_CREAT)
    try:
        with pytest.raises(OSError) as full:
            while True:
                os.write(fd, bytes(4096))
        assert full.value.errno == errno.ENOSPC
    finally:
        os.close(fd)


def test_a_report_directory_on_a_full_disk_is_refused_before_any_load(own_fault_server, small_disk: Path) -> None:
    url, answered = own_fault_server
    fill(small_disk)
    report_dir = small_disk / "report"
    argv = locust_argv(url, report_dir=report_dir, extra=["-u", "1", "-t", "5s"])
    run = subprocess.run(argv, cwd=small_disk.parent, capture_output=True, text=True, timeout=60)
    assert run.returncode == 2, run.stderr[-2000:]
    lines = [x for x in run.stderr.splitlines() if x.startswith("slogate: error:")]
    assert lines == [f"slogate: error: the report directory {report_dir}: cannot write there (No space left on device)"]
    assert not answered.exists() or answered.read_text() == ""  # not one request sent


def test_a_disk_full_during_the_run_leaves_no_journal_that_is_none(own_fault_server, small_disk: Path) -> None:
    """The journal's next entry fails: the file goes (an empty or cut one would be judged as
    something it is not), and the final line says the journal could not be written."""
    url, _ = own_fault_server
    (small_disk.parent / "slo.yaml").write_text(SLO)
    report_dir = small_disk / "report"
    extra = [
        "-u",
        "1",
        "-t",
        "3s",  # a journal entry at 2 s, after the disk filled
        "--slo-interval-s",
        "1",
        "--model",
        "ttft_ms=20,tokens=2",
        "--shared-prefix-tokens",
        "20",
    ]
    argv = locust_argv(url, slo_file=small_disk.parent / "slo.yaml", report_dir=report_dir, extra=extra)
    proc = subprocess.Popen(argv, cwd=small_disk.parent, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 30
        while not (report_dir / "slo-journal.jsonl").exists() and time.monotonic() < deadline:
            time.sleep(0.1)  # polling: the run has started once its journal is there
        fill(small_disk)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 4, stderr[-2000:]
    assert "## slogate: PASS (exit 0)" in stdout  # the verdict, printed all the same
    errors = [x for x in stderr.splitlines() if x.startswith("slogate: error:")]
    assert len(errors) == 1 and errors[0].endswith("the run's journal could not be written either"), errors
    assert not (report_dir / "slo-journal.jsonl").exists()


def test_a_probe_write_that_fails_refuses_the_directory(tmp_path: Path, monkeypatch, capsys) -> None:
    """In-process: creating a file succeeds, syncing its bytes does not (a full disk, a quota)."""
    report_dir = str(tmp_path / "report")
    gate = SimpleNamespace(
        reports=ReportOptions(report_dir=report_dir),
        is_worker=False,
        environment=SimpleNamespace(host="http://h", parsed_options=SimpleNamespace(slo_report_dir=report_dir)),
    )

    def no_space(fd: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", no_space)
    with pytest.raises(SystemExit) as refused:
        check_report_dir(gate)
    assert refused.value.code == 2
    assert capsys.readouterr().err == (
        f"slogate: error: the report directory {tmp_path / 'report'}: cannot write there (No space left on device)\n"
    )
    monkeypatch.undo()
    check_report_dir(gate)  # room: no exit
