"""Credentials in the target URL (`--host http://user:pass@host`) become an Authorization header
for every call and never show anywhere: not in a log line, a message, a report file, Locust's
pages or its own HTML/CSV reports, nor any other secret of the environment.

The end-to-end tests run Locust against `serve()` below, a small OpenAI-style server in a process
of its own that demands basic auth on every path the client calls and logs who called what.
"""

import locust  # noqa: F401  isort: skip  (gevent's monkey-patching first, as in conftest.py)

import base64
import json
import logging
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from slogate.launch.fault_server import read_log
from slogate.launch.locust_command import locust_argv
from slogate.launch.server import free_port
from slogate.slo.plugin import target
from slogate.slo.plugin.scraper import Scraper

from tests.conftest import ROOT

USER, PASSWORD = "user", "S3cret:Pass"  # the ':' travels percent-encoded in the URL
FORM_PASSWORD = "F0rmS3cretPass"  # typed into the web UI form's host field
WEBHOOK_SECRET = "hookS3cretMarker"
ENV_SECRETS = {"OPENAI_API_KEY": "sk-apiKeyS3cretMarker", "SLACK_BOT_TOKEN": "xoxb-tokenS3cretMarker"}


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


# --- the URL split and the header provider ----------------------------------------------------


@pytest.mark.parametrize(
    ("url", "bare", "userinfo"),
    [
        ("http://user%40corp:p%3Ass@host:8000/base/", "http://host:8000/base/", "user@corp:p:ss"),
        ("http://u:p%C3%A9@[::1]:8000", "http://[::1]:8000", "u:p\u00e9"),
        ("https://u:p@ss@example.com/v?x=1", "https://example.com/v?x=1", "u:p@ss"),  # unencoded '@'
        ("http://token@h:1", "http://h:1", "token:"),
        ("http://@h:1", "http://h:1", None),
        ("http://[::1]:8000/", "http://[::1]:8000/", None),
        ("http://127.0.0.1:8000", "http://127.0.0.1:8000", None),
    ],
)
def test_split_credentials(url: str, bare: str, userinfo: str | None) -> None:
    got_bare, authorization = target.split_credentials(url)
    assert got_bare == bare
    if userinfo is None:
        assert authorization is None
    else:
        assert authorization == "Basic " + base64.b64encode(userinfo.encode()).decode()


class FakeEnvironment:
    """A Locust environment's host and options (slogate keys its state by environment, weakly: a
    SimpleNamespace is neither hashable nor weakly referable)."""

    def __init__(self, host: str | None, parsed_options: SimpleNamespace) -> None:
        self.host, self.parsed_options = host, parsed_options


def fake_environment(host: str | None) -> Any:
    return FakeEnvironment(host, SimpleNamespace(host=host))


def test_credentials_leave_the_host_and_only_go_to_their_own_url(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in target.API_KEY_ENV_VARS:
        monkeypatch.delenv(name, raising=False)
    env = fake_environment("http://user:pw@10.0.0.1:8000/")
    target.strip_environment(env)
    assert env.host == env.parsed_options.host == "http://10.0.0.1:8000/"
    assert target.resolve(env) == ("http://10.0.0.1:8000", {"Authorization": basic("user", "pw")})
    target.strip_environment(env)  # idempotent
    assert target.resolve(env)[1] == {"Authorization": basic("user", "pw")}
    # Another host (typed into the form later) never gets them.
    assert target.resolve(env, "http://10.0.0.2:8000") == ("http://10.0.0.2:8000", {})
    # A worker receives them with the master's options (the spawn message), for the same URL only.
    worker = FakeEnvironment("http://10.0.0.1:8000", SimpleNamespace())
    setattr(worker.parsed_options, target.WIRE_ATTR, getattr(env.parsed_options, target.WIRE_ATTR))
    assert target.resolve(worker)[1] == {"Authorization": basic("user", "pw")}
    assert target.resolve(fake_environment("http://10.0.0.3"))[1] == {}


def test_url_credentials_win_over_an_api_key_with_one_warning(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("SLOGATE_API_KEY", "sk-unitSecret")
    monkeypatch.setattr(target, "_warned", False)
    assert target.resolve(fake_environment("http://h:1"))[1] == {"Authorization": "Bearer sk-unitSecret"}
    with caplog.at_level(logging.WARNING):
        for _ in range(3):
            assert target.resolve(fake_environment("http://u:p@h:1"))[1] == {"Authorization": basic("u", "p")}
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 1 and "SLOGATE_API_KEY" in warnings[0] and "sk-unitSecret" not in warnings[0]


def test_scraper_sends_basic_and_names_no_password() -> None:
    scraper = Scraper(f"http://u:pw%21Secret@127.0.0.1:{free_port()}", 1.0)
    assert scraper.headers == {"Authorization": basic("u", "pw!Secret")}
    assert not scraper.scrape_once()
    assert scraper.metrics.error is not None and "pw" not in scraper.metrics.error


# --- a server that demands basic auth on every path ---------------------------------------------


def _sse(obj: dict[str, Any] | str) -> bytes:
    data = f"data: {obj if isinstance(obj, str) else json.dumps(obj)}\n\n".encode()
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


def _chunk(delta: dict[str, Any], **extra: Any) -> dict[str, Any]:
    choices = [{"index": 0, "delta": delta, "finish_reason": extra.pop("finish_reason", None)}]
    return {"id": "c1", "object": "chat.completion.chunk", "created": 0, "model": "m", "choices": choices, **extra}


class _AuthHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    accepted: dict[str, str] = {}  # Authorization value -> who (logged)
    log_path = ""
    scrapes = 0

    def log_message(self, *_: Any) -> None:
        pass

    def do_GET(self) -> None:
        self._handle()

    def do_POST(self) -> None:
        self._handle()

    def _log(self, path: str, who: str) -> None:
        with open(self.log_path, "a") as f:
            f.write(json.dumps({"path": path, "auth": who}) + "\n")

    def _reply(self, status: int, body: bytes, ctype: str = "application/json", **headers: str) -> None:
        self.send_response(status)
        for k, v in {"Content-Type": ctype, "Content-Length": str(len(body)), **headers}.items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)

    def _handle(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
        path = self.path.split("?", 1)[0]
        if path.startswith("/services/"):  # the Slack webhook: must never get the target's header
            self._log("slack", "carried Authorization" if self.headers.get("Authorization") else "none")
            return self._reply(200, b"ok", "text/plain")
        who = self.accepted.get(self.headers.get("Authorization", ""), "rejected")
        self._log(path, who)
        if who == "rejected":
            return self._reply(401, b'{"error": "unauthorized"}', WWW_Authenticate='Basic realm="t"')
        if path == "/v1/models":
            return self._reply(200, json.dumps({"object": "list", "data": [{"id": "m"}]}).encode())
        if path == "/tokenize":
            return self._reply(200, json.dumps({"count": len(body.get("prompt", "").split())}).encode())
        if path == "/metrics":
            type(self).scrapes += 1
            n = type(self).scrapes
            text = f"vllm:prefix_cache_queries_total {100 * n}\nvllm:prefix_cache_hits_total {50 * n}\n"
            return self._reply(200, (text + "vllm:num_requests_running 1\n").encode(), "text/plain")
        if path != "/v1/chat/completions":
            return self._reply(404, b'{"error": "not found"}')
        if not body.get("stream"):  # priming
            answer = {"id": "c0", "object": "chat.completion", "created": 0, "model": "m", "choices": []}
            return self._reply(200, json.dumps(answer).encode())
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self.wfile.write(_sse(_chunk({"role": "assistant", "content": ""})))
        for i in range(3):
            self.wfile.write(_sse(_chunk({"content": f" tok{i}"})))
        self.wfile.write(_sse(_chunk({}, finish_reason="length")))
        usage = {"prompt_tokens": 10, "completion_tokens": 3, "total_tokens": 13}
        self.wfile.write(_sse({**_chunk({}), "choices": [], "usage": usage}) + _sse("[DONE]") + b"0\r\n\r\n")
        self.wfile.flush()


def serve(log_path: str) -> None:
    _AuthHandler.accepted = {basic(USER, PASSWORD): "url", basic(USER, FORM_PASSWORD): "form"}
    _AuthHandler.log_path = log_path
    server = ThreadingHTTPServer(("127.0.0.1", 0), _AuthHandler)
    server.daemon_threads = True
    print(f"PORT {server.server_address[1]}", flush=True)
    server.serve_forever()


@pytest.fixture
def auth_server(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """The server's bare URL and its log (one JSON line per request: path, whose credentials)."""
    log = tmp_path / "server.jsonl"
    log.touch()
    proc = subprocess.Popen(
        [sys.executable, "-c", f"from tests.plugin.test_credentials import serve; serve({str(log)!r})"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line.startswith("PORT "), line
    yield f"http://127.0.0.1:{int(line.split()[1])}", log
    proc.terminate()
    proc.wait(timeout=10)


def with_credentials(url: str, password: str) -> str:
    return url.replace("://", f"://{USER}:{urllib.parse.quote(password, safe='')}@")


def secrets_of(password: str) -> list[str]:
    return [password, urllib.parse.quote(password, safe=""), basic(USER, password).split()[1], WEBHOOK_SECRET,
            *ENV_SECRETS.values()]  # fmt: skip


def secret_env(server: str) -> dict[str, str]:
    return {**os.environ, **ENV_SECRETS, "SLACK_WEBHOOK_URL": f"{server}/services/T0/B0/{WEBHOOK_SECRET}"}


def assert_no_secret(where: str, text: str, secrets: list[str]) -> None:
    for secret in secrets:
        assert secret not in text, f"a secret ({secret[:3]}...) in {where}"


def assert_nothing_leaked(paths: list[Path], texts: dict[str, str], secrets: list[str]) -> None:
    files = [p for root in paths for p in ([root] if root.is_file() else root.rglob("*")) if p.is_file()]
    assert files
    for p in files:
        assert_no_secret(str(p), p.read_text(errors="replace"), secrets)
    for where, text in texts.items():
        assert_no_secret(where, text, secrets)


SLO = "slos:\n  - {name: errors, metric: error_rate, max: 0.01}\nmin_samples: 1\nwarmup_s: 0\n"
WORKLOAD = ["--shared-prefix-tokens", "20", "--user-message-tokens", "4", "--max-tokens", "3"]
WORKLOAD += ["--server-metrics-interval", "0.5", "--slack-notify", "pass", "--slack-timeout-s", "5"]


@pytest.mark.parametrize(
    ("locustfile", "extra"),
    [
        ("chat", []),
        ("openai", []),
        ("open-loop", ["--arrival-rate", "4"]),
        ("chat", ["--processes", "2"]),  # the workers get the credentials from the master
    ],
    ids=["chat", "openai-sdk", "open-loop", "chat-2-processes"],
)
def test_headless_run_authenticates_every_call_and_leaks_nothing(
    auth_server: tuple[str, Path], tmp_path: Path, locustfile: str, extra: list[str]
) -> None:
    url, log = auth_server
    report_dir, logfile = tmp_path / "report", tmp_path / "locust.log"
    (tmp_path / "slo.yaml").write_text(SLO)
    argv = locust_argv(with_credentials(url, PASSWORD), locustfile=locustfile, report_dir=report_dir, extra=[
        "-u", "2", "-r", "2", "-t", "3s", "--only-summary", "--loglevel", "DEBUG", "--logfile", str(logfile),
        "--slo-file", str(tmp_path / "slo.yaml"), "--html", str(report_dir / "locust.html"),
        "--csv", str(report_dir / "locust"), *WORKLOAD, *extra,
    ])  # fmt: skip
    proc = subprocess.run(argv, capture_output=True, text=True, env=secret_env(url), cwd=tmp_path, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    seen = read_log(log)
    target_calls = [c for c in seen if c["path"] != "slack"]
    assert {c["auth"] for c in target_calls} == {"url"}, "every call carries the URL's Basic header"
    paths = {c["path"] for c in target_calls}
    assert {"/v1/models", "/tokenize", "/metrics", "/v1/chat/completions"} <= paths
    assert [c["auth"] for c in seen if c["path"] == "slack"] == ["none"]
    report = json.loads((report_dir / "slo-report.json").read_text())
    assert report["verdict"] == "pass" and report["run"]["target"] == url
    assert report["metrics"]["all"]["requests"] >= 2 and report["metrics"]["all"]["failures"] == 0
    assert report["server"]["available"] and report["alerts"]["slack"]["sent"]
    output = proc.stdout + proc.stderr + logfile.read_text()
    assert "the API key is not sent" in output and "OPENAI_API_KEY" in output  # the precedence, said once
    assert_nothing_leaked([report_dir, logfile], {"stdout": proc.stdout, "stderr": proc.stderr}, secrets_of(PASSWORD))


def http(url: str, data: dict[str, str] | None = None) -> str:
    body = None if data is None else urllib.parse.urlencode(data).encode()
    with urllib.request.urlopen(urllib.request.Request(url, data=body), timeout=10) as resp:
        return resp.read().decode()


def wait_for_run(ui: str, log: Path, auth: str, deadline: float) -> None:
    """Poll until a stream and a /metrics scrape have come with `auth`'s credentials (the server's
    log) and the web UI counts a request."""

    def measured() -> bool:
        return json.loads(http(ui + "/slo/status")).get("metrics", {}).get("all", {}).get("requests", 0) > 0

    while not ({"/v1/chat/completions", "/metrics"} <= {c["path"] for c in read_log(log) if c["auth"] == auth}
               and measured()):  # fmt: skip
        assert time.monotonic() < deadline, read_log(log)[-20:]
        time.sleep(0.1)


def test_web_ui_never_shows_the_credentials(auth_server: tuple[str, Path], tmp_path: Path) -> None:
    url, log = auth_server
    report_dir, logfile = tmp_path / "report", tmp_path / "locust.log"
    (tmp_path / "slo.yaml").write_text(SLO)
    port = free_port()
    ui = f"http://127.0.0.1:{port}"
    argv = locust_argv(with_credentials(url, PASSWORD), report_dir=report_dir, headless=False, extra=[
        "--web-host", "127.0.0.1", "--web-port", str(port), "-u", "2", "-r", "2", "--loglevel", "DEBUG",
        "--logfile", str(logfile), "--slo-file", str(tmp_path / "slo.yaml"),
        "--html", str(report_dir / "locust.html"), *WORKLOAD,
    ])  # fmt: skip
    out, err = tmp_path / "stdout", tmp_path / "stderr"
    with out.open("w") as o, err.open("w") as e:
        proc = subprocess.Popen(argv, stdout=o, stderr=e, env=secret_env(url), cwd=tmp_path)
    secrets = secrets_of(PASSWORD) + secrets_of(FORM_PASSWORD)
    pages: dict[str, str] = {}

    def fetch_pages(label: str) -> None:
        for path in ("/", "/stats/requests", "/slo/status", "/slo/report.json", "/slo/report.md"):
            pages[f"{label} {path}"] = http(ui + path)

    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                pages["start /"] = http(ui + "/")
                break
            except (urllib.error.URLError, ConnectionError):
                assert time.monotonic() < deadline and proc.poll() is None, err.read_text()[-2000:]
                time.sleep(0.3)
        assert url in pages["start /"]  # the form's host field: the bare URL
        # 1. Start from the form as shown (the bare URL): the credentials of --host still apply.
        pages["swarm 1"] = http(ui + "/swarm", {"user_count": "2", "spawn_rate": "2", "host": url})
        wait_for_run(ui, log, "url", deadline)  # streamed and scraped with the URL's credentials
        fetch_pages("run 1")
        run1 = json.loads(pages["run 1 /slo/status"])["metrics"]["all"]
        assert run1["requests"] > 0 and run1["failures"] == 0
        http(ui + "/stop", {})
        # 2. Credentials typed into the form's host field: used, never shown.
        typed = with_credentials(url, FORM_PASSWORD)
        pages["swarm 2"] = http(ui + "/swarm", {"user_count": "2", "spawn_rate": "2", "host": typed})
        wait_for_run(ui, log, "form", deadline)
        fetch_pages("run 2")
        http(ui + "/stop", {})
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
    assert all(c["auth"] in ("url", "form") for c in read_log(log) if c["path"] != "slack")
    streams = [c["auth"] for c in read_log(log) if c["path"] == "/v1/chat/completions"]
    assert "url" in streams and "form" in streams
    assert json.loads(pages["swarm 2"])["host"] == url
    assert_nothing_leaked([report_dir, logfile], {**pages, "stdout": out.read_text(), "stderr": err.read_text()},
                          secrets)  # fmt: skip


if __name__ == "__main__":
    serve(sys.argv[1])
