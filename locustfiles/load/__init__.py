"""The load library: workloads (prefixes, conversations, datasets, traces, endpoints), the raw SSE
reader and timer, the Locust users (closed loop, open loop, trace replay, OpenAI SDK) and their
options. It imports Locust, gevent and the gate's records and plugin hooks (`slo.gate`, `slo.plugin`).
"""
