"""A report directory that cannot be written: found before any load (exit 2, one line), or at the
end (the verdict printed all the same, exit 4), against the fault server."""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

from slogate.launch.locust_command import locust_argv

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
    extra = ["-u", "1", "-t", "6s", "--model", "ttft_ms=20,tokens=2", "--shared-prefix-tokens", "20"]
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
