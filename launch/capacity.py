"""`slogate capacity`: the knee at the SLO (launch/knee.py's search), or a test at `--min-capacity`
(launch/capacity_at.py), with a Locust run per step, against a URL (`search_target`) or against
each profile launched in turn (`search_profiles`).

Failing steps are cheap: far above the knee the bounds fail a step on its first samples (with
`--no-early-stop`, `--slo-abort-on-fail` cuts them). Each search's files
(launch/capacity_report.py) are written as soon as it ends, so a later profile's failure loses
nothing; a profile that does not start or whose search fails is a row of the summary, and the
others run.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from slogate.launch import runner
from slogate.launch.capacity_at import judge_at_rate
from slogate.launch.capacity_report import PNG_NAME, step_line, write_capacity, write_error, write_summary
from slogate.launch.knee import (
    CapacityInputError,
    CapacityResult,
    RunStep,
    SearchSettings,
    search,
)
from slogate.launch.knee_batch import AUTO, STOP_WHEN_DECIDED
from slogate.launch.knee_interval import StepJudge, early_pass_note
from slogate.launch.knee_outcome import ProfileOutcome, overall_exit_code
from slogate.launch.knee_step import Step
from slogate.launch.launcher import LAUNCH_ERRORS
from slogate.launch.locust_command import ONE_PROCESS, Workers
from slogate.launch.profile import Profile
from slogate.slo.gate import exitcodes
from slogate.slo.gate.early_stop import DEFAULT_CONFIDENCE
from slogate.slo.gate.report import Report
from slogate.slo.gate.spec import SloSpec

Say = Callable[[str], None]
PROBE_WARMUP_S = 1.0  # a probe's warm-up: it decides nothing, so the transient of an empty queue may show


def locust_step(
    host: str,
    *,
    slo_file: str | Path,
    warmup_s: float,
    config: str | Path | None = None,
    locust_args: Sequence[str] = (),
    abort_on_fail: bool = True,
    stop_option: str | None = STOP_WHEN_DECIDED,
    correlated: bool = False,
    workers: Workers = ONE_PROCESS,
) -> RunStep:
    """A `RunStep` that runs the open-loop user in a Locust subprocess against `host`: one user
    sending `rate` requests/s (with `workers`, one user per worker process, here or elsewhere, each
    at rate / users, so the offered rate is exact across them; the arrival process and
    every workload option are the caller's `locust_args`), `warmup_s` not judged, then `step_s`
    measured, stopped early by `--slo-abort-on-fail` when an SLO fails beyond noise over the step
    (unless `abort_on_fail` is false: a plain sweep) and by `stop_option` (`--slo-stop-when-decided`:
    as soon as its verdict is certain either way; `--slo-stop-when-failed`: a fail only; None: no
    early stop; `correlated`: latency percentiles on batches as long as the requests' measured
    correlation), except in a run asked to go whole (`early_stop` false: a pooled step's later runs).
    Its output goes to `locust.log` in the step's report directory."""

    def run(rate: float, step_s: float, report_dir: Path, early_stop: bool = True) -> Report:
        early = stop_option if early_stop else None
        extra = [
            # Overridable: the window and time series resolution.
            *(["--slo-abort-on-fail", "--slo-window-s", f"{step_s:g}"] if abort_on_fail else []),
            *([early] if early else []),
            *(["--slo-correlated-requests"] if early and correlated else []),
            "--slo-interval-s", "1",
            *locust_args,
            # What makes the step this step: not overridable.
            *workers.step_args(rate),
            "--run-time", f"{math.ceil(warmup_s + step_s)}s", "--slo-warmup-s", f"{warmup_s:g}",
        ]  # fmt: skip
        return runner.run_locust(
            host, report_dir, locustfile="open-loop", config=config, slo_file=slo_file, extra=extra
        )

    return run


# The Locust options each step sets itself (its rate, its user, its length, its warm-up): given
# after `--`, they would be overridden without a word, so they are refused (`refuse_step_options`).
STEP_SET = {
    "--users": "-u", "--spawn-rate": "-r", "--arrival-rate": None, "--run-time": "-t", "--slo-warmup-s": None,
    "--processes": None, "--master": None, "--expect-workers": None, "--worker": None,
}  # fmt: skip


def refuse_step_options(locust_args: Sequence[str]) -> None:
    """CapacityInputError (exit 2) naming the first Locust option after `--` that the search sets."""
    for arg in locust_args:
        name = arg.split("=", 1)[0]
        for option, short in STEP_SET.items():
            if name == option or (short is not None and name.startswith(short)):  # -u 3, -u3, -t60s
                raise CapacityInputError(
                    f"{option} after --: the search sets it for every step (one open-loop user at the step's rate "
                    "for --warmup-s + --step-s); leave it out"
                )


def _option(locust_args: Sequence[str], name: str) -> str | None:
    """The last value given to a Locust option after `--` (`--name V` or `--name=V`), None if none."""
    value = None
    for i, arg in enumerate(locust_args):
        if arg == name and i + 1 < len(locust_args):
            value = locust_args[i + 1]
        elif arg.startswith(name + "="):
            value = arg.split("=", 1)[1]
    return value


def interval_s(locust_args: Sequence[str]) -> float | None:
    """The `--slo-interval-s` given after `--` (None: the step's 1 s; NaN for one that is not a number: Locust
    refuses it)."""
    text = _option(locust_args, "--slo-interval-s")
    try:
        return None if text is None else float(text)
    except ValueError:
        return math.nan


def step_judge(spec: SloSpec, locust_args: Sequence[str]) -> StepJudge:
    """How each step is decided: the SLO file's objectives at the `--slo-confidence` and with the
    `--slo-not-blocking` given to Locust after `--`, as its early stop decides them.
    CapacityInputError (exit 2) for a confidence that is not a number in (0, 1)."""
    text = _option(locust_args, "--slo-confidence")
    try:
        confidence = DEFAULT_CONFIDENCE if text is None else float(text)
    except ValueError:
        confidence = math.nan
    if not 0 < confidence < 1:
        raise CapacityInputError(f"--slo-confidence after --: must be in (0, 1) (0.99 = 99 %), got {text}")
    names = tuple(n.strip() for n in (_option(locust_args, "--slo-not-blocking") or "").split(",") if n.strip())
    return StepJudge(spec, confidence, names)


@dataclass(frozen=True, slots=True)
class StepOptions:
    """How every step's Locust run is made (`locust_step`'s options) and decided (`judge`)."""

    slo_file: str | Path
    warmup_s: float
    config: str | Path | None = None
    locust_args: Sequence[str] = ()
    # Each step's early stop (`steps_stop_early`): --slo-stop-when-decided, -failed, or None (--no-early-stop)
    early_stop: str | None = STOP_WHEN_DECIDED
    workers: Workers = ONE_PROCESS  # where a step's users run, the rate split exactly (--processes, --expect-workers)
    judge: StepJudge = field(default_factory=StepJudge)


def search_target(
    name: str,
    url: str,
    out_dir: Path,
    settings: SearchSettings,
    options: StepOptions,
    min_capacity: float | None,
    say: Say,
    show: Say,
    knee: bool = True,
) -> CapacityResult:
    """One search against `url` (`knee` false and a `min_capacity`: the test at it instead), its
    files written in `out_dir` as soon as it ends (`show` gets the Markdown, `say` a line per
    step). A search that fails writes why, then raises `CapacityInputError` with the steps judged
    before (`partial`)."""
    correlated = options.judge.batch_s == AUTO  # adaptive batches: the early stop decides on them
    step = locust_step(
        url, slo_file=options.slo_file, warmup_s=options.warmup_s, config=options.config,
        locust_args=options.locust_args, stop_option=options.early_stop, workers=options.workers,
        correlated=correlated,
        # Deciding early, a failing step ends once the bounds fail it: the abort's window bound would
        # cut it before they can (a step then bounds nothing). Without the early stop, the abort, but
        # not on batches (--batch-s): a run it cut would hold too few batches to decide.
        abort_on_fail=not options.early_stop and options.judge.batch_s is None,
    )  # fmt: skip
    # Probes on the way up (launch/knee_probe.py): a short warm-up, no abort, each only a direction.
    probe = locust_step(
        url, slo_file=options.slo_file, warmup_s=min(options.warmup_s, PROBE_WARMUP_S), config=options.config,
        locust_args=options.locust_args, stop_option=options.early_stop, workers=options.workers,
        correlated=correlated, abort_on_fail=False,
    )  # fmt: skip
    judge = options.judge
    passes_early = options.early_stop == STOP_WHEN_DECIDED  # only then can a passing step end early
    note = early_pass_note(judge.spec, judge.not_blocking) if passes_early and judge.spec else None
    if note:
        say(note)

    def on_step(s: Step) -> None:
        say(step_line(s))

    try:
        if min_capacity is not None and not knee:
            one_run = passes_early and note is None  # every objective can pass at a look, not only at the end
            result = judge_at_rate(step, min_capacity, settings, out_dir, judge, on_step, stops_when_decided=one_run)
        else:
            result = search(step, settings, out_dir, on_step, judge, probe)
    except CapacityInputError as e:
        write_error(out_dir, e, min_capacity)
        raise
    paths = write_capacity(result, out_dir, name, min_capacity)
    assert paths["markdown"] is not None
    show(paths["markdown"].read_text())
    written = ", ".join(p.name for p in paths.values() if p is not None)
    missing = f"; no {PNG_NAME}: matplotlib is missing (pip install 'slogate[plot]')" if paths["png"] is None else ""
    say(f"capacity in {out_dir}/ ({written}{missing})")
    return result


def search_profiles(
    profiles: Sequence[Profile],
    port: int,
    out: Path,
    settings: SearchSettings,
    options: StepOptions,
    min_capacity: float | None,
    say: Say,
    show: Say,
    launch_error_code: Callable[[Exception], int],
    knee: bool = True,
) -> int:
    """Each profile launched and searched in turn (`out/<profile>/`), then the summary in `out`;
    the exit code of them all (`overall_exit_code`). A profile whose server does not start or whose
    search fails is its outcome, not the end: only options the search refuses (a usage error, which
    every profile would meet) mark the rest "not run". `launch_error_code` says a launch error."""
    outcomes: dict[str, ProfileOutcome] = {}
    refused_by: str | None = None
    for profile in profiles:
        if refused_by is not None:
            outcomes[profile.name] = CapacityInputError(
                f"not run: the search refused the options on {refused_by}", exitcodes.USAGE
            )
            continue
        where = out / profile.name
        try:
            with runner.launched(profile, port, on_progress=say) as started:
                outcomes[profile.name] = search_target(
                    profile.name, started.server.url, where, settings, options, min_capacity, say, show, knee
                )
        except tuple(LAUNCH_ERRORS) as e:
            failed = CapacityInputError(f"the server did not start: {e}", launch_error_code(e))
            write_error(where, failed)
            say(f"{profile.name}: {failed}")
            outcomes[profile.name] = failed
        except CapacityInputError as e:
            say(f"{profile.name}: {e}")
            outcomes[profile.name] = e
            refused_by = profile.name if e.exit_code == exitcodes.USAGE else None
    show(write_summary(outcomes, out, min_capacity).read_text())
    return overall_exit_code(outcomes, min_capacity)
