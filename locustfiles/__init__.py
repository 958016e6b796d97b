"""Load generation: the workload, the SSE reader and the Locust users that stream chat requests."""
