"""Measurement, judgement and outputs: what a run measured, its verdict, and the files and alerts that say it.

- `gate/`: the judge and its inputs (request records, histograms, time series, the SLO spec,
  evaluation, regressions, the typed `Report`); pure: imports neither Locust nor gevent, nor the
  outputs or the plugin, so a live run, `slogate judge` and `capacity` reach one verdict one way.
- `outputs/`: what reads a `Report` (JSON, JUnit, Markdown, HTML, hlog, vllm-bench export, Slack,
  `publish`); imports `gate/`, never changes a report.
- `plugin/`: the Locust plugin, the only package here that imports Locust or gevent.
- `rejudge.py`: `slogate judge` (load a saved result, judge it, publish); `defaults/`: the demo's SLO file.
"""
