"""The typed report: what a judged run says, and its one JSON form (`slo-report.json`).

`Report` is what every consumer reads: the renderers (slo/outputs/render.py), Slack, the web UI, the
comparison and the GPU sweep. Its JSON keeps the measurements in the exact wire form workers
ship (`measurements`: per-class HdrHistograms and counters), so a saved report can be judged
again (`slogate judge`), charted or used as a baseline without the run. Nothing secret goes in:
the target URL is stripped of credentials and query strings, and API keys and Slack tokens never
reach the report.
"""

from __future__ import annotations

import re
import shlex
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from slogate.slo.gate.evaluate import ObjectiveResult
from slogate.slo.gate.facts import AlertRecord, Breach, RunStop, WorkloadFacts, utc_iso
from slogate.slo.gate.histogram import LatencyHistogram
from slogate.slo.gate.metrics import ClassMetrics, MetricsStore
from slogate.slo.gate.record import ALL
from slogate.slo.gate.regression import Baseline, RegressionCheck
from slogate.slo.gate.self_check import MAX_LOOP_LAG_P99_MS
from slogate.slo.gate.self_check import summary as self_check_summary
from slogate.slo.gate.server_figures import ServerFigures
from slogate.slo.gate.spec import Objective
from slogate.slo.gate.verdict import Outcome, Verdict

SCHEMA = "slogate.report/2"
_LEGACY_SCHEMA = "slogate.report/1"  # histograms and summaries only; still readable as a baseline

JSON_NAME = "slo-report.json"  # the report file in a report directory (slo/outputs/render.py writes it)


class ReportError(ValueError):
    """A report file that cannot be read; str() is one line."""


def public_url(url: str | None) -> str | None:
    """The URL without user:password@ and without a query string or fragment."""
    if not url:
        return url
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


# An option's value is a secret when a word of its name (split at -, _ and camelCase humps) holds one
# of these anywhere (`--client-secret`, `--clientSecret`, `--dbPassword`, `--secretkey`,
# `--slack-webhook-url`), is one of the short words (`--key`, `--web-auth`), or ends in "token"
# (`--token`, `--bot-token`, `--authToken`): a credential, where "tokens" is a count (`--max-tokens`)
# and `--tokenizer`, `--author` or `--keep-alive` hold none.
_SECRET_PARTS = ("secret", "passw", "passphrase", "apikey", "webhook", "credential", "bearer", "cookie", "privatekey")
_SECRET_WORDS = frozenset({"key", "keys", "auth", "authorization"})
REDACTED = "***"


def is_secret_option(name: str) -> bool:
    """Whether the option `name` (`--api-key`; not `--max-tokens`) holds a secret."""
    words = re.split(r"[-_]+", re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", name.lstrip("-")).lower())
    joined = "".join(words)  # `--api-key`, `--private_key` as one word
    return any(part in joined for part in _SECRET_PARTS) or any(
        word in _SECRET_WORDS or word.endswith("token") for word in words
    )


def public_command(argv: Sequence[str]) -> str:
    """A command line fit for a report: URLs without credentials or query strings, and the value
    of any option named like a secret (`--web-auth`, `--api-key`, `--bot-token`: `is_secret_option`)
    replaced by ***."""
    out: list[str] = []
    hide_next = False
    for arg in argv:
        if hide_next:
            out.append(REDACTED)
            hide_next = False
            continue
        name, eq, value = arg.partition("=")
        if arg.startswith("-") and is_secret_option(name):
            if eq:
                out.append(f"{name}={REDACTED}")
            else:
                out.append(arg)
                hide_next = True
            continue
        if "://" in arg:
            if eq and arg.startswith("-") and "://" in value:
                arg = f"{name}={public_url(value)}"
            elif "://" in arg.split("=", 1)[0] or not eq:
                arg = public_url(arg) or arg
        out.append(arg)
    return shlex.join(out)


@dataclass(slots=True)
class RunInfo:
    """What was run and how: the facts the judge needs besides the measurements."""

    source: str = "locust"  # locust | vllm-bench: who measured
    target: str | None = None  # credentials stripped
    model: str | None = None
    workload: WorkloadFacts = field(default_factory=WorkloadFacts)
    started_at: str | None = None
    ended_at: str | None = None
    duration_s: float | None = None
    warmup_s: float = 0.0
    mode: str = "local"  # local | master
    workers: int = 1
    workers_complete: int = 1
    users: int | None = None
    slo_file: str | None = None
    # The self-check's inputs, so that judging a saved report gives the live verdict.
    processes: int = 1
    cpu_warning: bool = False
    max_client_lag_ms: float = MAX_LOOP_LAG_P99_MS
    problems: list[str] = field(default_factory=list)  # facts that make every figure doubtful
    notes: list[str] = field(default_factory=list)  # what a reader must know about the figures
    details: dict[str, Any] = field(default_factory=dict)  # source-specific facts (vllm bench's run fields)
    command: str | None = None  # the command line that ran the load (public_command: no secret in it)
    aborted: Breach | None = None  # --slo-abort-on-fail stopped the run: when and why (slo/gate/window.py)
    stopped: RunStop | None = None  # why and when the run ended: decided, aborted or its run time

    def __post_init__(self) -> None:
        self.workload = WorkloadFacts.coerce(self.workload)

    def to_json(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out["workload"] = self.workload.to_json()
        out["aborted"] = self.aborted.to_json() if self.aborted is not None else None
        out["stopped"] = self.stopped.to_json() if self.stopped is not None else None
        return out

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> RunInfo:
        known = {f.name for f in fields(cls)}
        run = cls(**{k: v for k, v in d.items() if k in known and v is not None})
        run.workload = WorkloadFacts.from_json(d.get("workload"))
        run.aborted = Breach.from_json(d.get("aborted"))
        run.stopped = RunStop.from_json(d.get("stopped"))
        return run


def goodput_summary(m: MetricsStore) -> dict[str, Any]:
    """The report's `goodput`: per class the requests that met every per-request limit
    (`targets_ms`, slo/gate/spec.py `goodput_targets`), their fraction of the requests that ended
    (failures count, never as good; as the goodput SLO judges it) and `goodput_rps`, good requests per
    second over the run (vLLM's `request_goodput`). Figures are None without limits."""
    classes: dict[str, Any] = {}
    counted = m.goodput_targets_ms is not None
    for name in m.class_names():
        cm = m.get(name)
        total = cm.requests
        duration = cm.duration_s
        classes[name] = {
            "good": cm.good if counted else None,
            "requests": total,
            "fraction": round(cm.good / total, 6) if counted and total else None,
            "goodput_rps": round(cm.good / duration, 6) if counted and duration else None,
        }
    return {"targets_ms": m.goodput_targets_ms, "classes": classes}


def describe_targets(targets_ms: dict[str, dict[str, float]] | None) -> str:
    """Goodput's per-request limits by class, e.g. `all: ttft <= 200 ms, tpot <= 50 ms`; "none"."""
    if not targets_ms:
        return "none"
    return "; ".join(
        f"{cls}: " + ", ".join(f"{metric} <= {ms:g} ms" for metric, ms in sorted(limits.items()))
        for cls, limits in targets_ms.items()
    )


def trace_cache_comparison(run: RunInfo, server: ServerFigures | None) -> str | None:
    """A trace replay's expected prefix-cache hit rate against the server's measured one, one
    sentence; None when the run replayed no trace. The trace implies a rate from its block ids
    (tokens of blocks seen before / all tokens; and over blocks); the server's `/metrics` counts
    the tokens it found cached. Far apart: the cache was too small, or the prompts not exact."""
    trace = run.workload.trace
    if trace is None:
        return None
    details = [
        f"over blocks {_rate(trace.implied_block_hit_rate)}",
        f"trace {trace.file or '?'}: {_number(trace.requests)} requests",
        f"{_number(trace.block_tokens)}-token blocks",
        f"speedup {_number(trace.speedup)}x",
    ]
    if trace.exact is False:
        details.append("prompts not token-exact, so the implied rate is approximate")
    return (
        f"Prefix-cache hit rate implied by the trace {_rate(trace.implied_token_hit_rate)} vs measured by "
        f"the server {_measured_hit_rate(server)} ({'; '.join(details)})."
    )


def _measured_hit_rate(server: ServerFigures | None) -> str:
    """The server's prefix-cache hit rate, or why there is none: no /metrics, or a /metrics without
    the figure (scraped all the same: its counters missing, or they counted no query)."""
    if server is None:
        return "not measured (/metrics not scraped)"
    if not server.available:
        return f"not measured (/metrics: {server.error or 'unavailable'})"
    if server.prefix_cache_hit_rate is not None:
        return _rate(server.prefix_cache_hit_rate)
    scrapes = f"{server.scrapes} scrapes of /metrics"
    if server.prefix_cache_queried_tokens is None:
        return f"not measured ({scrapes}, without prefix-cache counters)"
    return f"not measured ({scrapes}; its prefix-cache counters counted no query)"


def _rate(value: Any) -> str:
    return f"{value:.3f}" if isinstance(value, int | float) else "?"


def _number(value: Any) -> str:
    if isinstance(value, int):
        return str(value)
    return f"{value:g}" if isinstance(value, float) else "?"


def objective_json(r: ObjectiveResult) -> dict[str, Any]:
    o = r.objective
    return {
        "name": o.name,
        "metric": o.metric,
        "class": o.request_class,
        "percentile": o.percentile,
        "target": {
            **{k: v for k, v in ((o.kind.max_key, o.max), ("min", o.min)) if v is not None},
            **({"limits_ms": dict(o.limits_ms)} if o.limits_ms else {}),
        },
        "objective": o.describe(),
        "observed": None if r.observed is None else round(r.observed, 6),
        "unit": o.kind.unit,
        "samples": r.samples,
        "result": str(r.result),
    }


def objective_from_json(d: dict[str, Any]) -> ObjectiveResult:
    target = d.get("target") or {}
    o = Objective(
        d["name"], d["metric"], d.get("class", ALL), d.get("percentile"), target.get("max_ms", target.get("max")),
        target.get("min"), tuple(sorted((target.get("limits_ms") or {}).items())),
    )  # fmt: skip
    return ObjectiveResult(o, d.get("observed"), d.get("samples", 0), Outcome(d["result"]))


@dataclass(slots=True)
class Report:
    verdict: Verdict
    reasons: list[str]
    run: RunInfo
    measurements: MetricsStore
    slos: list[ObjectiveResult] = field(default_factory=list)
    server: ServerFigures | None = None
    regression: RegressionCheck | None = None
    saturated: bool = False
    alerts: AlertRecord | None = None  # set by publishing (`dataclasses.replace`), never by the judge
    generated_at: str = field(default_factory=lambda: utc_iso(time.time()) or "")
    # The baseline's measurements, for the HTML report to draw its curves beside the run's; not in
    # the JSON (the baseline file has them; `slogate judge --slo-baseline` gives them again).
    baseline_measurements: MetricsStore | None = field(default=None, compare=False)

    @property
    def exit_code(self) -> int:
        return self.verdict.exit_code

    @property
    def failing(self) -> list[ObjectiveResult]:
        """The objectives not met (failed, or without enough data)."""
        return [r for r in self.slos if r.result != Outcome.PASS]

    def stop_line(self) -> str | None:
        """Why and when the run ended, one line for the summary, the HTML page and Slack; None when
        unknown, or when a reason says it already (a run cut short: slo/gate/judge.py)."""
        if self.run.stopped is None:
            return None
        line = self.run.stopped.line()
        return None if any(r.startswith(line.rstrip(".")) for r in self.reasons) else line

    def metrics_summary(self) -> dict[str, dict[str, Any]]:
        m = self.measurements
        return {} if m.is_empty else m.summary()

    def as_baseline(self) -> Baseline:
        return Baseline(self.measurements, self.run.model, self.run.workload, self.generated_at, str(self.verdict))

    def to_json(self) -> dict[str, Any]:
        m = self.measurements
        out: dict[str, Any] = {
            "schema": SCHEMA,
            "generated_at": self.generated_at,
            "verdict": str(self.verdict),
            "exit_code": self.exit_code,
            "reasons": list(self.reasons),
            "run": self.run.to_json(),
            "slos": [objective_json(r) for r in self.slos],
            "metrics": self.metrics_summary(),
            "warmup_excluded_requests": m.warmup_excluded,
            "goodput": goodput_summary(m),
        }
        if self.server is not None:
            out["server"] = self.server.to_json()
        out["self_check"] = {**self_check_summary(m), "saturated": self.saturated}
        if self.regression is not None:
            out["regression"] = self.regression.to_json()
        if self.alerts is not None:
            out["alerts"] = self.alerts.to_json()
        # The exact measurements (HdrHistogram's standard base64 encoding, microseconds), so the
        # report can be judged again, charted or compared later without the run.
        out["measurements"] = m.to_wire()
        return out

    @classmethod
    def from_json(cls, d: Any, source: str = "report") -> Report:
        if not isinstance(d, dict) or d.get("schema") not in (SCHEMA, _LEGACY_SCHEMA):
            raise ReportError(f"{source}: not a slogate report (schema {SCHEMA!r} expected)")
        try:
            store = MetricsStore.from_wire(d["measurements"]) if d["schema"] == SCHEMA else _legacy_measurements(d)
            regression = d.get("regression")
            return cls(
                verdict=Verdict(d["verdict"]),
                reasons=list(d.get("reasons") or []),
                run=RunInfo.from_json(d.get("run") or {}),
                measurements=store,
                slos=[objective_from_json(s) for s in d.get("slos") or []],
                server=ServerFigures.from_json(d["server"]) if d.get("server") else None,
                regression=RegressionCheck.from_json(regression) if regression else None,
                saturated=bool((d.get("self_check") or {}).get("saturated")),
                alerts=AlertRecord.from_json(d.get("alerts")),
                generated_at=d.get("generated_at") or "",
            )
        except (KeyError, TypeError, ValueError) as e:
            raise ReportError(f"{source}: malformed slogate report ({type(e).__name__}: {e})") from None


def _legacy_measurements(d: dict[str, Any]) -> MetricsStore:
    """A `slogate.report/1` file: histograms per class and the summaries' counters (the run's
    start and end are gone: its duration stands in for them)."""
    store = MetricsStore()
    summaries = d.get("metrics") or {}
    for name, encoded in (d.get("histograms") or {}).items():
        if name == ALL:
            continue
        cm = store.classes[name] = ClassMetrics()
        for metric, text in encoded.items():
            cm.latency[metric] = LatencyHistogram.decode(text)
        s = summaries.get(name) or {}
        for key in ("requests", "failures", "dropped", "unfinished", "unfinished_waiting"):
            setattr(cm, key, s.get(key) or 0)
        for key in ("prompt_tokens", "output_tokens", "cached_tokens"):
            setattr(cm, key, s.get(key) or 0)
        cm.errors_by_kind.update(s.get("errors_by_kind") or {})
        if s.get("duration_s"):
            cm.first_start, cm.last_end = 0.0, s["duration_s"]
    store.warmup_excluded = d.get("warmup_excluded_requests") or 0
    return store
