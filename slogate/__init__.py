"""slogate: load-test LLM inference servers with Locust and gate releases on exact TTFT SLOs."""

__version__ = "0.1.0"
