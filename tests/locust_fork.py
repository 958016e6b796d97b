"""Locust processes for the tests, forked from one that has imported Locust and slogate already.

A Locust process spends ~1.5 CPU-seconds importing Locust, gevent and slogate before it sends a
request (benchmarks/startup.py), and the suite starts ~300 of them on two cores: most of the
first phase's CPU. `run_locust` (tests/conftest.py) starts instead this file's client, a bare
Python (`-S`, ~20 ms) that asks the fork server of its pytest process to fork a child, which runs
`python -m locust ARGS` as a process of its own would: the client's argv, working directory,
environment and standard streams, a session of its own, the same interpreter exit. The client
stands for the child: its exit status is the child's (or it dies of the child's signal), a signal
sent to it is passed on, and when it dies the server kills the child's process group, as
`run_locust` kills a Locust run's group. What the fork changes is what was set up before the run's
environment was: slogate reads its environment when it runs, never at import, but the interpreter's
own start-up variables (PYTHON*, the locale), gevent's and Locust's import-time ones (GEVENT_LOOP,
LOCUST_SKIP_MONKEY_PATCH) and the hash seed are the pytest process's, the same for every run.

The tests that check how a Locust process starts and stops (signals, journals, orphaned workers)
run `python -m locust` themselves; `SLOGATE_TEST_FORK=0` turns the fork server off.

    python -S tests/locust_fork.py client SOCKET ARGS...   (what run_locust starts)
    python tests/locust_fork.py serve SOCKET               (one per pytest process, on first use)
"""

from __future__ import annotations

import array
import contextlib
import json
import os
import signal
import struct
import sys
import threading

_HEADER = struct.Struct("!I")
_STREAMS = (0, 1, 2)
_server_lock = threading.Lock()
_server: list = []  # this pytest process's fork server (a Popen; its last argument is its socket)


def forked(argv: list[str]) -> list[str]:
    """`argv`, a `python -m locust` command line, as this fork server's client (started on first use),
    or as it is where SLOGATE_TEST_FORK=0."""
    if os.environ.get("SLOGATE_TEST_FORK") == "0":
        return argv
    assert argv[1:3] == ["-m", "locust"], argv
    return [argv[0], "-S", __file__, "client", _started().args[-1], *argv[3:]]


def server_pid() -> int:
    """This process's fork server's pid (benchmarks/forked_runs.py reads its children's CPU time)."""
    return _started().pid


def _started():  # -> subprocess.Popen (imported when first needed)
    with _server_lock:
        if not _server:
            _server.append(_start_server())
        elif _server[0].poll() is not None:
            raise RuntimeError(f"this process's Locust fork server exited ({_server[0].returncode})")
        return _server[0]


def _start_server():  # -> subprocess.Popen
    import subprocess
    import tempfile

    socket_path = os.path.join(tempfile.mkdtemp(prefix="slogate-fork-"), "socket")
    # Its stdin is a pipe of this process: the server ends when this process does, however it ends.
    process = subprocess.Popen(
        [sys.executable, __file__, "serve", socket_path], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    if process.stdout.readline() != b"ready\n":
        raise RuntimeError(f"the Locust fork server did not start (exit {process.wait()})")
    return process


def _recv_exactly(sock, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise EOFError
        data += chunk
    return data


def client(socket_path: str, args: list[str]) -> None:
    import socket

    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(socket_path)
    request = json.dumps({"args": args, "cwd": os.getcwd(), "env": dict(os.environ)}).encode()
    fds = array.array("i", _STREAMS)
    sock.sendmsg([_HEADER.pack(len(request)) + request], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, fds)])
    reader = sock.makefile("rb")
    line = reader.readline()
    if not line:
        _fail("the fork server refused the request or is gone")
    child = int(line)

    def pass_on(signum: int, _frame: object) -> None:
        with contextlib.suppress(ProcessLookupError):  # the child ended meanwhile: its status follows
            os.kill(child, signum)

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2):
        signal.signal(sig, pass_on)
    line = reader.readline()
    if not line:
        _fail("the fork server is gone")
    code = os.waitstatus_to_exitcode(int(line))
    if code < 0:  # the child died of a signal: so does its stand-in
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    sys.exit(code)


def _fail(why: str) -> None:
    """Exit 70 (EX_SOFTWARE), which no Locust run exits with, saying why on stderr."""
    print(f"tests/locust_fork.py: {why}", file=sys.stderr)
    sys.exit(70)


def serve(socket_path: str) -> None:
    """Import what a Locust process of the tests imports, say `ready` on stdout, then fork a child
    per client until stdin closes (the pytest process ended); each child goes on to run Locust."""
    import locust.main  # noqa: F401  (Locust first: it patches the standard library for gevent)
    import slogate.locustfiles.load.options
    import slogate.locustfiles.load.users
    import slogate.slo.plugin  # noqa: F401

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C is the tests' to handle: this ends with its stdin
    request = _ForkServer(socket_path).run()
    if request is None:
        os.unlink(socket_path)
        os.rmdir(os.path.dirname(socket_path))
    else:
        _run_locust(request)


class _ForkServer:
    """The loop of the server. It uses the calls gevent left unpatched (gevent leaves `_socket`
    alone; its `os.close` defers to its hub's loop, which never runs here); a child starts its own
    loop (`gevent.reinit`), as after gevent's own fork."""

    def __init__(self, socket_path: str) -> None:
        import _socket

        from gevent.monkey import get_original

        self._socket = _socket
        self._select = get_original("select", "select")
        self._os_fork, self._waitpid, self._close = (get_original("os", name) for name in ("fork", "waitpid", "close"))
        self.listener = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
        self.listener.bind(socket_path)
        self.listener.listen(64)
        self.children: dict[int, object] = {}  # pid -> its client's connection
        self.clients: dict[object, int] = {}  # the reverse

    def run(self) -> dict | None:
        """Serve until stdin closes (None); in a child, return its request."""
        print("ready", flush=True)
        while True:
            readable, _, _ = self._select([sys.stdin, self.listener, *self.clients], [], [], 0.05)
            if sys.stdin in readable and not os.read(0, 4096):
                for pid in self.children:
                    _kill_group(pid)
                return None
            if self.listener in readable:
                fd, _ = self.listener._accept()
                request = self._start_child(self._socket.socket(fileno=fd))
                if request is not None:
                    return request  # in the child
            for conn in set(readable) & set(self.clients):
                try:
                    alive = conn.recv(4096)
                except OSError:  # reset: the client died with the pid line unread
                    alive = b""
                if not alive:  # the client died: so does its child's process group
                    _kill_group(self.clients.pop(conn))
                    conn.close()
            self._reap()

    def _start_child(self, conn) -> dict | None:
        """Read a client's request and fork its child: the request in the child, None here."""
        fds = array.array("i")
        try:
            msg, ancdata, _, _ = conn.recvmsg(_HEADER.size + 65536, self._socket.CMSG_SPACE(3 * fds.itemsize))
            for level, kind, data in ancdata:
                if (level, kind) == (self._socket.SOL_SOCKET, self._socket.SCM_RIGHTS):
                    fds.frombytes(data[: len(data) - (len(data) % fds.itemsize)])
            (size,) = _HEADER.unpack(msg[: _HEADER.size])
            body = msg[_HEADER.size :]
            if len(body) < size:
                body += _recv_exactly(conn, size - len(body))
            request = json.loads(body)
            if len(fds) != len(_STREAMS):
                raise ValueError(f"{len(fds)} streams passed")
        except (OSError, EOFError, ValueError, struct.error):  # a client that died before it asked
            for fd in fds:
                self._close(fd)
            conn.close()
            return None
        pid = self._os_fork()
        if pid == 0:
            os.setsid()  # first: a client gone already has the server kill this group at once
            signal.signal(signal.SIGINT, signal.default_int_handler)
            import gevent

            gevent.reinit()  # the server's loop (its epoll and eventfd) is not this process's
            for target, fd in zip(_STREAMS, fds, strict=True):
                os.dup2(fd, target)
            for fd in fds:
                self._close(fd)
            for sock in (self.listener, conn, *self.clients):
                sock.close()
            return request
        for fd in fds:
            self._close(fd)
        self.children[pid], self.clients[conn] = conn, pid
        with contextlib.suppress(OSError):  # a client gone already: the next turn sees it closed
            conn.sendall(b"%d\n" % pid)
        return None

    def _reap(self) -> None:
        """Tell each client whose child ended its wait status, once the child's group is killed
        (what the run left running, as run_locust kills a run's group)."""
        while self.children:
            ended = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
            if ended is None:
                return
            pid = ended.si_pid
            _kill_group(pid)  # before the reap: until then no other process can have its pid
            _, status = self._waitpid(pid, 0)
            conn = self.children.pop(pid)
            if self.clients.pop(conn, None) is not None:
                with contextlib.suppress(OSError):
                    conn.sendall(b"%d\n" % status)
                conn.close()


def _kill_group(pid: int) -> None:
    """`pid`'s process group, or `pid` alone before its `setsid` (an unreaped child: its pid is its own)."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    except OSError:
        pass


def _run_locust(request: dict) -> None:
    """In the child: become `python -m locust ARGS` in the client's directory and environment;
    Locust's exit (SystemExit) ends this interpreter as it ends one of its own."""
    import runpy

    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    sys.path[0] = request["cwd"]  # as `python -m` has it (this script's folder here)
    sys.argv = ["locust", *request["args"]]
    runpy.run_module("locust", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    role, path, *rest = sys.argv[1:]
    if role == "client":
        client(path, rest)
    else:
        serve(path)
