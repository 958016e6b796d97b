"""What bounds one request, whatever the server does: its time (`--request-timeout`, in all) and the
memory its stream's lines may take.

Time: the HTTP clients' timeouts are per socket operation, between bytes, so a server that trickles
a byte every few seconds would hold a request for as long as it likes. `deadline()` is one gevent
timer per request (nothing per chunk) that raises `RequestDeadline` in the request's greenlet at
the first blocking read or write past its time. It is a `TimeoutError`, so each client cleans up
as after its own timeout (geventhttpclient releases the connection, httpx maps it to a read
timeout) and the users count it as `timeout`.

Memory: geventhttpclient's `readline` buffers until a newline comes, however far away.
`bound_lines()` measures its buffer as each block arrives (nothing per line) and fails the
stream as `protocol` past `sse.MAX_LINE_BYTES`; the SDK user's bytes are measured the same way
(`bounded_bytes`).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import gevent
from slogate.locustfiles.load.sse import MAX_LINE_BYTES, line_too_long


class RequestDeadline(TimeoutError):
    """The request's --request-timeout has passed (in all, not between bytes)."""


def deadline(seconds: float) -> gevent.Timeout:
    """A started timer that raises `RequestDeadline` in this greenlet after `seconds`; `close()` it
    when the request is over."""
    return gevent.Timeout.start_new(seconds, RequestDeadline(f"not done within --request-timeout {seconds:g} s"))


def bound_lines(resp: Any, limit: int = MAX_LINE_BYTES) -> None:
    """Make `resp` (a geventhttpclient response) fail with `StreamProtocolError` once the bytes it
    holds without a newline pass `limit`: each received block goes through `feed`, which appends
    it to the body buffer that `readline` searches. Blocks are 4 KiB, so the buffer never holds
    more than `limit` plus a block."""
    feed, buffer = resp.feed, resp._body_buffer  # the same bytearray for the response's life

    def bounded_feed(data: bytes) -> None:
        feed(data)
        if len(buffer) > limit and buffer.find(b"\n") < 0:
            raise line_too_long()

    resp.feed = bounded_feed


def bounded_bytes(chunks: Iterator[bytes], limit: int = MAX_LINE_BYTES) -> Iterator[bytes]:
    """`chunks` as they come, failing with `StreamProtocolError` at a line longer than `limit`
    (the SDK's SSE decoder would buffer it whole)."""
    run = 0  # bytes since the last newline
    for chunk in chunks:
        newline = chunk.rfind(b"\n")
        run = len(chunk) - newline - 1 if newline >= 0 else run + len(chunk)
        if run > limit:
            raise line_too_long()
        yield chunk
