"""The values a run's options may take: the target URL, and the rates, counts, durations and ports
of Locust, the workload and the gate. Any other is refused before any load, in one line that names
the option and the fix (`OptionError`). Pure: the `slogate` CLI checks its own options with it, the
plugin every parsed Locust command line (slo/plugin/parser.py)."""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

SCHEMES = ("http", "https")


class OptionError(ValueError):
    """A value no run can use; str() is one line naming the option and the fix."""


def _shown(url: str) -> str:
    """`url` as an error may show it: never the credentials of `user:password@` (its scheme and
    path as typed)."""
    scheme, sep, rest = url.partition("://") if "://" in url else ("", "", url)
    authority, slash, path = rest.partition("/")
    userinfo, at, host = authority.rpartition("@")
    return f"{scheme}{sep}{'***@' + host if at and userinfo else authority}{slash}{path}"


def check_host(url: str | None, required: bool = True, option: str = "--host") -> None:
    """OptionError unless `url` is an http(s) base URL with a host name and a valid port; a
    missing one only when `required` (a web UI run takes it from its form)."""
    if not url:
        if required:
            raise OptionError(f"{option}: required, the server's base URL, e.g. {option} http://localhost:8000")
        return
    shown = _shown(url)
    if url.startswith("/"):
        raise OptionError(f"{option} {shown} is a path, not a server: give its base URL, e.g. http://localhost:8000")
    if "://" not in url:
        raise OptionError(f"{option} {shown} has no scheme: did you mean http://{shown}?")
    try:
        parts = urlsplit(url)
    except ValueError as e:  # an unclosed `[`, a bracketed host that is no IP address
        raise OptionError(f"{option} {shown}: not a URL ({e}), e.g. http://localhost:8000") from None
    try:
        port = parts.port
    except ValueError:  # not a number, or beyond 65535
        port = 0
    if parts.scheme.lower() not in SCHEMES:
        raise OptionError(f"{option} {shown}: the scheme must be http or https, e.g. http://localhost:8000")
    if not parts.hostname:
        raise OptionError(f"{option} {shown} has no host name, e.g. http://localhost:8000")
    if port == 0 or (port is None and parts.netloc.endswith(":")):
        raise OptionError(f"{option} {shown}: the port must be a number from 1 to 65535")


@dataclass(frozen=True, slots=True)
class Rule:
    """What a numeric option must be (`must`, completing "must be ..."), as a predicate `ok` of a
    finite value (`check_number` refuses NaN and infinities first)."""

    flag: str
    ok: Callable[[float], bool]
    must: str


def positive(flag: str, what: str) -> Rule:
    return Rule(flag, lambda v: v > 0, f"> 0 ({what})")


def at_least(flag: str, low: float, what: str) -> Rule:
    return Rule(flag, lambda v: v >= low, f">= {low:g} ({what})")


def port(flag: str, zero_is_off: bool = False) -> Rule:
    low = 0 if zero_is_off else 1
    return Rule(flag, lambda v: low <= v <= 65535, f"a port from 1 to 65535{' (0: off)' if zero_is_off else ''}")


# Options absent from a parser (another locustfile's) are skipped; None is "not given".
RULES: dict[str, Rule] = {
    # Locust's own
    "num_users": at_least("--users", 1, "users"),
    "run_time": positive("--run-time", "a duration, e.g. 60s or 5m"),
    "processes": Rule("--processes", lambda v: v == -1 or v >= 0, ">= 0 processes (0: none), or -1 for one per CPU"),
    "web_port": port("--web-port"),
    "master_port": port("--master-port"),
    "master_bind_port": port("--master-bind-port"),
    # the workload's
    "shared_prefixes": at_least("--shared-prefixes", 0, "prefixes"),
    "unique_prefix_tokens": at_least("--unique-prefix-tokens", -1, "tokens; -1: as many as a shared prefix"),
    "temperature": at_least("--temperature", 0, "the sampling temperature"),
    "trace_block_tokens": at_least("--trace-block-tokens", 1, "tokens per hash_ids block"),
    "trace_speedup": positive("--trace-speedup", "times faster than the trace"),
    "trace_start_s": at_least("--trace-start-s", 0, "seconds into the trace"),
    "trace_limit": at_least("--trace-limit", 0, "requests; 0: all"),
    "arrival_rate": positive("--arrival-rate", "requests per second per user"),
    "burstiness": positive("--burstiness", "the gamma shape; 1 is Poisson"),
    "max_in_flight": at_least("--max-in-flight", 1, "requests in flight per user"),
    # the gate's
    "slo_warmup_s": Rule("--slo-warmup-s", lambda v: v >= 0 or v == -1, ">= 0 seconds"),
    "slo_unreachable_s": at_least("--slo-unreachable-s", 0, "seconds; 0: never"),
    "slack_timeout_s": positive("--slack-timeout-s", "seconds"),
    "max_client_lag_ms": positive("--max-client-lag-ms", "milliseconds"),
    "server_metrics_interval": at_least("--server-metrics-interval", 0, "seconds; 0: off"),
    "slo_metrics_port": port("--slo-metrics-port", zero_is_off=True),
    "slo_interval_s": at_least("--slo-interval-s", 0, "seconds; 0: none"),
    "slo_min_samples": at_least("--slo-min-samples", 0, "samples; 0: the SLO file's"),
    "slo_window_s": positive("--slo-window-s", "seconds"),
    "slo_confidence": Rule("--slo-confidence", lambda v: 0 < v < 1, "in (0, 1), e.g. 0.99"),
}


def check_number(rule: Rule, value: float) -> None:
    if not math.isfinite(value):
        raise OptionError(f"{rule.flag} {value}: must be a finite number {rule.must}")
    if not rule.ok(value):
        raise OptionError(f"{rule.flag} {value:g}: must be {rule.must}")


def check_options(opts: Any) -> None:
    """OptionError for the first value of a parsed Locust command line no run can use: the host
    (given empty, where the run starts by itself: --headless or --autostart; not given, a
    locustfile's User class may name it), then the numbers."""
    if getattr(opts, "host", None) is not None:
        starts_itself = bool(getattr(opts, "headless", False) or getattr(opts, "autostart", False))
        check_host(opts.host, required=starts_itself and not getattr(opts, "worker", False))
    for dest, rule in RULES.items():
        value = getattr(opts, dest, None)
        if isinstance(value, int | float) and not isinstance(value, bool):
            check_number(rule, value)


def check_duration(flag: str, text: str) -> int:
    """Seconds of a Locust duration (`--run-time`'s grammar: 90, 90s, 5m, 1h30m); OptionError for
    one Locust would refuse or that is not > 0. For options the CLI passes on to Locust later."""
    match = re.fullmatch(r"(\d+)|(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?", text)
    seconds = 0
    if match and text.strip():
        plain, hours, minutes, secs = (int(g) if g else 0 for g in match.groups())
        seconds = plain + 3600 * hours + 60 * minutes + secs
    if seconds <= 0:
        raise OptionError(f"{flag} {text}: must be a duration > 0, e.g. 90s, 5m or 1h30m")
    return seconds
