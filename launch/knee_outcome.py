"""The exit code of a capacity search, or of several profiles' searches, from what they proved."""

from __future__ import annotations

from slogate.launch.knee import CapacityInputError, CapacityResult
from slogate.slo.gate import exitcodes

ProfileOutcome = CapacityResult | CapacityInputError


def outcome_exit_code(outcome: ProfileOutcome, min_capacity: float | None) -> int:
    """A search's exit code; one that failed: with `min_capacity`, what the steps judged before
    the failure already prove (0 a rate >= the minimum passed, 1 the capacity is below it), else
    the failure's own code (2 or 3)."""
    if not isinstance(outcome, CapacityInputError):
        return outcome.exit_code(min_capacity)
    if outcome.partial is not None and min_capacity is not None:
        proven = outcome.partial.exit_code(min_capacity)
        if proven in (exitcodes.PASS, exitcodes.FAIL):
            return proven
    return outcome.exit_code


def overall_exit_code(outcomes: dict[str, ProfileOutcome], min_capacity: float | None) -> int:
    """Several profiles: 1 when any is proven below the minimum; else the first other non-zero code
    in profile order (3 undecided or a search that failed, 2 a usage error, 4 vLLM missing); else 0."""
    codes = [outcome_exit_code(o, min_capacity) for o in outcomes.values()]
    if exitcodes.FAIL in codes:
        return exitcodes.FAIL
    return next((code for code in codes if code != exitcodes.PASS), exitcodes.PASS)
