"""When response bytes reached this machine: the kernel's receive timestamp, not the parse time.

Under load one client core parses many streams, and a greenlet reads its socket only when the
event loop comes round to it: a clock read at parse time adds that wait to the server's TTFT,
more the busier the client (benchmarks/RESULTS.md, "receive timestamps"). Linux stamps every
packet as it arrives; with `SO_TIMESTAMPNS` set, `recvmsg` returns the stamp of the last packet
it read. Lines are consumed in order and a new receive happens only when no whole line is
buffered, so the stamp of the latest receive is when the line being parsed was complete.

The stamp is never later than the parse, but a read that takes several packets at once gets
the last one's: a client so late that the next token had arrived too (more than one inter-token
gap) reports the first token up to that gap late; the send lag and loop lag of the self-check
show such a client. Where there is no stamp (not Linux, TLS, whose reads bypass `recv`), the
reading falls back to the moment `recv` returned. The stamp is on the wall clock, put on the run's
clock by a reading of each, the wall clock first: a client stalled between them gets a stamp late by
the stall, never one before the bytes came (a wall clock stepped forward meanwhile is the exception).
"""

from __future__ import annotations

import socket
import struct
import sys
import time
from typing import Any

import gevent.socket

# Python does not export it; 35 is SO_TIMESTAMPNS(_OLD) in asm-generic, which x86, Arm, RISC-V,
# POWER and s390 use. The stamp is a struct timespec on CLOCK_REALTIME.
SO_TIMESTAMPNS = 35
_TIMESPEC = struct.Struct("@ll")
_ANCILLARY_SPACE = socket.CMSG_SPACE(_TIMESPEC.size) if sys.platform == "linux" else 0


class TimestampedSocket(gevent.socket.socket):
    """A gevent socket whose `received_at` is when the bytes of its latest `recv` arrived,
    on the `time.perf_counter()` timeline that `StreamTimer` uses."""

    __slots__ = ("received_at", "stamped")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.received_at = 0.0
        self.stamped = False
        if _ANCILLARY_SPACE:
            try:
                self.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
                self.stamped = True
            except OSError:
                pass

    def recv(self, bufsize: int, flags: int = 0) -> bytes:
        if not self.stamped:
            data = super().recv(bufsize, flags)
            self.received_at = time.perf_counter()
            return data
        data, ancillary, _, _ = self.recvmsg(bufsize, _ANCILLARY_SPACE, flags)
        # The wall clock first: a stall between the two reads then makes the stamp late by it (as
        # a reading without a stamp is), never early: a TTFT is never shorter than the truth.
        wall_ns = time.time_ns()
        now = time.perf_counter()
        for level, kind, stamp in ancillary:
            if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS:
                sec, nsec = _TIMESPEC.unpack_from(stamp)
                age_ns = wall_ns - sec * 1_000_000_000 - nsec
                if age_ns > 0:  # not when the wall clock has just been stepped back
                    now -= age_ns * 1e-9
        self.received_at = now
        return data


def timestamped_socket(family: int, socktype: int, protocol: int) -> gevent.socket.socket:
    """A drop-in for geventhttpclient's `ConnectionPool._create_tcp_socket`."""
    return TimestampedSocket(family, socktype, protocol)
