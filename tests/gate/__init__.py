"""The judge's inputs and the judge (slo/gate/): histograms, intervals, statistics, verdicts, saved reports."""
