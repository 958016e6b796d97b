"""The Locust plugin: the only part of slogate's gate that imports Locust or gevent.

Importing it (a locustfile does `import slogate.slo.plugin`) registers the gate with Locust:
- the `--slo-*`, `--slack-*` and `--export` options (`options`: command line, `locust.conf`, web UI);
- per environment a `Gate` (`gate`): SLO file, baseline, alert settings, and its current run
  (`run_state`: a new `Run` at each test_start, what it measured, why it stopped);
- the request listener on every load-generating process (`listener`), the event-loop lag monitor
  (`loop_lag`) and the `/metrics` scraper (`scraper`);
- distributed plumbing (`wire`): workers ship their histograms in `report_to_master` and flush the
  rest at `test_stop`; the master merges and is the only process that judges and writes reports;
- background watchers (`watchers`): an unreachable target, `--slo-abort-on-fail`'s window judge;
- the event handlers (`hooks`), the verdict in `quitting` setting the process exit code;
- the web UI's SLO tab (`web_ui`), and credentials in the host URL taken out of it (`target`).
It may import `slogate.slo.gate` and `slogate.slo.outputs`; nothing outside it imports Locust.
"""

from slogate.slo.plugin import hooks, options  # noqa: F401  (registers the options and the event handlers)
