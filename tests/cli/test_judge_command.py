"""`slogate judge`: saved slogate reports and `vllm bench serve` results through the live gate's
judge, reports and exit codes (in-process; one test runs the installed command)."""

import errno
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from slogate.slo.gate import exitcodes
from slogate.slo.gate.judge import judge
from slogate.slo.gate.metrics import MetricsStore
from slogate.slo.gate.record import RequestRecord
from slogate.slo.gate.report import RunInfo
from slogate.slo.gate.spec import load_spec
from slogate.slo.outputs import render
from slogate.slo.outputs.render import write_reports
from slogate.slo.rejudge import judge_file

from slogate.cli import main
from tests.conftest import DATA

CHAT, COMPLETIONS = DATA / "vllm_bench_chat.json", DATA / "vllm_bench_completions.json"


def slo(tmp_path: Path, body: str, name: str = "slo.yaml") -> str:
    f = tmp_path / name
    f.write_text(body)
    return str(f)


def ttft_slo(tmp_path: Path, max_ms: float, min_samples: int = 10, cls: str = "all") -> str:
    return slo(
        tmp_path,
        f"slos:\n  - {{name: ttft-p95, metric: ttft, percentile: 95, max_ms: {max_ms}, class: {cls}}}\n"
        f"min_samples: {min_samples}\n",
        f"slo-{max_ms}-{min_samples}-{cls}.yaml",
    )


def report_of(out: Path) -> dict:
    return json.loads((out / "slo-report.json").read_text())


@pytest.mark.parametrize(
    ("max_ms", "min_samples", "code", "verdict"),
    [
        (150, 10, exitcodes.PASS, "pass"),
        (20, 10, exitcodes.FAIL, "fail"),
        (150, 50, exitcodes.INCONCLUSIVE, "inconclusive"),
    ],
)
def test_a_vllm_bench_result_passes_fails_or_is_inconclusive(
    tmp_path: Path, max_ms: float, min_samples: int, code: int, verdict: str
) -> None:
    out = tmp_path / "out"
    assert judge_file(str(COMPLETIONS), ttft_slo(tmp_path, max_ms, min_samples), str(out)) == code
    report = report_of(out)
    assert (report["verdict"], report["exit_code"]) == (verdict, code)
    assert report["run"]["source"] == "vllm-bench" and report["run"]["model"] == "ttft_ms=40,tokens=4,itl_ms=5"
    total = report["metrics"]["all"]
    assert (total["requests"], total["failures"]) == (20, 6) and total["ttft_ms"]["count"] == 14
    assert (out / "slo-junit.xml").exists() and f"slogate: {verdict.upper()} (exit {code})" in (
        out / "slo-summary.md"
    ).read_text()


def test_the_chat_client_ttft_caveat_is_in_the_report(tmp_path: Path) -> None:
    out = tmp_path / "out"
    judge_file(str(CHAT), ttft_slo(tmp_path, 150), str(out))
    notes = report_of(out)["run"]["notes"]
    assert any("role-only" in n for n in notes) and "role-only" in (out / "slo-summary.md").read_text()
    judge_file(str(COMPLETIONS), ttft_slo(tmp_path, 150), str(tmp_path / "c"))
    assert not any("role-only" in n for n in report_of(tmp_path / "c")["run"]["notes"])


def test_an_slo_on_a_class_vllm_bench_cannot_have_is_a_usage_error(tmp_path: Path, capsys) -> None:
    out = tmp_path / "out"
    assert judge_file(str(COMPLETIONS), ttft_slo(tmp_path, 150, cls="shared"), str(out)) == exitcodes.USAGE
    err = capsys.readouterr().err.strip().splitlines()
    assert (
        len(err) == 1 and "class 'shared' is not measured by this result; classes available: all, vllm_bench" in err[0]
    )
    assert report_of(out)["verdict"] == "error"


def test_the_class_a_vllm_bench_result_is_shown_under_is_one_an_slo_may_name(tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert judge_file(str(COMPLETIONS), ttft_slo(tmp_path, 100_000, cls="vllm_bench"), str(out)) == exitcodes.PASS
    report = report_of(out)
    assert "vllm_bench" in report["metrics"] and report["slos"][0]["class"] == "vllm_bench"


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ("not json", "not JSON"),
        ('{"hello": 1}', "neither a slogate report"),
        ('{"ttfts": [0.1], "latencies": [0.2]}', "--save-detailed"),
        ('{"schema": "slogate.report/2", "verdict": "pass"}', "malformed slogate report"),
    ],
)
def test_anything_else_is_one_line_and_exit_2(tmp_path: Path, capsys, content: str, expected: str) -> None:
    bad = tmp_path / "result.json"
    bad.write_text(content)
    out = tmp_path / "out"
    assert judge_file(str(bad), ttft_slo(tmp_path, 150), str(out)) == exitcodes.USAGE
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"slogate: error: {bad}: ") and expected in err[0]
    assert report_of(out)["exit_code"] == exitcodes.USAGE


def live_report(tmp_path: Path, spec_path: str) -> Path:
    store = MetricsStore()
    for i in range(60):
        ttft = 80_000 + 1_000 * (i % 30)
        store.add(RequestRecord("shared" if i % 2 else "unique", 10.0 + i, ttft + 20_000, ttft, [5_000, 5_000], 100, 3))
    store.add(RequestRecord("unique", 99.0, 1_000, error_kind="http_429"))
    run = RunInfo(target="http://h:1", model="m", workload={"seed": 0}, warmup_s=0.0, slo_file=spec_path)
    out = tmp_path / "live"
    write_reports(judge(load_spec(spec_path), store, run), out)
    return out / "slo-report.json"


def test_a_saved_report_with_its_own_slo_file_gives_the_live_verdict_and_figures(tmp_path: Path) -> None:
    spec = slo(
        tmp_path,
        "slos:\n  - {metric: ttft, percentile: 99, max_ms: 200, class: unique}\n"
        "  - {metric: error_rate, max: 0.1}\nmin_samples: 20\n",
    )
    saved = live_report(tmp_path, spec)
    out = tmp_path / "again"
    assert judge_file(str(saved), spec, str(out)) == exitcodes.PASS
    live, again = json.loads(saved.read_text()), report_of(out)
    for key in ("verdict", "exit_code", "reasons", "slos", "metrics", "run", "measurements"):
        assert again[key] == live[key], key
    stricter = ttft_slo(tmp_path, 50, cls="unique")
    assert judge_file(str(saved), stricter, str(tmp_path / "strict")) == exitcodes.FAIL


def test_a_saved_report_against_a_baseline(tmp_path: Path) -> None:
    spec = slo(
        tmp_path,
        "slos:\n  - {metric: ttft, percentile: 95, max_ms: 1000}\nmin_samples: 20\n"
        "regressions:\n  - {metric: ttft, percentile: 50, max_increase_pct: 10}\n",
    )
    saved = live_report(tmp_path, spec)
    out = tmp_path / "same"
    assert judge_file(str(saved), spec, str(out), baseline=str(saved)) == exitcodes.PASS
    assert report_of(out)["regression"]["comparisons"][0]["verdict"] == "ok"
    bench = judge_file(str(COMPLETIONS), spec, str(tmp_path / "other"), baseline=str(saved), min_samples=5)
    assert bench == exitcodes.USAGE and "baseline refused" in report_of(tmp_path / "other")["reasons"][-1]


def test_the_installed_command(tmp_path: Path) -> None:
    out, exported = tmp_path / "out", tmp_path / "again.json"
    proc = subprocess.run(
        [sys.executable, "-m", "slogate.cli", "judge", str(COMPLETIONS), "--slo-file", ttft_slo(tmp_path, 20),
         "--slo-report-dir", str(out), "--export", "vllm-bench", str(exported)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == exitcodes.FAIL, proc.stderr
    assert "slogate: FAIL (exit 1)" in proc.stdout and report_of(out)["verdict"] == "fail"
    source = json.loads(COMPLETIONS.read_text())
    assert json.loads(exported.read_text())["completed"] == source["completed"]


def test_an_unknown_export_format_is_a_usage_error_with_a_report(tmp_path: Path, capsys) -> None:
    out = tmp_path / "out"
    code = main(["judge", str(COMPLETIONS), "--slo-file", ttft_slo(tmp_path, 20), "--slo-report-dir", str(out),
                 "--export", "csv", str(tmp_path / "x.csv")])  # fmt: skip
    assert code == exitcodes.USAGE
    assert "unknown format 'csv'" in capsys.readouterr().err
    assert report_of(out)["exit_code"] == exitcodes.USAGE


def test_a_goodput_objective_is_judged_on_a_vllm_bench_result(tmp_path: Path) -> None:
    # vllm bench's file has per-request timings: the SLO file's goodput limits count its good
    # requests as they are read, as a live run counts them.
    data = json.loads(CHAT.read_text())
    ok = [not err and e2e > 0 for err, e2e in zip(data["errors"], data["latencies"], strict=True)]
    good = sum(o and ttft * 1000 <= 3.0 for o, ttft in zip(ok, data["ttfts"], strict=True))
    assert 0 < good < sum(ok)  # the limit splits the successes
    fraction = good / len(ok)

    def goodput_slo(floor: float) -> str:
        body = f"slos:\n  - {{name: good, metric: goodput, min: {floor}, ttft_ms: 3}}\nmin_samples: 10\n"
        return slo(tmp_path, body, f"goodput-{floor}.yaml")

    out = tmp_path / "pass"
    assert judge_file(str(CHAT), goodput_slo(round(fraction - 0.05, 3)), str(out)) == exitcodes.PASS
    report = report_of(out)
    assert report["slos"][0]["observed"] == pytest.approx(fraction)
    assert report["goodput"]["classes"]["all"]["good"] == good
    assert report["goodput"]["targets_ms"] == {"all": {"ttft": 3.0}}
    assert judge_file(str(CHAT), goodput_slo(round(fraction + 0.05, 3)), str(tmp_path / "fail")) == exitcodes.FAIL


def test_reports_that_cannot_be_written_leave_the_verdict_printed_and_exit_4(tmp_path: Path, capsys) -> None:
    blocked = tmp_path / "a-file"  # --report-dir names a file: no directory can be made there
    blocked.write_text("")
    code = main(["judge", str(COMPLETIONS), "--slo-file", ttft_slo(tmp_path, 20), "--report-dir", str(blocked)])
    assert code == exitcodes.SETUP_FAILED
    captured = capsys.readouterr()
    assert "## slogate: FAIL (exit 1)" in captured.out and "| ttft-p95 |" in captured.out
    err = captured.err.strip().splitlines()
    assert len(err) == 1, err
    assert err[0].startswith(f"slogate: error: cannot write the reports to {blocked}/ (")
    assert err[0].endswith("the verdict was FAIL (exit 1)")


def test_a_full_disk_while_the_reports_are_written_is_exit_4_with_the_verdict(
    tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_space(path: object, text: str) -> Path:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))

    monkeypatch.setattr(render, "write_atomically", no_space)
    out = tmp_path / "out"
    assert judge_file(str(COMPLETIONS), ttft_slo(tmp_path, 150), str(out)) == exitcodes.SETUP_FAILED
    captured = capsys.readouterr()
    assert "## slogate: PASS (exit 0)" in captured.out
    assert captured.err == (
        f"slogate: error: cannot write the reports to {out}/ (No space left on device); the verdict was PASS (exit 0)\n"
    )


def test_a_usage_error_with_an_unwritable_report_dir_is_still_one_line_and_exit_2(tmp_path: Path, capsys) -> None:
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    assert judge_file(str(COMPLETIONS), ttft_slo(tmp_path, 150, cls="shared"), str(blocked)) == exitcodes.USAGE
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "class 'shared' is not measured" in err[0]


def test_an_export_that_cannot_be_written_is_one_warning_and_the_verdict_stands(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    out = tmp_path / "out"
    with caplog.at_level("WARNING", logger="slogate"):
        code = judge_file(str(COMPLETIONS), ttft_slo(tmp_path, 150), str(out), exports=[("vllm-bench", f"{blocked}/x")])
    assert code == exitcodes.PASS and report_of(out)["verdict"] == "pass"
    assert [r.getMessage() for r in caplog.records] == [f"slogate: --export vllm-bench {blocked}/x failed: File exists"]


def test_a_saved_report_is_judged_without_a_warm_up_note_when_no_warm_up_is_asked_for(tmp_path: Path) -> None:
    spec = slo(tmp_path, "slos:\n  - {metric: ttft, percentile: 95, max_ms: 1000}\nmin_samples: 20\n")
    saved = tmp_path / "saved.json"
    report = json.loads(live_report(tmp_path, spec).read_text())
    report["run"]["warmup_s"] = 3.0  # the run excluded a warm-up; the SLO file says nothing of one
    saved.write_text(json.dumps(report))
    judge_file(str(saved), spec, str(tmp_path / "none"))
    assert report_of(tmp_path / "none")["run"]["notes"] == []
    judge_file(str(saved), spec, str(tmp_path / "asked"), warmup_s=5)
    assert report_of(tmp_path / "asked")["run"]["notes"] == [
        "warmup_s 5 is not applied: a saved result is judged as it was recorded (warm-up excluded then: 3 s)"
    ]
    judge_file(str(saved), spec, str(tmp_path / "same"), warmup_s=3)
    assert report_of(tmp_path / "same")["run"]["notes"] == []


def test_a_bad_option_with_an_unwritable_report_dir_is_one_line_and_exit_2(tmp_path: Path, capsys) -> None:
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    code = main(["judge", str(COMPLETIONS), "--slo-file", ttft_slo(tmp_path, 20), "--report-dir", str(blocked),
                 "--export", "csv", str(tmp_path / "x.csv")])  # fmt: skip
    assert code == exitcodes.USAGE
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "unknown format 'csv'" in err[0]
