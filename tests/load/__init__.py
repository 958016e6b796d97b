"""The load library (locustfiles/load/): users, SSE, workloads, open loop, traces, datasets, faults."""
