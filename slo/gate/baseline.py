"""Baselines: saved reports that later runs are compared with (`--slo-baseline`).

A baseline is a report (it carries the workload, the model and the measurements), stamped with
where it came from. `slogate baseline save REPORT FILE` makes one.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from slogate.slo.gate.regression import Baseline
from slogate.slo.gate.report import Report, ReportError


class BaselineError(ValueError):
    """A baseline file that cannot be used; str() is one line."""


def _read(path: str | Path) -> tuple[dict[str, Any], Report]:
    p = Path(path)
    try:
        data = json.loads(p.read_text())
    except OSError as e:
        raise BaselineError(f"{p}: cannot read baseline: {e.strerror or e}") from None
    except ValueError:
        raise BaselineError(f"{p}: baseline is not JSON") from None
    try:
        report = Report.from_json(data, str(p))
    except ReportError as e:
        raise BaselineError(str(e)) from None
    if report.measurements.is_empty:
        raise BaselineError(f"{p}: the baseline report has no measurements (was the run empty?)")
    return data, report


def load_baseline(path: str | Path) -> Baseline:
    return _read(path)[1].as_baseline()


def save_baseline(report_path: str | Path, out_path: str | Path) -> Path:
    data, report = _read(report_path)
    if report.verdict == "error":
        raise BaselineError(f"{report_path}: a run that ended in a usage error cannot be a baseline")
    # A baseline compares whole-run distributions; its time series (MBs for an hour) is not needed.
    (data.get("measurements") or {}).pop("intervals", None)
    data["baseline"] = {"saved_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "from": str(report_path)}
    out = Path(out_path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(data, indent=2) + "\n")
    return out
