"""The kernel's receive stamp put on the client's clock (locustfiles/load/rx_timestamps.py)."""

import socket
import sys
import time
from types import SimpleNamespace
from typing import Any

import gevent.monkey
import pytest
from slogate.locustfiles.load import rx_timestamps
from slogate.locustfiles.load.rx_timestamps import TimestampedSocket

STALL_S = 0.02
blocking_sleep = gevent.monkey.get_original("time", "sleep")  # tests/load runs gevent-patched


def stalling_after_each_read(clock: Any) -> Any:
    """`clock`, but the process is descheduled for STALL_S right after each reading (a loaded machine)."""

    def read() -> Any:
        value = clock()
        blocking_sleep(STALL_S)  # the whole process stalls, not only this greenlet
        return value

    return read


@pytest.mark.skipif(sys.platform != "linux", reason="SO_TIMESTAMPNS is Linux's")
def test_a_stall_between_the_two_clock_readings_never_puts_the_arrival_before_the_send(monkeypatch) -> None:
    """The stamp is on the wall clock and converted with a reading of each clock: a stall between the two
    readings may make it late (as a reading without a stamp is), never earlier than the bytes were sent."""
    with (
        socket.create_server(("127.0.0.1", 0)) as server,
        TimestampedSocket(socket.AF_INET, socket.SOCK_STREAM) as client,
    ):
        client.connect(server.getsockname())
        peer, _ = server.accept()
        with peer:
            assert client.stamped
            monkeypatch.setattr(
                rx_timestamps,
                "time",
                SimpleNamespace(
                    perf_counter=stalling_after_each_read(time.perf_counter),
                    time_ns=stalling_after_each_read(time.time_ns),
                ),
            )
            sent = time.perf_counter()
            peer.sendall(b"token")
            assert client.recv(64) == b"token"
            parsed = time.perf_counter()
    assert sent <= client.received_at <= parsed
