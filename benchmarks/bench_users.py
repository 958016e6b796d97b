"""Benchmark-only variants of slogate's raw SSE users (a locustfile and an importable module).

- `Unstamped*`: geventhttpclient's own sockets, no kernel receive stamps, to measure what the
  stamps do side by side.
- `Traced*`: write each request's body digest, TTFT and send lag to `$SLOGATE_TRACE` (JSON
  lines) when Locust quits, so that benchmarks/capacity.py can pair every request with the
  fault server's own log of the same request (slogate.launch.fault_server logs the same digest).

    locust -f benchmarks/bench_users.py TracedOpenLoopChatUser ...
"""

from __future__ import annotations

import hashlib
import json
import os
from typing import Any

import slogate.slo.plugin  # noqa: F401  (registers the SLO options and the gate)
from locust import events
from slogate.locustfiles.load import options  # noqa: F401  (registers the workload options)
from slogate.locustfiles.load.open_loop import OpenLoopChatUser
from slogate.locustfiles.load.timer import StreamTimer
from slogate.locustfiles.load.users import ChatStreamUser, SseChatUser
from slogate.slo.gate.record import RequestRecord

_traced: list[tuple[str, RequestRecord]] = []


def body_digest(body: bytes) -> str:
    return hashlib.sha1(body).hexdigest()[:16]


class _NoReceiveStamps(SseChatUser):
    abstract = True

    def connect(self) -> None:
        super().connect()
        del self.http._connection_pool._create_tcp_socket  # back to the pool's own socket factory


class _Traced(SseChatUser):
    abstract = True

    def _stream(self, body: bytes, timer: StreamTimer) -> Any:
        record = super()._stream(body, timer)
        _traced.append((body_digest(body), record))  # its send lag is filled in after this returns
        return record


@events.quitting.add_listener
def _write_trace(**_: Any) -> None:
    path = os.environ.get("SLOGATE_TRACE")
    if path and _traced:
        with open(path, "w") as out:
            for digest, rec in _traced:
                row = {"digest": digest, "started_at": rec.started_at, "ttft_us": rec.ttft_us}
                out.write(json.dumps({**row, "send_lag_us": rec.send_lag_us}) + "\n")


class UnstampedChatStreamUser(_NoReceiveStamps, ChatStreamUser):
    pass


class TracedOpenLoopChatUser(_Traced, OpenLoopChatUser):
    pass


class TracedUnstampedOpenLoopChatUser(_Traced, _NoReceiveStamps, OpenLoopChatUser):
    pass
