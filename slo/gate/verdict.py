"""The names the gate decides with, defined once: verdicts (with their exit codes), objective
outcomes and regression outcomes. They are `StrEnum`s, so reports and tests compare them with
plain strings."""

from __future__ import annotations

from enum import StrEnum

from slogate.slo.gate import exitcodes


class Verdict(StrEnum):
    """The run's verdict; `exit_code` is what the process returns."""

    PASS = "pass"
    FAIL = "fail"
    INCONCLUSIVE = "inconclusive"
    ERROR = "error"  # usage or configuration error: nothing was judged
    UNGATED = "ungated"  # no SLO file: measured, not judged

    @property
    def exit_code(self) -> int:
        return _EXIT_CODES[self]


_EXIT_CODES = {
    Verdict.PASS: exitcodes.PASS,
    Verdict.FAIL: exitcodes.FAIL,
    Verdict.INCONCLUSIVE: exitcodes.INCONCLUSIVE,
    Verdict.ERROR: exitcodes.USAGE,
    Verdict.UNGATED: exitcodes.PASS,
}


class Outcome(StrEnum):
    """One objective's result."""

    PASS = "pass"
    FAIL = "fail"
    INSUFFICIENT = "insufficient_data"


class RegressionStatus(StrEnum):
    """One comparison with the baseline, or the whole check."""

    OK = "ok"
    REGRESSION = "regression"
    INCONCLUSIVE = "inconclusive"
    REFUSED = "refused"  # the baseline is of another workload or model
