"""The judge and its inputs: request records, HdrHistograms, time series, the SLO spec, evaluation,
regressions against a baseline, the self-check, sequential bounds, and the typed `Report`.

Pure: it may import numpy, hdrh, PyYAML and prometheus-client's parser, never Locust or gevent,
and nothing of `slo.outputs`, `slo.plugin`, `launch` or `locustfiles` (tests/e2e/test_layout.py).
"""
