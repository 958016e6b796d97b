"""`slogate judge`: a saved result judged with the live gate's judge, reports and alerts (the
saved-result counterpart of the plugin's end of run: load -> judge -> publish).

Every bad input is one line and exit 2, and a report is written all the same (where it can be);
reports that cannot be written are one line and exit 4, after the verdict.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Sequence
from dataclasses import replace

from slogate.slo.gate import exitcodes
from slogate.slo.gate.baseline import BaselineError, load_baseline
from slogate.slo.gate.judge import UnknownClass, check_classes, judge, usage_error
from slogate.slo.gate.saved import VLLM_BENCH, ResultError, load_result
from slogate.slo.gate.spec import SloSpecError, goodput_targets, load_spec, with_overrides
from slogate.slo.outputs.publish import AlertSettings, publish, write_failed
from slogate.slo.outputs.render import write_reports


def judge_file(
    result: str,
    slo_file: str,
    report_dir: str,
    *,
    baseline: str | None = None,
    alerts: AlertSettings | None = None,
    min_samples: int | None = None,
    warmup_s: float | None = None,
    exports: Sequence[tuple[str, str]] = (),
) -> int:
    """Judge `result` against `slo_file` (and `baseline`), alert, write the reports; the exit code."""
    try:
        spec = with_overrides(load_spec(slo_file), min_samples=min_samples, warmup_s=warmup_s)
        saved = load_result(result, goodput_targets(spec))
        check_classes(spec, saved.classes, "this result")
        base = load_baseline(baseline) if baseline else None
    except (ResultError, SloSpecError, UnknownClass, BaselineError) as e:
        return refuse(str(e), report_dir)
    run = replace(saved.run, slo_file=spec.source, notes=list(saved.run.notes))
    recorded_warmup = saved.run.warmup_s if saved.run.source != VLLM_BENCH else 0.0
    # A warm-up asked for (the SLO file's warmup_s, or --slo-warmup-s) other than the recorded one.
    # A file without warmup_s asks for none (0, as an explicit `warmup_s: 0` does: the two read alike).
    asked = (warmup_s is not None and warmup_s >= 0) or spec.warmup_s > 0
    if asked and spec.warmup_s != recorded_warmup:
        run.notes.append(
            f"warmup_s {spec.warmup_s:g} is not applied: a saved result is judged as it was recorded "
            f"(warm-up excluded then: {recorded_warmup:g} s)"
        )
    report = judge(spec, saved.measurements, run, saved.server, base)
    try:
        publish(report, report_dir, alerts or AlertSettings(), exports)
    except OSError as e:
        return write_failed(report, report_dir, e)
    return report.exit_code


def refuse(message: str, report_dir: str) -> int:
    """A bad input: one line on stderr, an error report where it can be written, exit 2 (the usage
    error is what the user has to fix first, whether or not the report directory is writable)."""
    sys.stderr.write(f"slogate: error: {message}\n")
    with contextlib.suppress(OSError):
        write_reports(usage_error(message), report_dir)
    return exitcodes.USAGE
