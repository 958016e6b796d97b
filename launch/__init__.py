"""Deployments and the loops over them: profiles, the vLLM installation, the one launcher, the one
Locust command-line builder, `runner` (launch, load, stop, read the report), `compare`, and
`capacity` (the knee search, `knee`, and its files). It may import `slo.gate` and `slo.outputs`
and runs Locust only as a subprocess: it imports neither Locust nor the plugin.
"""
