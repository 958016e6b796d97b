"""Prompt datasets, the Locust-free part: load and validate a file of conversations, sample them
with a seed, and write the small sample files the project ships.

Two formats, told apart by the file's first character:

- JSONL of OpenAI chat requests (`{`): one request a line, `{"messages": [...], "max_tokens": N,
  "class": "..."}`; `class` is optional (a tag), every other field goes into the request body as
  it is (`temperature`, `tools`, ...). A line of ShareGPT shape (`conversations`) is read as below.
- ShareGPT JSON (`[`): a list of `{"conversations": [{"from": "human"|"gpt"|"system", "value":
  "..."}, ...]}`. The human turns are replayed in order as one conversation whose assistant
  turns are the server's own answers; the recorded `gpt` answers only size `max_tokens` (about
  1.3 tokens a word, or a fixed `--max-tokens` where the caller passes one).

Images (a ShareGPT entry's `image`, chat `image_url` parts) are read by images.py's `load_images`.
Errors are one line naming the file and line (`DatasetError`), found before any load is sent.
"""

from __future__ import annotations

import argparse
import json
import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from slogate.locustfiles.load import images
from slogate.locustfiles.load.words import WORDS
from slogate.slo.gate.record import file_class

ROLES = ("system", "user", "assistant", "developer", "tool")
SHAREGPT_ROLES = {"system": "system", "human": "user", "gpt": "assistant"}
TOKENS_PER_ANSWER_WORD = 1.3  # sizes max_tokens from a recorded answer without a tokenizer
DEFAULT_MAX_TOKENS = 128  # a ShareGPT human turn with no recorded answer after it
_REQUEST_FIELDS = ("messages", "max_tokens", "class")

Message = dict[str, Any]


class DatasetError(Exception):
    """A dataset that cannot be replayed; str() is one line naming the file and line."""


@dataclass(frozen=True, slots=True)
class Turn:
    messages: tuple[Message, ...]  # what this turn adds to the conversation, then one request
    max_tokens: int


@dataclass(frozen=True, slots=True)
class Conversation:
    """One dataset entry: its turns are sent in order, each answer (the server's) appended to the
    history before the next turn's messages. A chat request is a conversation of one turn."""

    line: int
    turns: tuple[Turn, ...]
    request_class: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)  # more request body fields, passed through

    def messages(self, turn: int, answers: Sequence[str]) -> list[Message]:
        """The messages of turn `turn`'s request: every turn before it followed by the server's
        answer to it (`answers[i]` to turn i), then this turn's own messages."""
        if len(answers) < turn:
            raise ValueError(f"turn {turn} needs the answers to the {turn} turns before it, got {len(answers)}")
        history: list[Message] = []
        for index in range(turn):
            history.extend(self.turns[index].messages)
            history.append({"role": "assistant", "content": answers[index]})
        history.extend(self.turns[turn].messages)
        return history


# --- loading and validation -------------------------------------------------------------------


def _positive_int(entry: dict, name: str) -> int:
    if name not in entry:
        raise ValueError(f"missing field '{name}'")
    value = entry[name]
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"'{name}' must be an integer >= 1, got {value!r}")
    return value


def _chat_request(entry: dict, line: int) -> Conversation:
    messages = entry.get("messages")
    if messages is None:
        raise ValueError("missing field 'messages'")
    if not isinstance(messages, list) or not messages:
        raise ValueError("'messages' must be a non-empty list")
    for index, message in enumerate(messages):
        if not isinstance(message, dict):
            raise ValueError(f"messages[{index}] must be an object")
        if message.get("role") not in ROLES:
            raise ValueError(
                f"messages[{index}]: 'role' must be one of {', '.join(ROLES)}, got {message.get('role')!r}"
            )
        if not isinstance(message.get("content"), str | list):
            raise ValueError(f"messages[{index}]: 'content' must be a string or a list of parts")
    extra = {k: v for k, v in entry.items() if k not in _REQUEST_FIELDS}
    turn = Turn(tuple(messages), _positive_int(entry, "max_tokens"))
    return Conversation(line, (turn,), file_class(entry.get("class")), extra)


def _answer_tokens(answer: str) -> int:
    return max(1, round(len(answer.split()) * TOKENS_PER_ANSWER_WORD))


def _sharegpt_conversation(entry: dict, line: int, max_tokens: int | None) -> Conversation:
    turns_in = entry.get("conversations")
    if turns_in is None:
        raise ValueError("missing field 'conversations'")
    if not isinstance(turns_in, list):
        raise ValueError("'conversations' must be a list")
    pending: list[Message] = []  # system and human messages not yet sent
    turns: list[Turn] = []
    for index, item in enumerate(turns_in):
        if not isinstance(item, dict):
            raise ValueError(f"conversations[{index}] must be an object")
        role = SHAREGPT_ROLES.get(item.get("from"))  # type: ignore[arg-type]
        if role is None:
            raise ValueError(f"conversations[{index}]: 'from' must be human, gpt or system, got {item.get('from')!r}")
        value = item.get("value")
        if not isinstance(value, str):
            raise ValueError(f"conversations[{index}]: 'value' must be a string")
        if role != "assistant":
            pending.append({"role": role, "content": value})
        elif pending and pending[-1]["role"] == "user":
            turns.append(Turn(tuple(pending), max_tokens or _answer_tokens(value)))
            pending = []
        # A gpt turn with no human turn before it answers nothing the replay sends: skipped.
    if pending and pending[-1]["role"] == "user":
        turns.append(Turn(tuple(pending), max_tokens or DEFAULT_MAX_TOKENS))
    if not turns:
        raise ValueError("the conversation has no human turn")
    return Conversation(line, tuple(turns), file_class(entry.get("class")))


def _entry(entry: object, line: int, max_tokens: int | None, base: Path, cache: dict[str, str]) -> Conversation:
    """One entry; its image files (relative to `base`, each read once into `cache`) as data URIs."""
    if not isinstance(entry, dict):
        raise ValueError(f"expected a JSON object, got {type(entry).__name__}")
    if "conversations" in entry:
        conversation = _sharegpt_conversation(entry, line, max_tokens)
        return images.load_images(conversation, entry.get("image"), base, cache)
    return images.load_images(_chat_request(entry, line), None, base, cache)


def _json_array_items(text: str) -> Iterator[tuple[int, object]]:
    """(line, item) for each item of a top-level JSON array: errors can name the item's line."""
    decoder = json.JSONDecoder()

    def skip_space(at: int) -> int:
        while at < len(text) and text[at] in " \t\r\n":
            at += 1
        return at

    def line_of(at: int) -> int:
        return text.count("\n", 0, at) + 1

    at = skip_space(text.index("[") + 1)
    if at < len(text) and text[at] == "]":
        return
    while True:
        try:
            item, end = decoder.raw_decode(text, at)
        except ValueError as e:
            raise DatasetError(f"{line_of(at)}: not valid JSON ({getattr(e, 'msg', e)})") from None
        yield line_of(at), item
        at = skip_space(end)
        if at < len(text) and text[at] == "]":
            if skip_space(at + 1) != len(text):
                raise DatasetError(f"{line_of(at + 1)}: text after the list")
            return
        if at >= len(text) or text[at] != ",":
            raise DatasetError(f"{line_of(at)}: expected ',' or ']' after an item")
        at = skip_space(at + 1)


def _jsonl_items(text: str) -> Iterator[tuple[int, object]]:
    for line, content in enumerate(text.splitlines(), start=1):
        if content.strip():
            try:
                yield line, json.loads(content)
            except ValueError as e:
                raise DatasetError(f"{line}: not valid JSON ({getattr(e, 'msg', e)})") from None


def dataset_format(path: str | Path) -> str:
    """`sharegpt` (a JSON list) or `chat-jsonl`, as `load_dataset` tells them apart."""
    with open(path, encoding="utf-8") as text:
        return "sharegpt" if text.read(4096).lstrip().startswith("[") else "chat-jsonl"


def load_dataset(path: str | Path, max_tokens: int | None = None) -> list[Conversation]:
    """Every conversation of a dataset file, validated in full; raises `DatasetError`.

    `max_tokens` fixes every ShareGPT turn's answer length (default: sized from the recorded
    answer); chat request lines always carry their own.
    """
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as e:
        raise DatasetError(f"{path}: cannot read: {e.strerror or e}") from None
    except UnicodeDecodeError:
        raise DatasetError(f"{path}: not UTF-8 text") from None
    items = _json_array_items(text) if text.lstrip().startswith("[") else _jsonl_items(text)
    conversations: list[Conversation] = []
    image_files: dict[str, str] = {}
    try:
        for line, item in items:
            try:
                conversations.append(_entry(item, line, max_tokens, Path(path).parent, image_files))
            except ValueError as e:
                raise DatasetError(f"{line}: {e}") from None
    except DatasetError as e:
        raise DatasetError(f"{path}:{e}") from None
    if not conversations:
        raise DatasetError(f"{path}: no requests")
    return conversations


def sampled(conversations: Sequence[Conversation], seed: int, worker: int = 0) -> Iterator[Conversation]:
    """The conversations without end, in a seeded order: each pass is a new permutation, so every
    entry is used once before any is used twice. The same seed gives the same sequence; each
    `--processes` worker has its own (the same order everywhere would send the same entry from
    every worker at once, and flatter the server's prefix cache)."""
    rng = random.Random(f"slogate-dataset:{seed}" + (f":worker-{worker}" if worker else ""))
    order = list(range(len(conversations)))
    while True:
        rng.shuffle(order)
        for index in order:
            yield conversations[index]


# --- the sample datasets the project ships ----------------------------------------------------

DATA = Path(__file__).resolve().parent.parent / "data"
SAMPLE_CHAT = DATA / "sample_chat.jsonl"
SAMPLE_SHAREGPT = DATA / "sample_sharegpt.json"
_SAMPLE_SYSTEMS = {
    "support": "You are a support agent for a cloud inference service. Answer briefly and cite the docs.",
    "code": "You are a senior engineer. Review the code the user sends and suggest concrete changes.",
}


def _sentence(rng: random.Random, low: int, high: int) -> str:
    return " ".join(rng.choices(WORDS, k=rng.randint(low, high))).capitalize() + "."


def sample_chat_lines(requests: int = 40, seed: int = 0) -> list[str]:
    """Deterministic chat requests: two classes with their own system prompt, a class without,
    and some lines with extra body fields (passed through)."""
    rng = random.Random(f"slogate-sample-chat:{seed}")
    lines = []
    for index in range(requests):
        request_class = ("support", "code", None)[index % 3]
        messages: list[Message] = []
        if request_class is not None:
            messages.append({"role": "system", "content": _SAMPLE_SYSTEMS[request_class]})
        messages.append({"role": "user", "content": " ".join(_sentence(rng, 8, 40) for _ in range(rng.randint(1, 4)))})
        entry: dict[str, Any] = {"messages": messages, "max_tokens": rng.choice((32, 64, 128))}
        if request_class is not None:
            entry["class"] = request_class
        if index % 4 == 0:
            entry["temperature"] = 0.7
        lines.append(json.dumps(entry))
    return lines


def sample_sharegpt(conversations: int = 20, seed: int = 0) -> list[dict[str, Any]]:
    """Deterministic ShareGPT conversations of 1 to 4 human turns, each with a recorded answer."""
    rng = random.Random(f"slogate-sample-sharegpt:{seed}")
    entries = []
    for index in range(conversations):
        turns: list[dict[str, str]] = []
        for _ in range(rng.randint(1, 4)):
            turns.append({"from": "human", "value": _sentence(rng, 6, 30)})
            turns.append({"from": "gpt", "value": " ".join(_sentence(rng, 8, 20) for _ in range(rng.randint(1, 5)))})
        entries.append({"id": f"sample-{index}", "conversations": turns})
    return entries


def write_samples(directory: str | Path = DATA) -> list[Path]:
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    chat, sharegpt = directory / SAMPLE_CHAT.name, directory / SAMPLE_SHAREGPT.name
    chat.write_text("\n".join(sample_chat_lines()) + "\n", encoding="utf-8")
    sharegpt.write_text(json.dumps(sample_sharegpt(), indent=1) + "\n", encoding="utf-8")
    return [chat, sharegpt]


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m slogate.locustfiles.load.datasets")
    commands = parser.add_subparsers(dest="command", required=True)
    make = commands.add_parser("make-samples", help="write the sample chat and ShareGPT datasets (deterministic)")
    make.add_argument("directory", nargs="?", default=str(DATA))
    args = parser.parse_args(argv)
    for path in write_samples(args.directory):
        print(path)


if __name__ == "__main__":
    main()
