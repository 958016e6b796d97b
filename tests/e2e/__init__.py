"""Across the project: real vLLM end to end, a real Prometheus, the docs site, the layout."""
