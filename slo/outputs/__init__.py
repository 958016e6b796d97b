"""What reads a judged `Report`: the report files (JSON, JUnit, Markdown, self-contained HTML and its
assets, the interval hlog), `vllm bench serve` exports, Slack messages, and `publish`, which alerts
and writes them all. It may import `slo.gate`; never Locust or gevent, and never changes a report
(publishing returns a new one with the alert's outcome).
"""
