"""Measurement and judgement: histograms, request records, the SLO spec, evaluation and reports."""
