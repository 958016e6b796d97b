"""The Locust plugin (slo/plugin/): headless and web UI runs, signals, journal, watchers, workers."""
