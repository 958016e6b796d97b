"""The gate's exit codes: what a CI pipeline branches on. Defined here only."""

PASS = 0  # every SLO met (or no SLO file: measured, not gated)
FAIL = 1  # an SLO breached (or a regression against the baseline)
USAGE = 2  # bad command line, SLO file, result file or profile: nothing was judged
INCONCLUSIVE = 3  # too few samples, target unreachable, or the load generator saturated
SETUP_FAILED = 4  # vLLM could not be installed or the model not made: nothing was measured
