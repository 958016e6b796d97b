"""The gate's exit codes: what a CI pipeline branches on."""

PASS = 0  # every SLO met
FAIL = 1  # an SLO breached (or a regression against the baseline)
USAGE = 2  # bad command line, SLO file or profile: nothing was measured
INCONCLUSIVE = 3  # too few samples, target unreachable, or the load generator saturated
