"""The prompt mix: requests whose system prompt is one of a few shared prefixes (reusable by the
server's prefix cache) or a unique prefix (not reusable), followed by a unique user message.

Both classes get the same prompt length by default, so their TTFT differs only by what the
cache saves. With `turns` above 1 a request opens a conversation: each later turn resends the
previous request's messages, the answer exactly as it was streamed, and a new user message.

Lengths are in tokens as the server counts them: a sample of the word pool is tokenized once
through the server's `/tokenize`; the real per-request counts come back in `usage`.
"""

from __future__ import annotations

import logging
import random
from dataclasses import asdict, dataclass, replace
from typing import Any

from slogate.locustfiles.load import adapters, datasets, output_check, server
from slogate.locustfiles.load import images as request_images  # `images` names WorkloadConfig's field
from slogate.locustfiles.load.endpoints import ENDPOINTS, Endpoint, Messages
from slogate.locustfiles.load.words import WORDS
from slogate.slo.gate.record import ALL, SHARED, UNIQUE, conversation_tag_names, conversation_tags, images_tag

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
    endpoint: str = "chat"  # a key of endpoints.ENDPOINTS
    turns: tuple[int, int] = (1, 1)  # turns per conversation, drawn uniformly per conversation
    think_time_s: tuple[float, float] = (0.0, 0.0)  # between a turn's answer and the next turn
    dataset: str = ""  # --dataset: requests from this file instead of the generated prompt mix
    images: tuple[int, int] = (0, 0)  # image parts per request, drawn uniformly (images.py)
    image_size: tuple[int, int] = request_images.DEFAULT_SIZE  # width, height
    shared_images: int = 0  # draw the images from a fixed set of this many (0: a new one each time)
    tools: str = ""  # --tools FILE: OpenAI tools JSON (output_check.py)
    tool_choice: str = ""  # --tool-choice: auto, required, none or a tool's name ("": the server's default)
    response_format: str = ""  # --response-format FILE: the JSON schema every answer must match
    adapters: adapters.Adapters = ()  # --adapters: (LoRA adapter, weight) pairs (adapters.py)

    def __post_init__(self) -> None:
        if self.endpoint not in ENDPOINTS:
            raise ValueError(f"--endpoint must be one of {', '.join(ENDPOINTS)}, got {self.endpoint!r}")
        request_images.check(self.images, self.shared_images, self.endpoint, self.dataset)
        lo, hi = self.turns
        if lo < 1 or hi < lo:
            raise ValueError(f"--turns must be N >= 1 or A-B with 1 <= A <= B, got {_range_text(self.turns)}")
        if self.dataset and self.turns != (1, 1):
            raise ValueError("--turns does not apply to --dataset: its conversations have their own turns")
        lo_s, hi_s = self.think_time_s
        if lo_s < 0 or hi_s < lo_s:
            raise ValueError(
                f"--think-time-s must be X >= 0 or A-B with 0 <= A <= B, got {_range_text(self.think_time_s)}"
            )
        if not self.request_timeout_s > 0:
            raise ValueError(f"--request-timeout must be positive, got {self.request_timeout_s:g}")
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

    @property
    def max_turns(self) -> int:
        return self.turns[1]

    def available_tags(self) -> list[str]:
        """Every tag (SLO `class`) this workload's requests can carry."""
        prefix = [SHARED] * (self.shared_fraction > 0) + [UNIQUE] * (self.shared_fraction < 1)
        return [ALL, *prefix, *conversation_tag_names(self.max_turns), *request_images.tags(self.images)]

    def describe(self) -> dict[str, Any]:
        """The workload identity that reports and baselines record. The endpoint and conversation
        fields are left out at their defaults (chat, one turn), so that a baseline recorded before
        they existed still compares with today's single-turn chat workload."""
        out = asdict(self)
        if not self.dataset:
            del out["dataset"]
        if self.endpoint == "chat":
            del out["endpoint"]
        if self.max_turns == 1:
            del out["turns"], out["think_time_s"]
        else:  # as a saved report reads them back, so that a baseline compares equal
            out["turns"], out["think_time_s"] = list(self.turns), list(self.think_time_s)
        if self.images[1] == 0:  # no images: as before they existed
            del out["images"], out["image_size"], out["shared_images"]
        else:
            out["images"], out["image_size"] = list(self.images), list(self.image_size)
        if self.adapters:  # else left out, as before they existed
            out["adapters"] = adapters.describe(self.adapters)
        else:
            del out["adapters"]
        for name in ("tools", "tool_choice", "response_format"):  # unset: as before they existed
            if not out[name]:
                del out[name]
        return out


def _range_text(value: tuple[float, float]) -> str:
    lo, hi = value
    return f"{lo:g}" if lo == hi else f"{lo:g}-{hi:g}"


def parse_range(text: str, option: str, number: type[int] | type[float]) -> tuple[Any, Any]:
    """`N` or `A-B` (inclusive) as a (low, high) pair; ValueError (one line) when it is neither.
    Bounds are checked by `WorkloadConfig`."""
    low, sep, high = str(text).strip().partition("-")
    if not low and sep:  # a negative single value, e.g. -1
        low, sep, high = str(text).strip(), "", ""
    try:
        lo = number(low)
        hi = number(high) if sep else lo
    except ValueError:
        raise ValueError(f"{option} must be N or A-B, got {text!r}") from None
    return lo, hi


@dataclass(frozen=True, slots=True)
class ChatRequest:
    """One request: turn `turn` of a conversation of `turns` (1 of 1 without conversations)."""

    request_class: str
    body: dict[str, Any]
    messages: Messages
    tags: tuple[str, ...] = ()  # besides the request class
    turn: int = 1
    turns: int = 1
    conversation: datasets.Conversation | None = None  # --dataset: the entry this turn is from
    output: output_check.OutputSpec | None = None  # --tools / --response-format: checked at the stream's end
    adapter: str | None = None  # --adapters: the LoRA adapter it is sent to (its `model`)

    @property
    def has_follow_up(self) -> bool:
        return self.turn < self.turns


def _text(rng: random.Random, n_words: int) -> str:
    return " ".join(rng.choices(WORDS, k=n_words))


DATASET_CLASS = "dataset"  # the request class of a dataset entry without a `class`
_SET_BY_SLOGATE = ("model", "stream", "stream_options")  # dataset fields that never override the body


def dataset_tags(conversations: list[datasets.Conversation]) -> list[str]:
    """Every tag (SLO `class`) a replay of `conversations` can produce."""
    classes = sorted({c.request_class or DATASET_CLASS for c in conversations})
    turns = max(len(c.turns) for c in conversations)
    return [ALL, *classes, *conversation_tag_names(turns), *request_images.dataset_image_tags(conversations)]


class Workload:
    """Builds requests; one per process, shared by its users (it holds no per-request state but
    the position in a `--dataset`'s seeded order)."""

    def __init__(self, config: WorkloadConfig, model: str, tokens_per_word: float, worker: int = 0) -> None:
        self.config = config
        self.dataset = datasets.load_dataset(config.dataset) if config.dataset else None
        self.entries = datasets.sampled(self.dataset, config.seed, worker) if self.dataset else None
        self.output = output_check.load(config)
        self.output_fields = self.output.body_fields() if self.output else {}
        self.dataset_turns = max(len(c.turns) for c in self.dataset) if self.dataset else 1
        self.images = request_images.ImageMaker(
            config.images, config.image_size, config.shared_images, config.seed, config.prompt_nonce
        )
        # Requests carry `images_<n>` where images are sent: --images, or a dataset that has some.
        dataset_images = request_images.dataset_image_tags(self.dataset) if self.dataset else []
        self.tags_images = config.images[1] > 0 or bool(dataset_images)
        self.endpoint: Endpoint = ENDPOINTS[config.endpoint]
        self.adapter_mix = adapters.AdapterMix(config.adapters) if config.adapters else None
        self.model = model
        self.tokens_per_word = tokens_per_word
        prefix_rng = random.Random(f"slogate-prefixes:{config.seed}")
        self.shared_prefixes = [
            f"[system prompt {i}] " + _text(prefix_rng, self._words(config.shared_prefix_tokens))
            for i in range(config.shared_prefixes)
        ]

    @classmethod
    def prepare(cls, config: WorkloadConfig, host: str, headers: dict[str, str], worker: int = 0) -> Workload:
        """Discover the model and calibrate lengths against the target; raises `server.TargetError`.
        `worker` is the process's `--processes` worker index (its own dataset order)."""
        model = config.model or server.first_model_id(host, headers)
        if config.adapters:
            adapters.check_served(host, headers, config.adapters)
        sample = _text(random.Random(f"slogate-calibration:{config.seed}"), _CALIBRATION_WORDS)
        counted = server.count_tokens(host, headers, model, sample)
        if counted is None:
            log.warning("target has no /tokenize; prompt lengths assume %.1f tokens/word", FALLBACK_TOKENS_PER_WORD)
        return cls(config, model, counted / _CALIBRATION_WORDS if counted else FALLBACK_TOKENS_PER_WORD, worker)

    def _words(self, tokens: int) -> int:
        return max(1, round(tokens / self.tokens_per_word)) if tokens > 0 else 0

    def _run_tag(self) -> str:
        return f"[run {self.config.prompt_nonce}] " if self.config.prompt_nonce else ""

    def _user_message(self, rng: random.Random) -> dict[str, str]:
        words = self._words(self.config.user_message_tokens)
        return {"role": "user", "content": self._run_tag() + _text(rng, words)}

    def _body(self, messages: Messages, max_tokens: int | None = None) -> dict[str, Any]:
        cfg = self.config
        body = self.endpoint.body(self.model, messages, max_tokens or cfg.max_tokens, cfg.temperature, cfg.ignore_eos)
        body.update(self.output_fields)
        return body

    def _request(self, request_class: str, messages: Messages, turn: int, turns: int) -> ChatRequest:
        tags = (*(conversation_tags(turn) if self.config.max_turns > 1 else ()), *self._image_tags(messages))
        return ChatRequest(request_class, self._body(messages), messages, tags, turn, turns, output=self.output)

    def _image_tags(self, messages: Messages) -> tuple[str, ...]:
        return (images_tag(request_images.count(messages)),) if self.tags_images else ()

    def describe(self) -> dict[str, Any]:
        """The config's `describe()`, with the dataset's facts under `dataset`."""
        out = self.config.describe()
        if self.dataset is not None:
            kind = datasets.dataset_format(self.config.dataset)
            out["dataset"] = {"file": self.config.dataset, "format": kind, "entries": len(self.dataset)}
        return out

    def _dataset_request(self, conversation: datasets.Conversation, messages: Messages, turn: int) -> ChatRequest:
        """Turn `turn` (1-based) of a dataset entry, its extra fields passed through."""
        cfg = self.config
        max_tokens = conversation.turns[turn - 1].max_tokens
        body = self.endpoint.body(self.model, messages, max_tokens, cfg.temperature, cfg.ignore_eos)
        body.update((k, v) for k, v in conversation.extra.items() if k not in _SET_BY_SLOGATE)
        if "tools" in self.output_fields:  # --tools replaces the entry's tools, and the choice that named them
            body.pop("tool_choice", None)
        body.update(self.output_fields)  # the options' tools and format, which the check expects
        turns = len(conversation.turns)
        tags = (*(conversation_tags(turn) if self.dataset_turns > 1 else ()), *self._image_tags(messages))
        request_class = conversation.request_class or DATASET_CLASS
        return ChatRequest(request_class, body, messages, tags, turn, turns, conversation, self.output)

    def next_request(self, rng: random.Random) -> ChatRequest:
        """A new conversation's first turn (the only one without conversations)."""
        if self.entries is not None:
            conversation = next(self.entries)
            return self._to_adapter(self._dataset_request(conversation, conversation.messages(0, []), 1), None, rng)
        cfg = self.config
        if rng.random() < cfg.shared_fraction:
            request_class, system = SHARED, rng.choice(self.shared_prefixes)
        else:
            request_class = UNIQUE
            system = f"{self._run_tag()}[request {rng.getrandbits(64):016x}] " + _text(
                rng, self._words(cfg.unique_tokens)
            )
        lo, hi = cfg.turns
        turns = lo if lo == hi else rng.randint(lo, hi)  # no draw without a range: seeds keep their shapes
        messages = [{"role": "system", "content": system}, self.images.with_images(self._user_message(rng), rng)]
        return self._to_adapter(self._request(request_class, messages, 1, turns), None, rng)

    def follow_up(self, previous: ChatRequest, answer: str, rng: random.Random) -> ChatRequest:
        """The next turn: `previous`'s messages, its answer exactly as streamed, a new user message
        (with `--dataset`, the entry's next turn)."""
        if previous.conversation is not None:
            added = previous.conversation.turns[previous.turn].messages
            messages = [*previous.messages, {"role": "assistant", "content": answer}, *added]
            req = self._dataset_request(previous.conversation, messages, previous.turn + 1)
            return self._to_adapter(req, previous)
        messages = [*previous.messages, {"role": "assistant", "content": answer}, self._user_message(rng)]
        req = self._request(previous.request_class, messages, previous.turn + 1, previous.turns)
        return self._to_adapter(req, previous)

    def _to_adapter(
        self, req: ChatRequest, previous: ChatRequest | None, rng: random.Random | None = None
    ) -> ChatRequest:
        """`req` sent to its conversation's LoRA adapter (--adapters): `previous`'s, or one drawn with
        `rng` for a new conversation (no draw without adapters: seeds keep their prompts); its `model`
        is the adapter's name, its tag `adapter_<name>`."""
        if previous is not None:
            adapter = previous.adapter
        else:
            adapter = self.adapter_mix.choose(rng) if self.adapter_mix and rng else None
        if adapter is None:
            return req
        body = {**req.body, "model": adapter}
        return replace(req, body=body, tags=(*req.tags, adapters.adapter_tag(adapter)), adapter=adapter)

    def think_time_s(self, rng: random.Random) -> float:
        lo, hi = self.config.think_time_s
        return lo if lo == hi else rng.uniform(lo, hi)

    def priming_requests(self) -> list[dict[str, Any]]:
        """One short non-streamed request per shared prefix, so the cache is warm before measuring."""
        rng = random.Random(f"slogate-priming:{self.config.seed}")
        bodies = []
        for prefix in self.shared_prefixes:
            body = self._body([{"role": "system", "content": prefix}, self._user_message(rng)], max_tokens=1)
            body["stream"] = False
            body.pop("stream_options", None)
            bodies.append(body)
        # A server's prefix cache is per adapter (vLLM's block hashes include the LoRA): each one's.
        models = [name for name, _ in self.config.adapters]
        return [{**body, "model": model} for model in models for body in bodies] if models else bodies
