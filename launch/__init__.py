"""Deployments: start vLLM servers (CPU or GPU build) from profiles, wait for health, stop cleanly."""
