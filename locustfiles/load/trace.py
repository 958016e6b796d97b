"""Mooncake trace replay, the Locust-free part: load and validate a trace, schedule it, shard it
across workers, say what prefix-cache hit rate it implies, and write the sample trace.

A Mooncake trace is JSONL, one request a line: `timestamp` (ms since the trace's start),
`input_length` and `output_length` (tokens), `hash_ids` (one id per `block_tokens`-token block of
the prompt; equal ids are identical blocks, prefix-chained), and here an optional `class` (a tag).

Token-exact prompts: locustfiles/load/trace_prompts.py.
"""

from __future__ import annotations

import argparse
import json
import math
import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from slogate.slo.gate.record import file_class

DEFAULT_BLOCK_TOKENS = 512


class TraceError(Exception):
    """A trace that cannot be replayed; str() is one line naming the file (and line)."""


@dataclass(frozen=True, slots=True)
class TraceRequest:
    line: int  # 1-based, in the trace file
    timestamp_ms: float
    input_length: int
    output_length: int  # sent as max_tokens, with ignore_eos
    hash_ids: tuple[int, ...]
    request_class: str | None

    def block_sizes(self, block_tokens: int) -> list[int]:
        """Tokens per block: all full but the last, which takes the rest of `input_length`."""
        full = len(self.hash_ids) - 1
        return [block_tokens] * full + [self.input_length - full * block_tokens]


# --- loading and validation -------------------------------------------------------------------


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _field_int(entry: dict, name: str, minimum: int) -> int:
    if name not in entry:
        raise ValueError(f"missing field '{name}'")
    value = entry[name]
    if not _is_int(value):
        raise ValueError(f"'{name}' must be an integer, got {value!r}")
    if value < minimum:
        raise ValueError(f"'{name}' must be >= {minimum}, got {value}")
    return value


def _parse_request(text: str, line: int, block_tokens: int) -> TraceRequest:
    try:
        entry = json.loads(text)
    except ValueError as e:
        raise ValueError(f"not valid JSON ({e.msg})") from None
    if not isinstance(entry, dict):
        raise ValueError(f"expected a JSON object, got {type(entry).__name__}")
    if "timestamp" not in entry:
        raise ValueError("missing field 'timestamp'")
    timestamp = entry["timestamp"]
    if isinstance(timestamp, bool) or not isinstance(timestamp, int | float) or not math.isfinite(timestamp):
        raise ValueError(f"'timestamp' must be a number of ms, got {timestamp!r}")
    if timestamp < 0:
        raise ValueError(f"'timestamp' must be >= 0, got {timestamp}")
    input_length = _field_int(entry, "input_length", 1)
    output_length = _field_int(entry, "output_length", 1)
    hash_ids = entry.get("hash_ids")
    if hash_ids is None:
        raise ValueError("missing field 'hash_ids'")
    if not isinstance(hash_ids, list) or not all(_is_int(h) and h >= 0 for h in hash_ids):
        raise ValueError("'hash_ids' must be a list of integers >= 0")
    needed = math.ceil(input_length / block_tokens)
    if len(hash_ids) > needed:
        raise ValueError(
            f"hash_ids has {len(hash_ids)} blocks but input_length {input_length} allows at most {needed}"
            f" (block {block_tokens} tokens)"
        )
    if len(hash_ids) < needed:
        raise ValueError(
            f"hash_ids has {len(hash_ids)} blocks but input_length {input_length} needs {needed}"
            f" (block {block_tokens} tokens)"
        )
    request_class = file_class(entry.get("class"))
    return TraceRequest(line, float(timestamp), input_length, output_length, tuple(hash_ids), request_class)


def load_trace(path: str | Path, block_tokens: int = DEFAULT_BLOCK_TOKENS) -> list[TraceRequest]:
    """Every request of a Mooncake trace, validated in full before anything is sent.

    Blank lines are skipped; fields other than the five above are ignored. Raises `TraceError`
    naming the file and line: a malformed line, a missing or negative field, a timestamp before
    the previous line's, or a `hash_ids` count that does not match `input_length`.
    """
    if block_tokens < 1:
        raise TraceError(f"{path}: block size must be >= 1 token, got {block_tokens}")
    requests: list[TraceRequest] = []
    try:
        with open(path, encoding="utf-8") as lines:
            for number, text in enumerate(lines, start=1):
                if not text.strip():
                    continue
                try:
                    request = _parse_request(text, number, block_tokens)
                except ValueError as e:
                    raise TraceError(f"{path}:{number}: {e}") from None
                if requests and request.timestamp_ms < requests[-1].timestamp_ms:
                    raise TraceError(
                        f"{path}:{number}: timestamp {_ms(request)} is before line {requests[-1].line}'s"
                        f" {_ms(requests[-1])} (a trace must be sorted by time)"
                    )
                requests.append(request)
    except OSError as e:
        raise TraceError(f"{path}: cannot read: {e.strerror or e}") from None
    except UnicodeDecodeError:
        raise TraceError(f"{path}: not UTF-8 text") from None
    if not requests:
        raise TraceError(f"{path}: no requests")
    return requests


def _ms(request: TraceRequest) -> str:
    """The timestamp as the trace wrote it (no trailing .0 for whole milliseconds)."""
    ms = request.timestamp_ms
    return str(int(ms)) if ms.is_integer() else str(ms)


# --- schedule, shards, prefix sharing ---------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ScheduledRequest:
    send_at_s: float  # after the run's start; latency is measured from here, not from the send
    request: TraceRequest
    prefix_hit: bool  # its first block was in an earlier scheduled request (unbounded cache)


def schedule(
    requests: Sequence[TraceRequest], speedup: float = 1.0, start_s: float = 0.0, limit: int | None = None
) -> list[ScheduledRequest]:
    """The requests to send and when: those at or after `start_s` of trace time, the first
    `limit` of them, each at (timestamp - start_s) / speedup after the run's start.

    Computed once on the whole trace, before `shard`: whether a request's prefix was seen
    earlier depends on every request before it, whichever worker sends it.
    """
    if not speedup > 0 or not math.isfinite(speedup):
        raise ValueError(f"--trace-speedup must be > 0, got {speedup}")
    if not start_s >= 0:
        raise ValueError(f"--trace-start-s must be >= 0, got {start_s}")
    if limit is not None and limit < 1:
        raise ValueError(f"--trace-limit must be >= 1, got {limit}")
    start_ms = start_s * 1000.0
    selected = [r for r in requests if r.timestamp_ms >= start_ms][:limit]
    seen: set[int] = set()
    scheduled = []
    for request in selected:
        send_at_s = (request.timestamp_ms - start_ms) / 1000.0 / speedup
        scheduled.append(ScheduledRequest(send_at_s, request, request.hash_ids[0] in seen))
        seen.update(request.hash_ids)
    return scheduled


def shard(requests: Sequence[ScheduledRequest], index: int, count: int) -> list[ScheduledRequest]:
    """Worker `index` of `count`'s share: every count-th request from the index-th, each keeping
    its send time (round robin, so bursts are split evenly and every worker ends with the trace)."""
    if count < 1 or not 0 <= index < count:
        raise ValueError(f"shard {index} of {count} does not exist")
    return list(requests[index::count])


@dataclass(frozen=True, slots=True)
class PrefixCacheStats:
    """What an unbounded prefix cache would hit on the replayed requests, in blocks and in tokens.

    A block hits when it and every block before it in its request appeared in an earlier request
    (prefix caching reuses a prefix, never a block after a miss); in a prefix-chained trace that
    is exactly "blocks seen earlier / all blocks". Tokens count what the cache would hold: a block
    seen only as an earlier turn's short last block hits that far. vLLM's `prefix_cache_hits /
    prefix_cache_queries` counts tokens, so it compares with `token_hit_rate`.
    """

    blocks: int
    hit_blocks: int
    tokens: int
    hit_tokens: int

    @property
    def block_hit_rate(self) -> float:
        return self.hit_blocks / self.blocks if self.blocks else 0.0

    @property
    def token_hit_rate(self) -> float:
        return self.hit_tokens / self.tokens if self.tokens else 0.0


def implied_prefix_cache(requests: Iterable[ScheduledRequest], block_tokens: int) -> PrefixCacheStats:
    cached: dict[int, int] = {}  # hash id -> the most of its tokens any earlier request sent
    blocks = hit_blocks = tokens = hit_tokens = 0
    for scheduled in requests:
        request = scheduled.request
        block_chain = token_chain = True
        for hash_id, size in zip(request.hash_ids, request.block_sizes(block_tokens), strict=True):
            held = cached.get(hash_id, 0)
            block_chain = block_chain and held > 0
            blocks += 1
            tokens += size
            hit_blocks += block_chain
            if token_chain:
                # A block sent short (a turn's last block) and now sent whole hits only as far as
                # it was sent, and nothing after it can hit.
                hit_tokens += min(held, size)
                token_chain = held >= size
        for hash_id, size in zip(request.hash_ids, request.block_sizes(block_tokens), strict=True):
            cached[hash_id] = max(cached.get(hash_id, 0), size)
    return PrefixCacheStats(blocks, hit_blocks, tokens, hit_tokens)


# --- the sample trace the project ships -------------------------------------------------------

SAMPLE_TRACE = Path(__file__).resolve().parent.parent / "data" / "sample_trace.jsonl"
# (class, shared system prefix in blocks, unique user blocks (min, max), share of requests)
_SAMPLE_PREFIXES = (("chat", 4, (1, 2), 0.3), ("agent", 2, (1, 3), 0.2), ("summarize", 1, (2, 6), 0.15))
_SAMPLE_TURN_SHARE = 0.2  # the next turn of an earlier conversation: its blocks, then new ones
_SAMPLE_THINK_MS = 5000  # a next turn comes once the previous one has been answered and read
_SAMPLE_MAX_BLOCKS = 12  # with outputs, stays within an 8,192-token context


def sample_trace_lines(
    requests: int = 240, rate: float = 2.0, seed: int = 0, block_tokens: int = DEFAULT_BLOCK_TOKENS
) -> list[str]:
    """A deterministic Mooncake trace with production's shape: a few long system prefixes shared
    by many requests, multi-turn chains (each turn's `hash_ids` extend its conversation's
    previous turn), and unique requests (no class), at Poisson arrivals of `rate` per second."""
    rng = random.Random(f"slogate-sample-trace:{seed}")
    next_id = 0

    def new_ids(n: int) -> list[int]:
        nonlocal next_id
        next_id += n
        return list(range(next_id - n, next_id))

    prefixes = {name: new_ids(blocks) for name, blocks, _, _ in _SAMPLE_PREFIXES}
    conversations: list[tuple[str, list[int], float]] = []  # (class, hash_ids, time) of each one's latest turn
    lines = []
    now_ms = 0.0
    for _ in range(requests):
        pick = rng.random()
        request_class: str | None = None
        for name, _, (low, high), share in _SAMPLE_PREFIXES:
            if pick < share:
                request_class, hash_ids = name, prefixes[name] + new_ids(rng.randint(low, high))
                conversations.append((name, hash_ids, now_ms))
                break
            pick -= share
        else:
            answered = [i for i, (_, _, sent_ms) in enumerate(conversations) if now_ms - sent_ms >= _SAMPLE_THINK_MS]
            if pick < _SAMPLE_TURN_SHARE and answered:
                index = rng.choice(answered)
                request_class, previous, _ = conversations[index]
                grown = previous + new_ids(rng.randint(1, 2))
                hash_ids = grown if len(grown) <= _SAMPLE_MAX_BLOCKS else prefixes[request_class] + new_ids(1)
                conversations[index] = (request_class, hash_ids, now_ms)
            else:
                hash_ids = new_ids(rng.randint(1, 8))
        input_length = (len(hash_ids) - 1) * block_tokens + rng.randint(block_tokens // 8, block_tokens)
        entry: dict[str, object] = {
            "timestamp": round(now_ms),
            "input_length": input_length,
            "output_length": rng.randint(16, 256),
            "hash_ids": hash_ids,
        }
        if request_class is not None:
            entry["class"] = request_class
        lines.append(json.dumps(entry))
        now_ms += rng.expovariate(rate) * 1000.0
    return lines


def write_sample_trace(path: str | Path = SAMPLE_TRACE, **options: int | float) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(sample_trace_lines(**options)) + "\n", encoding="utf-8")  # type: ignore[arg-type]
    return path


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m slogate.locustfiles.load.trace")
    commands = parser.add_subparsers(dest="command", required=True)
    make = commands.add_parser("make-sample", help="write the sample Mooncake trace (deterministic)")
    make.add_argument("path", nargs="?", default=str(SAMPLE_TRACE))
    make.add_argument("--requests", type=int, default=240)
    make.add_argument("--rate", type=float, default=2.0, help="requests per second")
    make.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    print(write_sample_trace(args.path, requests=args.requests, rate=args.rate, seed=args.seed))


if __name__ == "__main__":
    main()
