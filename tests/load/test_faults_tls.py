"""TLS, a fault of the whole server: a certificate the client does not trust fails every request as
`tls` (one line naming --ca-bundle), counted exactly against the server's log of failed
handshakes; `--ca-bundle FILE` makes every user, model discovery, /tokenize and /metrics verify
against that CA; a CA file that cannot be read is a usage error before any load.

The certificates are a throwaway CA and a server certificate it signed (for 127.0.0.1), made with
the `openssl` command line (the `cryptography` package is not a dependency)."""

import shutil
import subprocess
import urllib.error
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from slogate.launch import fault_server as fault
from slogate.locustfiles.load import server
from slogate.slo.gate.record import ErrorKind
from slogate.slo.plugin import target
from slogate.slo.plugin.scraper import Scraper, fetch

from tests.conftest import server_log
from tests.load.test_users import USERS, Harness


@pytest.fixture(scope="module")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """`ca` (the CA's certificate, a --ca-bundle), `cert` and `key` (the server's)."""
    if shutil.which("openssl") is None:
        pytest.skip("no openssl command to make test certificates")
    d = tmp_path_factory.mktemp("tls")
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]

    def openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=d, check=True, capture_output=True)

    ca = ["-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign"]
    openssl("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.pem", "-days", "2", "-subj", "/CN=slogate CA", *ca)
    openssl("req", *ec, "-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=127.0.0.1")
    (d / "server.ext").write_text("subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n")
    openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
            "-out", "server.pem", "-days", "2", "-extfile", "server.ext")  # fmt: skip
    return {"ca": d / "ca.pem", "cert": d / "server.pem", "key": d / "server.key"}


@pytest.fixture
def tls_server(certificates: dict[str, Path], tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """A fault server that speaks TLS only (an https URL), with its log: one row per streamed
    request, and one, fault `tls`, per handshake the client refused."""
    log = tmp_path / "answered.jsonl"
    proc, url = fault.spawn(log, tls=(certificates["cert"], certificates["key"]), metrics=True)
    yield url, log
    proc.terminate()
    proc.wait(timeout=10)


@pytest.fixture(autouse=True)
def _system_cas_after() -> Iterator[None]:
    yield
    target.use_ca_bundle(None)  # the process's TLS trust as the next test expects it


@pytest.mark.parametrize("user_class", USERS)
def test_an_untrusted_certificate_is_one_tls_failure_per_request(tls_server, user_class: type) -> None:
    url, log = tls_server
    h = Harness(user_class, url, "tokens=2")  # its /tokenize calibration (best effort) meets the certificate too
    calibration = server_log(log, 1)
    records = h.call(3)
    assert [r.error_kind for r in records] == [ErrorKind.TLS] * 3
    for r in records:
        assert r.error_message.startswith("TLS: the target's certificate does not verify (")
        assert "--ca-bundle FILE" in r.error_message and "\n" not in r.error_message
    refused = server_log(log, len(calibration) + 3)
    assert [r["fault"] for r in refused] == ["tls"] * (len(calibration) + 3)


@pytest.mark.parametrize("user_class", USERS)
def test_ca_bundle_makes_each_user_verify_the_certificate(tls_server, certificates, user_class: type) -> None:
    url, log = tls_server
    records = Harness(user_class, url, "tokens=2", "--ca-bundle", str(certificates["ca"])).call(3)
    assert [r.error_kind for r in records] == [None] * 3
    assert Counter(r["outcome"] for r in server_log(log, 3)) == {"ok": 3}  # not one handshake refused


def test_ca_bundle_makes_discovery_tokenize_and_metrics_verify(tls_server, certificates) -> None:
    url, _ = tls_server
    with pytest.raises(server.TargetError, match=r"^TLS: the target's certificate does not verify \(.*--ca-bundle"):
        server.first_model_id(url, {})
    with pytest.raises(urllib.error.URLError, match="CERTIFICATE_VERIFY_FAILED"):
        fetch(url)
    scraper = Scraper(url, 1.0)
    assert not scraper.scrape_once() and "certificate does not verify" in (scraper.metrics.error or "")

    target.use_ca_bundle(str(certificates["ca"]))
    assert server.first_model_id(url, {}) == "default"
    assert server.count_tokens(url, {}, "default", "three words here") == 3
    assert fetch(url)["vllm:num_requests_running"] == 0
    assert Scraper(url, 1.0).scrape_once()


@pytest.mark.parametrize("content", ["", "not a certificate\n"])
def test_a_ca_bundle_that_cannot_be_read_is_refused_in_one_line(tmp_path: Path, content: str) -> None:
    path = tmp_path / "ca.pem"
    if content:
        path.write_text(content)
    with pytest.raises(ValueError, match=rf"^--ca-bundle {path}: cannot be read as a CA bundle \(.+\)$"):
        target.use_ca_bundle(str(path))


def test_a_run_without_the_ca_counts_every_request_as_tls_exactly(tls_server, locust_run) -> None:
    url, log = tls_server
    run = locust_run(
        url, "-u", "2", "-r", "2", "-t", "2s", "--stop-timeout", "5", "--model", "tokens=3", "--no-prime-prefixes",
        "--shared-prefix-tokens", "20", "--server-metrics-interval", "0", timeout=60,
    )  # fmt: skip
    total = run.report["metrics"]["all"]
    assert total["unfinished"] == 0, total  # --stop-timeout: the handshakes in flight at the end end too
    assert total["requests"] > 0 and total["errors_by_kind"] == {"tls": total["requests"]}, run.stderr[-2000:]
    # Every handshake the server saw refused: each request's, and the one /tokenize calibration's.
    refused = server_log(log, total["requests"] + 1)
    assert [r["fault"] for r in refused] == ["tls"] * (total["requests"] + 1)


@pytest.mark.parametrize("locustfile", ["chat", "open-loop", "openai"])
def test_a_run_with_the_ca_bundle_verifies_everywhere(tls_server, certificates, locust_run, locustfile: str) -> None:
    """No --model: discovery, /tokenize, the streams and /metrics all over TLS, against the CA."""
    url, log = tls_server
    run_time = "4s" if locustfile == "openai" else "2s"  # the OpenAI SDK's users take ~1 core-second to start
    run = locust_run(
        url, "-u", "2", "-r", "2", "-t", run_time, "--stop-timeout", "5", "--ca-bundle", str(certificates["ca"]),
        "--no-prime-prefixes",
        "--shared-prefix-tokens", "20", "--server-metrics-interval", "0.5", locustfile=locustfile, timeout=60,
    )  # fmt: skip
    assert run.code == 0, run.stderr[-2000:]
    report = run.report
    total = report["metrics"]["all"]
    assert total["requests"] > 0 and total["failures"] == 0 and report["run"]["model"] == "default"
    assert report["server"]["available"], report["server"]  # /metrics scraped over TLS
    assert Counter(r["outcome"] for r in server_log(log, total["requests"])) == {"ok": total["requests"]}


def test_a_run_that_cannot_discover_the_model_stops_at_once_with_one_tls_line(tls_server, locust_run) -> None:
    url, _ = tls_server
    run = locust_run(url, "-u", "1", "-r", "1", "-t", "30s", "--no-prime-prefixes", timeout=60)
    assert run.code == 3, run.stderr[-2000:]  # inconclusive: stopped long before its 30 s
    lines = [line for line in run.stderr.splitlines() if "TLS" in line and "/metrics" not in line]  # the run's own
    assert len(lines) == 1 and "target unreachable: TLS: the target's certificate does not verify" in lines[0]
    assert "--ca-bundle FILE" in lines[0]


def test_a_missing_ca_bundle_is_a_usage_error_before_any_load(tls_server, locust_run, tmp_path: Path) -> None:
    url, log = tls_server
    missing = tmp_path / "nowhere.pem"
    run = locust_run(url, "-u", "1", "-t", "5s", "--ca-bundle", str(missing), timeout=60)
    assert run.code == 2
    assert f"slogate: error: --ca-bundle {missing}: cannot be read as a CA bundle (No such file or directory)" in (
        run.stderr
    )
    assert not log.exists() or not log.read_text()  # not one connection
