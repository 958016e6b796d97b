"""A stand-in for Slack's webhook and Web API on loopback, driven by real slack-sdk clients.

    python tests/slack_stub.py --log FILE [--script 500,429:1,200]

Each POST is answered with the next status of the script (the last one repeats); `429:N` adds
`Retry-After: N`. Every request is logged as one JSON line: arrival time, path, body.
"""

from __future__ import annotations

import argparse
import json
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--log", required=True)
    ap.add_argument("--script", default="200")
    a = ap.parse_args()
    script = a.script.split(",")
    state = {"n": 0}

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", 0))).decode()
            step = script[min(state["n"], len(script) - 1)]
            state["n"] += 1
            with open(a.log, "a") as fh:
                fh.write(json.dumps({"t": time.time(), "path": self.path, "body": body, "status": step}) + "\n")
            status, _, retry_after = step.partition(":")
            api = self.path.startswith("/api/")
            payload = json.dumps({"ok": status == "200"} if api else {}).encode() if api else b"ok"
            self.send_response(int(status))
            if retry_after:
                self.send_header("Retry-After", retry_after)
            self.send_header("Content-Type", "application/json" if api else "text/plain")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    print(f"PORT {server.server_address[1]}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
