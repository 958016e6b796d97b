"""Deprecated: `import slogate.slo.plugin` instead (the plugin moved there; this name stays so that
locustfiles written for slogate 0.1 keep working). Importing it registers the gate, as before."""

import warnings

import slogate.slo.plugin  # noqa: F401  (registers the options and the event handlers)
from slogate.slo.plugin.control import BAD_CONFIG, abort_run, end_run, note_workload, usage_exit
from slogate.slo.plugin.gate import gate_for

__all__ = ["BAD_CONFIG", "abort_run", "end_run", "gate_for", "note_workload", "usage_exit"]

warnings.warn(
    "slogate.slo.locust_plugin is deprecated: import slogate.slo.plugin (and names from its modules)",
    DeprecationWarning,
    stacklevel=2,
)
