"""The prompt mix: requests whose system prompt is one of a few shared prefixes (reusable by the
server's prefix cache) or a unique prefix (not reusable), followed by a unique user message.

Both classes get the same prompt length by default, so their TTFT differs only by what the
cache saves. Lengths are in tokens as the server counts them: a sample of the word pool is
tokenized once through the server's `/tokenize`; the real per-request counts come back in `usage`.
"""

from __future__ import annotations

import logging
import random
from dataclasses import asdict, dataclass
from typing import Any

from slogate.locustfiles import server
from slogate.locustfiles.endpoints import CHAT
from slogate.locustfiles.words import WORDS
from slogate.slo.record import SHARED, UNIQUE

log = logging.getLogger("slogate.workload")

FALLBACK_TOKENS_PER_WORD = 1.3
_CALIBRATION_WORDS = 2000


@dataclass(frozen=True, slots=True)
class WorkloadConfig:
    shared_prefixes: int = 4
    shared_prefix_tokens: int = 1024
    shared_fraction: float = 0.5
    unique_prefix_tokens: int | None = None  # None: same as shared_prefix_tokens
    user_message_tokens: int = 64
    max_tokens: int = 32
    temperature: float = 0.0
    model: str | None = None  # None: the first id from /v1/models
    seed: int = 0
    ignore_eos: bool = False
    request_timeout_s: float = 120.0
    prime_prefixes: bool = True
    # Makes every unique-class prompt and every user message unique across runs, not only within
    # one: a second run against a server with prefix caching must not hit what the first cached.
    # A new one per run by default (the report records it); shared prefixes do not depend on it.
    prompt_nonce: str = ""

    def __post_init__(self) -> None:
        if not 0.0 <= self.shared_fraction <= 1.0:
            raise ValueError(f"--shared-fraction must be within [0, 1], got {self.shared_fraction}")
        if self.shared_prefixes < 1 and self.shared_fraction > 0:
            raise ValueError("--shared-prefixes must be >= 1 when --shared-fraction > 0")
        for name in ("shared_prefix_tokens", "user_message_tokens", "max_tokens"):
            if getattr(self, name) < 0 or (name == "max_tokens" and self.max_tokens < 1):
                raise ValueError(f"--{name.replace('_', '-')} must be positive, got {getattr(self, name)}")

    @property
    def unique_tokens(self) -> int:
        return self.shared_prefix_tokens if self.unique_prefix_tokens is None else self.unique_prefix_tokens

    def describe(self) -> dict[str, Any]:
        """The workload identity that reports and baselines record."""
        return asdict(self)


@dataclass(frozen=True, slots=True)
class ChatRequest:
    request_class: str
    body: dict[str, Any]


def _text(rng: random.Random, n_words: int) -> str:
    return " ".join(rng.choices(WORDS, k=n_words))


class Workload:
    """Builds requests; one per process, shared by its users (it holds no per-request state)."""

    def __init__(self, config: WorkloadConfig, model: str, tokens_per_word: float) -> None:
        self.config = config
        self.model = model
        self.tokens_per_word = tokens_per_word
        prefix_rng = random.Random(f"slogate-prefixes:{config.seed}")
        self.shared_prefixes = [
            f"[system prompt {i}] " + _text(prefix_rng, self._words(config.shared_prefix_tokens))
            for i in range(config.shared_prefixes)
        ]

    @classmethod
    def prepare(cls, config: WorkloadConfig, host: str, headers: dict[str, str]) -> Workload:
        """Discover the model and calibrate lengths against the target; raises `server.TargetError`."""
        model = config.model or server.first_model_id(host, headers)
        sample = _text(random.Random(f"slogate-calibration:{config.seed}"), _CALIBRATION_WORDS)
        counted = server.count_tokens(host, headers, model, sample)
        if counted is None:
            log.warning("target has no /tokenize; prompt lengths assume %.1f tokens/word", FALLBACK_TOKENS_PER_WORD)
        return cls(config, model, counted / _CALIBRATION_WORDS if counted else FALLBACK_TOKENS_PER_WORD)

    def _words(self, tokens: int) -> int:
        return max(1, round(tokens / self.tokens_per_word)) if tokens > 0 else 0

    def _run_tag(self) -> str:
        return f"[run {self.config.prompt_nonce}] " if self.config.prompt_nonce else ""

    def _body(self, system: str, rng: random.Random) -> dict[str, Any]:
        cfg = self.config
        messages = [
            {"role": "system", "content": system},
            {"role": "user", "content": self._run_tag() + _text(rng, self._words(cfg.user_message_tokens))},
        ]
        return CHAT.body(self.model, messages, cfg.max_tokens, cfg.temperature, cfg.ignore_eos)

    def next_request(self, rng: random.Random) -> ChatRequest:
        cfg = self.config
        if rng.random() < cfg.shared_fraction:
            return ChatRequest(SHARED, self._body(rng.choice(self.shared_prefixes), rng))
        unique_prefix = f"{self._run_tag()}[request {rng.getrandbits(64):016x}] " + _text(
            rng, self._words(cfg.unique_tokens)
        )
        return ChatRequest(UNIQUE, self._body(unique_prefix, rng))

    def priming_requests(self) -> list[dict[str, Any]]:
        """One short non-streamed request per shared prefix, so the cache is warm before measuring."""
        rng = random.Random(f"slogate-priming:{self.config.seed}")
        bodies = []
        for prefix in self.shared_prefixes:
            body = self._body(prefix, rng)
            body.update(stream=False, max_tokens=1)
            body.pop("stream_options")
            bodies.append(body)
        return bodies
