"""What reads a Report (slo/outputs/): HTML, exports, Slack, Prometheus exposition."""
