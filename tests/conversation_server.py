"""A chat server that checks conversations: every follow-up turn must be, byte for byte, an earlier
request's messages, then the answer this server streamed to it, then a new user message.

Each streamed answer is unique and awkward to resend exactly (quotes, a backslash, a newline,
non-ASCII text, an emoji, an empty delta, split across chunks). A request whose history matches no
answered request gets HTTP 400, so the client counts it as a failure (`http_4xx`); `GET /stats`
gives the counts. `usage` reports `prompt_tokens` = 10 per message and `cached_tokens` = 10 per
message resent from the history, so per-turn cache figures are known exactly.

Run: python -m tests.conversation_server; it prints `PORT <n>` when listening (`spawn()` waits).
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

PIECES = (' "quoted"', " back\\slash", "\n", " héllo", "", " 🙂")


def answer_pieces(n: int) -> list[str]:
    """The content deltas of the n-th answer: the same awkward pieces, then its number."""
    return [*PIECES, f" #{n}"]


def history_key(messages: list[dict[str, Any]]) -> str:
    return json.dumps(messages, ensure_ascii=False, sort_keys=True)


class ConversationChecker:
    def __init__(self) -> None:
        self.answered: set[str] = set()  # history keys a follow-up may continue, each once
        self.stats = {"first_turns": 0, "follow_ups": 0, "mismatches": 0, "max_messages": 0}

    def check(self, messages: list[dict[str, Any]]) -> str | None:
        """Why `messages` is not a valid turn, or None (and the turn is counted)."""
        roles = [m.get("role") for m in messages]
        expected = ["system"] + ["user", "assistant"] * ((len(messages) - 2) // 2) + ["user"]
        if roles != expected:
            return f"roles {roles} are not system, then user/assistant pairs, then user"
        if len(messages) > 2:
            key = history_key(messages[:-1])
            if key not in self.answered:
                return "the history is not an earlier request's messages plus the answer streamed to it"
            self.answered.discard(key)
            self.stats["follow_ups"] += 1
        else:
            self.stats["first_turns"] += 1
        self.stats["max_messages"] = max(self.stats["max_messages"], len(messages))
        return None

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                path = lines[0].split(" ")[1]
                headers = {k.lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:] if ln)}
                body = await reader.readexactly(int(headers.get("content-length", 0)))
                await self.route(path, body, writer)
        except (asyncio.IncompleteReadError, ConnectionError, ValueError):
            pass
        finally:
            writer.close()

    async def route(self, path: str, body: bytes, writer: asyncio.StreamWriter) -> None:
        if path == "/v1/models":
            return await json_response(writer, 200, {"data": [{"id": "checker"}]})
        if path == "/stats":
            return await json_response(writer, 200, self.stats)
        if path != "/v1/chat/completions":
            return await json_response(writer, 404, {"error": "not found"})
        req = json.loads(body)
        messages = req["messages"]
        if not req.get("stream"):  # cache priming
            return await json_response(writer, 200, {"choices": [{"message": {"content": "x"}}]})
        problem = self.check(messages)
        if problem:
            self.stats["mismatches"] += 1
            return await json_response(writer, 400, {"error": {"message": problem}})
        n = self.stats["first_turns"] + self.stats["follow_ups"]
        pieces = answer_pieces(n)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
        writer.write(chunk({"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}))
        for piece in pieces:
            writer.write(chunk({"choices": [{"index": 0, "delta": {"content": piece}}]}))
            await writer.drain()
        prompt, cached = 10 * len(messages), 10 * (len(messages) - 2)
        usage = {"prompt_tokens": prompt, "completion_tokens": len(pieces), "total_tokens": prompt + len(pieces)}
        writer.write(chunk({"choices": [], "usage": {**usage, "prompt_tokens_details": {"cached_tokens": cached}}}))
        writer.write(chunk("[DONE]") + b"0\r\n\r\n")
        await writer.drain()
        self.answered.add(history_key([*messages, {"role": "assistant", "content": "".join(pieces)}]))


def chunk(obj: Any) -> bytes:
    data = obj if isinstance(obj, str) else json.dumps(obj, ensure_ascii=False)
    event = f"data: {data}\n\n".encode()
    return f"{len(event):x}\r\n".encode() + event + b"\r\n"


async def json_response(writer: asyncio.StreamWriter, status: int, obj: object) -> None:
    data = json.dumps(obj).encode()
    head = f"HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {len(data)}\r\n\r\n"
    writer.write(head.encode() + data)
    await writer.drain()


async def main() -> None:
    checker = ConversationChecker()
    srv = await asyncio.start_server(checker.handle, "127.0.0.1", 0)
    print(f"PORT {srv.sockets[0].getsockname()[1]}", flush=True)
    async with srv:
        await srv.serve_forever()


def spawn() -> tuple[subprocess.Popen[str], str]:
    """Start the server in a process of its own; the process and its base URL once it listens."""
    argv = [sys.executable, "-m", "tests.conversation_server"]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, cwd=Path(__file__).resolve().parent.parent)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line.startswith("PORT "):
        proc.kill()
        proc.wait()
        raise RuntimeError(f"the conversation server did not start: {line!r}")
    return proc, f"http://127.0.0.1:{int(line.split()[1])}"


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        sys.exit(0)
