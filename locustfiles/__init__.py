"""The entry locustfiles (`chat`, `chat_open_loop`, `chat_open_loop_stages`, `chat_openai`,
`chat_trace`: `locust -f $(slogate locustfile NAME)`), `demo.conf` and the data they ship
(`data/`). Each imports the gate (`slogate.slo.plugin`) and the load library (`load/`).
"""
