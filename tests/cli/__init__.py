"""The `slogate` command (slogate/): options, bad input, judge, the GitHub Action."""
