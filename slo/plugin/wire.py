"""What a worker ships to its master and how the master takes it in: the samples since the
worker's last report (in `report_to_master`, and a last flush at its `test_stop` as the message
`FLUSH_MESSAGE`), its model, workload facts and problems."""

from __future__ import annotations

from typing import Any

from slogate.slo.gate.facts import WorkloadFacts
from slogate.slo.gate.metrics import MetricsStore
from slogate.slo.plugin.control import abort_run
from slogate.slo.plugin.gate import Gate

WIRE_KEY = "slogate"  # the key of slogate's payload in Locust's worker report
FLUSH_MESSAGE = "slogate_flush"


def worker_payload(gate: Gate) -> dict[str, Any]:
    """What a worker ships to the master: the samples since its last report, and its workload."""
    run = gate.run
    return {
        "metrics": run.listener.take().to_wire(),
        "model": run.model,
        "workload": run.workload.to_json(),
        "problems": run.problems,
    }


def merge_from_worker(gate: Gate, client_id: str, payload: dict[str, Any]) -> None:
    """The master takes in one worker payload."""
    run = gate.run
    run.take_in(client_id, MetricsStore.from_wire(payload["metrics"]))
    if payload.get("model"):
        # The latest workload a worker noted: a user may note it again with more facts (a trace's,
        # once its prompts are calibrated) after a report carried the first note.
        noted = payload.get("workload")
        if run.note_workload(payload["model"], WorkloadFacts.from_json(noted) if noted else run.workload):
            gate.restart_server_counters()  # this worker has primed its prefixes
    for problem in payload.get("problems") or []:
        abort_run(gate.environment, problem)  # a worker that could not reach the target ends the run


def on_worker_flush(gate: Gate, msg: Any) -> None:
    """A worker's last samples, sent at its `test_stop`."""
    merge_from_worker(gate, msg.node_id, msg.data)
    gate.run.mark_flushed(msg.node_id)
