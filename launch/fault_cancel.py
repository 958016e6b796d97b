"""The fault server's requests running, as vLLM's `/metrics` shows them, and what a server does
when a client hangs up mid-stream (slogate's --cancel-fraction).

`Running` counts the streams the server is answering: its `vllm:num_requests_running` gauge
(launch/fault_server.py answers `/metrics` with it under `--metrics`). A client that hangs up is
seen at the server's next write (a `ConnectionError`): a server that lets go, as vLLM does
(it aborts the request), stops counting it at once; with `linger_ms=N` in the request's model
string the server keeps generating for the client that left for N ms more, as a server that does
not notice disconnects would, so the gauge stays up that long after the client is gone. Such a
request is logged with `outcome` "cancelled", as every stream the client left is.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable


class Running:
    """The streams being answered, and those a client left that the server still generates for."""

    def __init__(self) -> None:
        self.count = 0

    def metrics(self) -> bytes:
        """`/metrics`: a few vLLM gauges, the running requests counted."""
        return (
            f"vllm:num_requests_running {self.count}\nvllm:num_requests_waiting 0\nvllm:kv_cache_usage_perc 0\n"
        ).encode()

    async def serve(self, answering: Awaitable[bool], behaviour: dict[str, float]) -> bool:
        """Await `answering` (one stream) counted as running; after a client that hung up, for
        `linger_ms` more (0: let go at once)."""
        self.count += 1
        linger_s = 0.0
        try:
            return await answering
        except ConnectionError:  # the client hung up: seen at the next write
            linger_s = behaviour.get("linger_ms", 0.0) / 1000
            raise
        finally:
            if linger_s > 0:
                asyncio.get_running_loop().call_later(linger_s, self._done)
            else:
                self._done()

    def _done(self) -> None:
        self.count -= 1
