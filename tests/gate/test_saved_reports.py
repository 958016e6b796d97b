"""Reports written before the facts were typed (`run.workload`, `run.aborted`, `server`, `alerts`
as plain JSON objects) read back key for key, and `slogate judge` gives them the verdict and
figures the code of that time gave (tests/data/reports: the report, its SLO file, and what
`slogate judge` wrote for it then)."""

import json
from pathlib import Path

from slogate.slo.gate.facts import Breach, TraceFacts
from slogate.slo.gate.report import Report
from slogate.slo.gate.server_figures import ServerFigures
from slogate.slo.rejudge import judge_file

from tests.conftest import DATA

DATA = DATA / "reports"
OLD = DATA / "before-typed-facts.json"


def without_timestamps(d: dict) -> dict:
    return {k: v for k, v in d.items() if k != "generated_at"}


# What each class's `metrics` entry gained since: an old report reads back with them empty.
ADDED_METRICS = ("ttftc_ms", "cancelled", "ttfo_ms", "reasoning_ms", "reasoning_tokens", "mean_reasoning_tokens")


ADDED_INTERVAL_METRICS = ("ttfo",)  # time series of metrics added since, empty in an old report


def without_added(report: dict) -> dict:
    for summary in report["metrics"].values():
        for key in ADDED_METRICS:
            added = summary.pop(key)
            assert not isinstance(added, dict) or added["count"] == 0, (key, added)
    intervals = report["measurements"]["intervals"]
    intervals["metrics"] = [m for m in intervals["metrics"] if m not in ADDED_INTERVAL_METRICS]
    return report


def test_an_old_report_reads_back_key_for_key() -> None:
    old = json.loads(OLD.read_text())
    report = Report.from_json(old, str(OLD))
    assert isinstance(report.run.aborted, Breach) and isinstance(report.server, ServerFigures)
    assert report.run.workload.trace == TraceFacts("t.jsonl", 403, 512, 1.0, 0.41, 0.4, True)
    assert report.run.workload.open_loop is not None and report.run.workload.open_loop.rate_per_user == 10.0
    assert report.alerts is not None and report.alerts.notified_for == ("fail",)
    again = without_added(report.to_json())
    assert again["run"].pop("stopped") is None  # the one field added since
    assert again == old


def test_slogate_judge_gives_an_old_report_the_verdict_and_figures_of_its_time(tmp_path: Path) -> None:
    then = json.loads((DATA / "before-typed-facts.judged.json").read_text())
    slo = DATA / "before-typed-facts.slo.yaml"
    code = judge_file(str(OLD), str(slo), str(tmp_path))
    now = without_added(json.loads((tmp_path / "slo-report.json").read_text()))
    assert code == then["exit_code"] == 1
    assert now["run"].pop("stopped") is None
    assert now["run"].pop("slo_file") == str(slo) and then["run"].pop("slo_file").endswith(slo.name)  # where it lies
    # Then, an SLO file without warmup_s was said to ask for a warm-up of 0 s that was not applied (issue 28).
    assert then["run"].pop("notes") == [
        "warmup_s 0 is not applied: a saved result is judged as it was recorded (warm-up excluded then: 3 s)"
    ]
    assert now["run"].pop("notes") == []
    assert without_timestamps(now) == without_timestamps(then)
