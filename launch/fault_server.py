"""A small OpenAI-style streaming server with scripted behaviour, for error paths and TTFT truth.

Not a stand-in for vLLM (the end-to-end tests use the real server): it exists to produce what
vLLM rarely does on demand: HTTP 429/500, a stream cut mid-way, a stall, a trickle, a 10 MiB line,
a body that is not an event stream, an error event, a certificate that does not verify, and a
role-only first chunk followed by content after an exact delay. It streams the three
endpoints slogate can load, each in the shape vLLM 0.32 emits (launch/fault_formats.py):
`/v1/chat/completions`, `/v1/completions` and `/v1/responses`; every behaviour and fault below
applies to each, in that endpoint's own events.

The behaviour is chosen per request by the `model` field, e.g. `role_first=1,ttft_ms=150,tokens=5`:

    status=500        answer with this HTTP status and a JSON error body
    close=1           close the connection without answering
    ttft_ms=150       delay before the first token (reasoning first: `think`, launch/fault_formats.py)
    role_first=1      send the opening events at once, before the delay: chat's role-only chunk,
                      an empty completions chunk, responses' output item and content part (its
                      `response.created` and `response.in_progress` always come at once)
    tokens=5          content chunks to send;  itl_ms=10  the gap between them
    cut_after=3       close the connection after N content chunks (no end marker)
    stall_after=2     stop sending (keep the connection open) after N content chunks, for
                      stall_ms (default an hour), then go on
    error_after=2     send an error event after N content chunks, then [DONE] (responses: an
                      `error` event, then the body ends)
    bad_json_after=2  send a data line that is not JSON after N content chunks, then go on
    bad_shape_after=2 send a JSON event of the wrong shape (`{"choices": [null]}`; responses: a
                      `response.completed` whose `response` is a string) after N content chunks
    trickle_after=1   after N content chunks, send the rest one byte at a time, trickle_ms (default
                      250) apart: never silent for long, never done in time
    huge_line_after=1 after N content chunks, send a token event huge_line_bytes long (default
                      10 MiB) in one line
    not_sse=1         answer 200 with the endpoint's whole JSON answer (Content-Type
                      application/json), as a server that ignores `stream: true` does
    done=0            end the stream (and the HTTP body, properly) without its end marker:
                      `data: [DONE]`, or responses' `response.completed`
    usage=0           leave out the usage (chunk, or `response.usage`)
    slots=4           a server of known capacity: at most 4 streams served at once (shared by every
                      request naming the same `slots`), the others wait in line, first come first
                      served; with `ttft_ms=T,tokens=K,itl_ms=I` each holds its slot for about
                      T + (K-1)*I ms, so the capacity is slots / that time, in requests per second
    lognormal=0.5     service times that vary (M/G/c with `slots`): each streamed request draws ONE
                      factor F, lognormal with sigma 0.5 and mean 1 (mu = -sigma^2/2; median
                      exp(mu)), and waits F*T before its first token and F*I between tokens, so it
                      holds its slot F*(T + (K-1)*I) ms; a client's TTFT is its wait for a slot plus
                      F*T (what benchmarks/capacity_repeat.py simulates). Drawn in arrival order, one
                      seeded generator per model string (seed=N, default 0: launch/fault_spec.py);
                      the log row's `factor` is F. Not a sigma > 0: a 400, as any bad spec
    linger_ms=2000    a client that hangs up: the request stays running 2 s more (launch/fault_cancel.py)
    mix=1             a different fault per request: each of `FAULTS` in turn, with "ok" (no
                      fault) first; `mix=ok+stall+http_429` cycles through those; with seed=N the
                      fault is drawn at random (seeded) instead. The other keys still apply
                      (e.g. `mix=1,stall_ms=2000,tokens=5`).

With --tls-cert and --tls-key it speaks TLS only (`spawn(tls=...)`: an https URL), and logs each
handshake the client refuses (it does not trust the certificate) as a row of its own, fault `tls`:
the ground truth of `tls` failures (a client that merely goes away mid-handshake is no row).

Run: python -m slogate.launch.fault_server [--port N] [--log FILE] [--log-bodies] [--tls-cert PEM
--tls-key PEM] [--metrics]; it prints `PORT <n>` when listening (`spawn()` waits for it). It also
answers `/v1/models`, `/tokenize` and, with `--metrics`, `/metrics` (a few vLLM gauges). Each streamed request is logged
as one JSON line to --log when the server is done with it (the ground truth): when it arrived,
when its first content chunk was written, `fault` (the fault it injected, by the names of
`FAULTS` and `http_<status>`, or null), `completed` (the server wrote all it meant to: false after
`close`, a cut, or a client that went away), `outcome` ("ok": no fault and completed; else the
fault, or "cancelled": the client hung up), `factor` (with `lognormal`), `images` (the image
parts it carried), and a digest of its body that lets a benchmark pair it with the
client's own record; with --log-bodies also `body`, the request's JSON body as sent, for tests of
exactly what clients send.
The tests and the benchmarks both use it.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from slogate.launch.fault_cancel import Running
from slogate.launch.fault_formats import FORMATS, StreamFormat, image_parts, output_piece, served_models, think
from slogate.launch.fault_spec import (
    DEFAULT_SEED,
    FAULTS,
    MIX_ALL,
    faults,
    lognormal_factors,
    parse_behaviour,
    parse_mix,
    scaled,
)

__all__ = ["FAULTS", "MIX_ALL", "Server", "parse_behaviour", "parse_mix", "read_log", "spawn"]


class Server:
    def __init__(
        self, log_path: str | None, log_bodies: bool = False, tls: ssl.SSLContext | None = None, metrics: bool = False
    ) -> None:
        self.log = open(log_path, "a") if log_path else None  # noqa: SIM115 (lives as long as the server)
        self.log_bodies = log_bodies
        self.metrics = metrics  # answer /metrics (a few vLLM gauges); off: a target without it
        self.tls = tls
        self.mixes: dict[str, Iterator[str]] = {}  # per model string: the faults still to come
        self.factors: dict[str, Iterator[float]] = {}  # per model string: lognormal's factors still to come
        self.slots: dict[int, asyncio.Semaphore] = {}  # per `slots=` value: the streams being served
        self.running = Running()  # /metrics' vllm:num_requests_running (launch/fault_cancel.py)

    def next_fault(self, model: str, names: tuple[str, ...], seed: float | None) -> str:
        if model not in self.mixes:
            self.mixes[model] = faults(names, seed)
        return next(self.mixes[model])

    def next_factor(self, model: str, b: dict[str, float]) -> float:
        """The next of `model`'s lognormal service-time factors, in arrival order."""
        if model not in self.factors:
            self.factors[model] = lognormal_factors(b["lognormal"], b.get("seed", DEFAULT_SEED))
        return next(self.factors[model])

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            if self.tls is not None:
                arrived = time.time()
                try:
                    await writer.start_tls(self.tls)
                except (ssl.SSLError, ConnectionError) as e:
                    if isinstance(e, ssl.SSLError) and not isinstance(e, ssl.SSLEOFError):  # refused, not just gone
                        self.log_row({"arrived": arrived, "outcome": "tls", "fault": "tls", "completed": False})
                    return
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                arrived = time.time()
                lines = head.decode("latin-1").split("\r\n")
                method, path, _ = lines[0].split(" ", 2)
                headers = {k.lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:] if ln)}
                body = await reader.readexactly(int(headers.get("content-length", 0)))
                keep = await self.route(method, path, body, writer, arrived)
                if not keep:
                    break
        except (asyncio.IncompleteReadError, ConnectionError, ValueError):
            pass
        finally:
            writer.close()

    async def json_response(self, writer: asyncio.StreamWriter, status: int, obj: object) -> bool:
        return await self.respond(writer, status, json.dumps(obj).encode(), "application/json")

    async def respond(self, writer: asyncio.StreamWriter, status: int, data: bytes, content_type: str) -> bool:
        head = f"HTTP/1.1 {status} X\r\nContent-Type: {content_type}\r\nContent-Length: {len(data)}\r\n\r\n"
        writer.write(head.encode() + data)
        await writer.drain()
        return True

    async def route(self, method: str, path: str, body: bytes, writer: asyncio.StreamWriter, arrived: float) -> bool:
        if path == "/health":
            return await self.json_response(writer, 200, {})
        if path == "/v1/models":
            return await self.json_response(writer, 200, served_models())
        if path == "/metrics" and self.metrics:
            return await self.respond(writer, 200, self.running.metrics(), "text/plain; version=0.0.4")
        req = json.loads(body or b"{}")
        if path == "/tokenize":
            return await self.json_response(writer, 200, {"count": len(req.get("prompt", "").split())})
        if path not in FORMATS:
            return await self.json_response(writer, 404, {"error": "not found"})
        fmt = FORMATS[path]()
        model = req.get("model", "")
        try:  # a bad spec: a 400 that says why
            b = parse_behaviour(model)
            names = parse_mix(model) if req.get("stream") else None
        except ValueError as e:
            return await self.json_response(writer, 400, {"error": {"message": str(e)}})
        if names:
            fault = self.next_fault(model, names, b.get("seed"))
            b.update(FAULTS.get(fault, {}))
        if not req.get("stream") and int(b["status"]) == 200 and not b.get("close"):
            return await self.json_response(writer, 200, fmt.whole())
        logged = req if req.get("stream") else None
        if "lognormal" in b and logged is not None:
            b["factor"] = self.next_factor(model, b)
            b = scaled(b, b["factor"])
        digest = hashlib.sha1(body).hexdigest()[:16]
        return await self.answer(writer, fmt, b, arrived, digest, logged, image_parts(req))

    async def answer(
        self,
        writer: asyncio.StreamWriter,
        fmt: StreamFormat,
        b: dict[str, float],
        arrived: float,
        digest: str,
        logged: dict | None,
        images: int,
    ) -> bool:
        """Answer one request as `b` says; log it (`logged`: the body of a streamed one) whatever happens."""
        state: dict = {"fault": None, "completed": False, "first_content_at": None}
        try:
            if b.get("close"):
                state["fault"] = "closed_before_response"
                return False
            if int(b["status"]) != 200:
                state["fault"] = f"http_{int(b['status'])}"
                keep = await self.json_response(writer, int(b["status"]), {"error": {"message": "injected failure"}})
                state["completed"] = True
                return keep
            if b.get("not_sse"):
                state["fault"] = "not_sse"
                keep = await self.json_response(writer, 200, fmt.whole())
                state["completed"] = True
                return keep
            if "slots" not in b:
                return await self.running.serve(self.stream(writer, fmt, b, state), b)
            async with self.slots.setdefault(int(b["slots"]), asyncio.Semaphore(int(b["slots"]))):
                return await self.running.serve(self.stream(writer, fmt, b, state), b)
        finally:
            if logged is not None:
                self.record(arrived, digest, logged if self.log_bodies else None, b.get("factor"), images, **state)

    async def stream(self, writer: asyncio.StreamWriter, fmt: StreamFormat, b: dict[str, float], state: dict) -> bool:
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
        writer.write(fmt.opening(bool(b["role_first"])))
        await writer.drain()
        await think(writer, fmt, b)
        trickling = False

        def inject(fault: str) -> None:
            state["fault"] = state["fault"] or fault

        async def send(data: bytes) -> None:
            """Write `data`: at once, or one byte per `trickle_ms` once trickling."""
            if not trickling:
                writer.write(data)
                return
            for i in range(len(data)):
                writer.write(data[i : i + 1])
                await writer.drain()
                await asyncio.sleep(b["trickle_ms"] / 1000)

        errored = False
        for i in range(int(b["tokens"])):
            if i and b["itl_ms"]:
                await asyncio.sleep(b["itl_ms"] / 1000)
            if "cut_after" in b and i == int(b["cut_after"]):
                inject("cut_mid_stream")
                return False  # close without [DONE] or the chunked terminator
            if "stall_after" in b and i == int(b["stall_after"]):
                inject("stall")
                await asyncio.sleep(b["stall_ms"] / 1000)
            if "trickle_after" in b and i == int(b["trickle_after"]):
                inject("trickle")
                trickling = True
            if "huge_line_after" in b and i == int(b["huge_line_after"]):
                inject("huge_line")
                writer.write(fmt.token("x" * int(b["huge_line_bytes"])))
            if "error_after" in b and i == int(b["error_after"]):
                inject("error_event")
                await send(fmt.error())
                errored = True
                break
            if "bad_json_after" in b and i == int(b["bad_json_after"]):
                inject("not_json")
                writer.write(fmt.bad_json())
            if "bad_shape_after" in b and i == int(b["bad_shape_after"]):
                inject("bad_shape")
                writer.write(fmt.bad_shape())
            await send(output_piece(fmt, i, b))
            await writer.drain()
            if state["first_content_at"] is None:
                state["first_content_at"] = time.time()
        if state["first_content_at"] is None:
            inject("no_content")
        await send(fmt.closing(int(b["tokens"]), bool(b["usage"]), bool(b["done"]), errored))
        if not b["done"]:
            inject("no_done")
        await send(b"0\r\n\r\n")
        await writer.drain()
        state["completed"] = True
        return True

    def record(
        self,
        arrived: float,
        digest: str,
        body: dict | None,
        factor: float | None,
        images: int,
        fault: str | None,
        completed: bool,
        first_content_at: float | None,
    ) -> None:
        outcome = fault or ("ok" if completed else "cancelled")  # no fault, not completed: the client hung up
        row = {
            "arrived": arrived,
            "first_content_at": first_content_at,
            "outcome": outcome,
            "fault": fault,
            "completed": completed,
            "digest": digest,
            "images": images,
        }
        if factor is not None:
            row["factor"] = factor
        if body is not None:
            row["body"] = body
        self.log_row(row)

    def log_row(self, row: dict) -> None:
        if self.log:
            self.log.write(json.dumps(row) + "\n")
            self.log.flush()


def tls_context(certfile: str, keyfile: str) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(certfile, keyfile)
    return context


async def main(
    port: int, log_path: str | None, log_bodies: bool, tls: ssl.SSLContext | None = None, metrics: bool = False
) -> None:
    server = Server(log_path, log_bodies, tls, metrics)
    srv = await asyncio.start_server(server.handle, "127.0.0.1", port)
    print(f"PORT {srv.sockets[0].getsockname()[1]}", flush=True)
    async with srv:
        await srv.serve_forever()


def spawn(
    log: Path | None = None,
    prefix: Sequence[str] = (),
    log_bodies: bool = False,
    tls: tuple[Path, Path] | None = None,
    metrics: bool = False,
) -> tuple[subprocess.Popen[str], str]:
    """Start the server in a process of its own (`prefix` e.g. pins it: `taskset -c 1`); returns
    the process and the base URL once it listens. `tls`: (certificate, key) PEM files, to speak
    TLS only at an https URL. The caller terminates the process."""
    argv = [*prefix, sys.executable, "-m", "slogate.launch.fault_server", *(["--log", str(log)] if log else [])]
    if log_bodies:
        argv.append("--log-bodies")
    if tls:
        argv += ["--tls-cert", str(tls[0]), "--tls-key", str(tls[1])]
    if metrics:
        argv.append("--metrics")
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line.startswith("PORT "):
        proc.kill()
        proc.wait()
        raise RuntimeError(f"the fault server did not start: {line!r}")
    return proc, f"{'https' if tls else 'http'}://127.0.0.1:{int(line.split()[1])}"


def read_log(path: Path) -> list[dict[str, Any]]:
    """The rows of a --log (or any JSON-lines file written a row per write), none if it does not exist
    yet. Read while the server writes, only whole rows: a read takes no lock against a write, which
    grows the file a page at a time, so a read can end inside a row that crosses a page boundary."""
    data = path.read_bytes() if path.exists() else b""
    return [json.loads(line) for line in data[: data.rfind(b"\n") + 1].decode().splitlines()]


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--log")
    ap.add_argument("--log-bodies", action="store_true", help="log each streamed request's JSON body too")
    ap.add_argument("--tls-cert", help="speak TLS only, with this certificate (PEM)")
    ap.add_argument("--tls-key", help="the certificate's private key (PEM)")
    ap.add_argument("--metrics", action="store_true", help="answer /metrics (a few vLLM gauges)")
    a = ap.parse_args()
    try:
        tls = tls_context(a.tls_cert, a.tls_key) if a.tls_cert else None
        asyncio.run(main(a.port, a.log, a.log_bodies, tls, a.metrics))
    except KeyboardInterrupt:
        sys.exit(0)
