"""Kept-alive connections a server may close for idling, watched: what lets a user tell a request
that never reached the application (its idle connection closed as it went out) from the server's
failure (locustfiles/load/users.py resends the first, counts the second)."""

from __future__ import annotations

import time
from typing import Any

import gevent.local
from geventhttpclient.connectionpool import ConnectionPool

# Below uvicorn's default keep-alive limit (5 s: vLLM's VLLM_HTTP_TIMEOUT_KEEP_ALIVE, SGLang), by
# more than a response's last byte takes to arrive.
KEEPALIVE_EXPIRY_S = 4.0


class KeptAlivePool:
    """geventhttpclient's `ConnectionPool` of one client, watched (its methods replaced on the
    instance, as its socket factory is): a connection idle in the pool for more than `expiry_s`
    is closed instead of reused; `idled_s` says how long the connection of this greenlet's latest
    request had idled in the pool (None: a new one); `fresh()` makes its next request open a new one;
    `abandon()` closes the connection this greenlet has out, for a request given up while it was
    being sent or its headers awaited (the client holds no response to release it with)."""

    __slots__ = (
        "_get_socket", "_idle_since", "_is_alive", "_local", "_release_socket", "_return_socket", "expiry_s", "pool",
    )  # fmt: skip

    def __init__(self, pool: ConnectionPool, expiry_s: float = KEEPALIVE_EXPIRY_S) -> None:
        self.pool = pool
        self.expiry_s = expiry_s
        self._idle_since: dict[Any, float] = {}  # the pool's idle sockets: since when (monotonic)
        self._local = gevent.local.local()  # per greenlet: `idled_s`, `fresh`, `out` (the socket it has out)
        self._get_socket, self._return_socket, self._release_socket, self._is_alive = (
            pool.get_socket,
            pool.return_socket,
            pool.release_socket,
            pool._is_socket_alive,
        )
        pool.get_socket, pool.return_socket, pool.release_socket = self._checkout, self._checkin, self._release
        pool._is_socket_alive = self._alive

    @property
    def idled_s(self) -> float | None:
        return getattr(self._local, "idled_s", None)

    def fresh(self) -> None:
        self._local.fresh = True

    def _checkout(self) -> Any:
        local = self._local
        local.idled_s = None
        if getattr(local, "fresh", False):
            local.fresh = False
            sock = self._new_socket()
        else:
            sock = self._get_socket()  # calls `_alive` on each idle socket until one is
        local.out = sock
        return sock

    def abandon(self) -> None:
        """Close the connection this greenlet has out, if any (the pool's slot is freed)."""
        sock = getattr(self._local, "out", None)
        if sock is not None:
            self._release(sock)

    def _alive(self, sock: Any) -> bool:
        idle_since = self._idle_since.pop(sock, None)
        idled_s = None if idle_since is None else time.monotonic() - idle_since
        if idled_s is None or idled_s > self.expiry_s or not self._is_alive(sock):
            return False  # the pool closes it
        self._local.idled_s = idled_s
        return True

    def _checkin(self, sock: Any) -> None:
        self._gone(sock)
        self._idle_since[sock] = time.monotonic()
        self._return_socket(sock)

    def _release(self, sock: Any) -> None:
        self._gone(sock)
        self._release_socket(sock)

    def _gone(self, sock: Any) -> None:
        if getattr(self._local, "out", None) is sock:
            self._local.out = None

    def _new_socket(self) -> Any:
        """A new connection, whatever idles in the pool: `ConnectionPool.get_socket` without its reuse."""
        pool = self.pool
        pool._semaphore.acquire()
        try:
            if pool._closed:
                raise RuntimeError("connection pool closed")
            return pool._create_socket()
        except BaseException:
            pool._semaphore.release()
            raise
