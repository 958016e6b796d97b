"""The `slogate` subcommands, a module per group: each `register(sub)` adds its parsers, whose
`func` runs the command. They may import launch/ and slo/ (never the Locust plugin, which only a
Locust process loads); slogate/cli.py assembles them."""
