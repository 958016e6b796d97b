"""Images in chat requests (`--images`, `--image-size`, `--shared-images`) and in datasets.

A generated image is a PNG encoded here (zlib; no imaging library): a seeded row of random pixels,
each row below it the row above rotated by a seeded step. Every image is new (its seed comes from
the user's seeded generator and the run's prompt nonce, so neither a server's image cache nor its
prefix cache can hide its cost), yet compresses to ~27 KB at 512x512 and costs ~5 ms to make, off
the request's clock (the request is built before its timer starts). `--shared-images K` sends
images drawn from one fixed set of K instead (made once per process, the same in every run).

Images go first in the first user message of a conversation, as `image_url` content parts with
`data:image/png;base64,...` URIs, the text after them; later turns resend them with the history.
A request carries the tag `images_<n>`, n the image parts of its messages, for SLOs to name.

Datasets: a ShareGPT entry's `image` (a path or URL, or a list of them: the ShareGPT-4V/LLaVA
shape; `<image>` placeholders are removed from the text) goes into its first human turn; a chat
JSONL line's `image_url` parts are sent as they are. A path (relative to the dataset file) is
read once, at load, into a data URI; `data:` and `http(s):` URLs pass unchanged.
"""

from __future__ import annotations

import base64
import dataclasses
import mimetypes
import random
import struct
import zlib
from pathlib import Path
from typing import Any

from slogate.slo.gate.record import images_tag

DEFAULT_SIZE = (512, 512)
MAX_SIDE = 8192
_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_URL_SCHEMES = ("data:", "http://", "https://")
_IMAGE_TYPES = {"image/png", "image/jpeg", "image/gif", "image/webp", "image/bmp"}
PLACEHOLDER = "<image>"  # LLaVA's mark in a ShareGPT-4V human turn


def parse_size(text: str) -> tuple[int, int]:
    """`WxH` as (width, height); ValueError (one line) otherwise."""
    width, sep, height = str(text).strip().lower().partition("x")
    try:
        size = int(width), int(height)
    except ValueError:
        raise ValueError(f"--image-size must be WxH (e.g. 512x512), got {text!r}") from None
    if not sep or not all(1 <= side <= MAX_SIDE for side in size):
        raise ValueError(f"--image-size must be WxH with sides 1..{MAX_SIDE}, got {text!r}")
    return size


def range_text(images: tuple[int, int]) -> str:
    """`--images` as given: `N` or `A-B`."""
    lo, hi = images
    return f"{lo}" if lo == hi else f"{lo}-{hi}"


def check(images: tuple[int, int], shared: int, endpoint: str, dataset: str) -> None:
    """The image options' own bounds and the workloads they apply to; ValueError (one line)."""
    lo, hi = images
    if lo < 0 or hi < lo:
        raise ValueError(f"--images must be N >= 0 or A-B with 0 <= A <= B, got {range_text(images)}")
    if shared < 0:
        raise ValueError(f"--shared-images must be >= 0, got {shared}")
    if hi == 0:
        return
    if endpoint not in ("chat", "responses"):
        raise ValueError(f"--images needs --endpoint chat or responses (a text prompt has no images), got {endpoint!r}")
    if dataset:
        raise ValueError("--images does not apply to --dataset: its entries carry their own images")


def png(width: int, height: int, seed: str) -> bytes:
    """A `width` x `height` RGB PNG of seeded pixels: random within a row, rows rotated copies."""
    rng = random.Random(seed)
    row = rng.randbytes(width * 3)
    step = 3 * rng.randrange(1, width) if width > 1 else 0
    rows = []
    for y in range(height):
        k = (y * step) % len(row)
        rows.append(b"\x00" + row[k:] + row[:k])  # filter 0 (none) before each row
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        _PNG_SIGNATURE
        + _chunk(b"IHDR", header)
        + _chunk(b"IDAT", zlib.compress(b"".join(rows), 1))
        + _chunk(b"IEND", b"")
    )


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def data_uri(data: bytes, mime: str = "image/png") -> str:
    return f"data:{mime};base64,{base64.b64encode(data).decode('ascii')}"


def image_part(url: str) -> dict[str, Any]:
    return {"type": "image_url", "image_url": {"url": url}}


def count(messages: Any) -> int:
    """The image parts of `messages` (content parts of type `image_url`)."""
    return sum(
        1
        for message in messages
        if isinstance(message.get("content"), list)
        for part in message["content"]
        if isinstance(part, dict) and part.get("type") == "image_url"
    )


def tags(images: tuple[int, int]) -> list[str]:
    """Every `images_<n>` tag a request of `--images A-B` can carry (none without images)."""
    lo, hi = images
    return [images_tag(n) for n in range(lo, hi + 1)] if hi > 0 else []


class ImageMaker:
    """Draws each request's images (one per process, shared by its users)."""

    def __init__(self, images: tuple[int, int], size: tuple[int, int], shared: int, seed: int, nonce: str) -> None:
        self.images, self.size, self.nonce = images, size, nonce
        self.shared = [data_uri(png(*size, f"slogate-shared-image:{seed}:{i}")) for i in range(shared)]

    def urls(self, rng: random.Random) -> list[str]:
        """A request's image URLs: a count uniform in the range (no draw for a single count)."""
        lo, hi = self.images
        n = lo if lo == hi else rng.randint(lo, hi)
        if self.shared:
            return [rng.choice(self.shared) for _ in range(n)]
        return [data_uri(png(*self.size, f"slogate-image:{self.nonce}:{rng.getrandbits(64)}")) for _ in range(n)]

    def with_images(self, message: dict[str, Any], rng: random.Random) -> dict[str, Any]:
        """`message` (a user message of text) with this request's images before its text; as it
        is without any (a request of `images_0` is the same text request as without --images)."""
        parts = [image_part(url) for url in self.urls(rng)] if self.images[1] else []
        return {**message, "content": [*parts, {"type": "text", "text": message["content"]}]} if parts else message


# --- datasets ----------------------------------------------------------------------------------


def _file_uri(reference: str, base: Path, cache: dict[str, str]) -> str:
    """A path relative to the dataset read into a data URI (once per path); URLs unchanged."""
    if reference.startswith(_URL_SCHEMES):
        return reference
    path = base / reference
    key = str(path)
    if key not in cache:
        mime = mimetypes.guess_type(path.name)[0]
        if mime not in _IMAGE_TYPES:
            raise ValueError(f"image {reference!r}: not a PNG, JPEG, GIF, WebP or BMP file name")
        try:
            cache[key] = data_uri(path.read_bytes(), mime)
        except OSError as e:
            raise ValueError(f"image {reference!r}: cannot read {path}: {e.strerror or e}") from None
    return cache[key]


def _resolved_part(part: Any, base: Path, cache: dict[str, str]) -> Any:
    if not isinstance(part, dict) or part.get("type") != "image_url":
        return part
    image = part.get("image_url")
    url = image.get("url") if isinstance(image, dict) else image
    if not isinstance(url, str) or not url:
        raise ValueError("an image_url part needs a non-empty 'url'")
    return {**part, "image_url": {**(image if isinstance(image, dict) else {}), "url": _file_uri(url, base, cache)}}


def _resolved_message(message: dict[str, Any], base: Path, cache: dict[str, str]) -> dict[str, Any]:
    content = message.get("content")
    if not isinstance(content, list):
        return message
    return {**message, "content": [_resolved_part(part, base, cache) for part in content]}


def _sharegpt_images(value: Any) -> list[str]:
    references = value if isinstance(value, list) else [value]
    if not references or not all(isinstance(r, str) and r for r in references):
        raise ValueError(f"'image' must be a path or URL, or a list of them, got {value!r}")
    return references


def load_images(conversation: Any, image_field: Any, base: Path, cache: dict[str, str]) -> Any:
    """A dataset `Conversation` with its image parts' paths read into data URIs and, for a ShareGPT
    entry, its `image` field (`image_field`, None when absent) before its first human turn's text.
    ValueError (one line) for an image that cannot be read."""
    turns = [
        dataclasses.replace(turn, messages=tuple(_resolved_message(m, base, cache) for m in turn.messages))
        for turn in conversation.turns
    ]
    if image_field is not None:
        parts = [image_part(_file_uri(r, base, cache)) for r in _sharegpt_images(image_field)]
        first = turns[0]
        at = next(i for i, m in enumerate(first.messages) if m["role"] == "user")
        message = first.messages[at]
        text = message["content"].replace(PLACEHOLDER, "").strip()
        messages = list(first.messages)
        messages[at] = {**message, "content": [*parts, {"type": "text", "text": text}]}
        turns[0] = dataclasses.replace(first, messages=tuple(messages))
    return dataclasses.replace(conversation, turns=tuple(turns))


def dataset_image_tags(conversations: list[Any]) -> list[str]:
    """The `images_<n>` tags a dataset's requests can carry: none for a dataset without images."""
    counts = set()
    for conversation in conversations:
        seen = 0
        for turn in conversation.turns:
            seen += count(turn.messages)
            counts.add(seen)
    return [images_tag(n) for n in sorted(counts)] if max(counts, default=0) > 0 else []
