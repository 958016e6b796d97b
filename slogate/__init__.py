"""slogate: load-test LLM inference servers with Locust and gate releases on exact TTFT SLOs.

This package holds the `slogate` command (`cli`), which only parses arguments and calls
`launch` and `slo`; it imports no Locust itself (Locust runs as a subprocess).
"""

__version__ = "0.2.0"
