"""The target's URL without credentials, and the Authorization header every call to it carries.

`--host http://user:pass@host:port` is common in front of a server behind basic auth. The
credentials leave the URL as early as possible (Locust's `init`, each `test_start`, the web UI
form's host field) and are kept in memory only, here, keyed by the URL without them: Locust's
pages, logs, messages and reports only ever see the bare URL. Every call to the target (model
discovery, /tokenize, priming, /metrics, the streams) asks `resolve()` for its base URL and
headers. A URL entered later without credentials gets none, unless it is the very URL they came
with (so the web UI form, which shows the bare URL, can start the run again).

Precedence: credentials in the URL become `Authorization: Basic ...` and win over an API key
(SLOGATE_API_KEY / OPENAI_API_KEY, otherwise `Authorization: Bearer ...`); one warning per
process says so, naming the variable, never a value.

Distributed runs: the master's options carry the table to the workers with each spawn
message (under `WIRE_ATTR`, which is no command-line option, so no form or page shows it).

TLS: every call to an https target verifies its certificate against one context per process
(`tls_context()`): the CA file of `--ca-bundle` (`use_ca_bundle`), else the system's CAs
(`SSL_CERT_FILE` / `SSL_CERT_DIR` honoured) and, where the system has no CA file, certifi's, as
the HTTP clients did on their own. One context: loading a bundle costs ~40 ms of CPU, which every
client loading its own would spend while streams are in flight. A handshake that fails is one
line (`tls_failure`), counted as `tls`, never as `connect`.

Whether the target answers at all (`probe`): what tells a server that accepts connections and
never answers (a hung process, a proxy with no backend) from one that is merely slow.
"""

from __future__ import annotations

import base64
import functools
import logging
import os
import re
import socket
import ssl
import time
import weakref
from typing import Any
from urllib.parse import unquote, urlsplit, urlunsplit

from slogate.slo.plugin import settings

log = logging.getLogger("slogate")
API_KEY_ENV_VARS = ("SLOGATE_API_KEY", "OPENAI_API_KEY")
WIRE_ATTR = "slogate_target_credentials"

# Per environment, held weakly: {URL without credentials: Authorization}.
_known: weakref.WeakKeyDictionary[Any, dict[str, str]] = weakref.WeakKeyDictionary()
_warned = False


def split_credentials(url: str) -> tuple[str, str | None]:
    """`url` without `user:password@`, and the `Basic ...` header value the userinfo becomes
    (percent-decoded, UTF-8), or None when the URL has none. The rest of the URL is kept as it is."""
    parts = urlsplit(url)
    userinfo, at, hostport = parts.netloc.rpartition("@")
    if not at:
        return url, None
    bare = urlunsplit(parts._replace(netloc=hostport))
    if not userinfo:
        return bare, None
    user, _, password = userinfo.partition(":")
    token = base64.b64encode(f"{unquote(user)}:{unquote(password)}".encode()).decode("ascii")
    return bare, f"Basic {token}"


def _key(url: str) -> str:
    return url.rstrip("/")


def remember(environment: Any, url: str | None) -> str | None:
    """`url` without credentials; the credentials it had are kept for it (and sent to workers)."""
    if not url:
        return url
    bare, basic = split_credentials(url)
    if basic is not None:
        known = _known.setdefault(environment, {})
        known[_key(bare)] = basic
        settings.carry(environment, WIRE_ATTR, dict(known))
    return bare


def strip_environment(environment: Any) -> None:
    """Take the credentials out of `environment.host` and the `--host` option (idempotent)."""
    environment.host = remember(environment, environment.host)
    host = settings.carried(environment, "host")
    if isinstance(host, str):
        settings.carry(environment, "host", remember(environment, host))


def api_key() -> str | None:
    for name in API_KEY_ENV_VARS:
        if os.environ.get(name):
            return os.environ[name]
    return None


def resolve(environment: Any, url: str | None = None) -> tuple[str, dict[str, str]]:
    """The base URL to call (no credentials, no trailing slash) and the Authorization header for
    it. `url` defaults to `environment.host`; credentials in `url` itself are used too."""
    bare, basic = split_credentials(url or environment.host or "")
    base = _key(bare)
    if basic is None:
        basic = _known.get(environment, {}).get(base)
    wire = settings.carried(environment, WIRE_ATTR)  # a worker's, from the master
    if basic is None and isinstance(wire, dict):
        basic = wire.get(base)
    return base, _authorization(basic)


def _authorization(basic: str | None) -> dict[str, str]:
    global _warned
    key = api_key()
    if basic is None:
        return {"Authorization": f"Bearer {key}"} if key else {}
    if key and not _warned:
        _warned = True
        name = next(n for n in API_KEY_ENV_VARS if os.environ.get(n))
        log.warning(
            "slogate: the --host URL has credentials and %s is set: Authorization carries the URL's "
            "basic credentials, the API key is not sent",
            name,
        )
    return {"Authorization": basic}


_ca_bundle: str | None = None  # the process's --ca-bundle; None: the system's CAs


def use_ca_bundle(path: str | None) -> None:
    """Verify the target's certificate against the CA file `path` (PEM) from now on, in this
    process; None or "": the system's. ValueError, one line, when the file cannot be read as CAs."""
    global _ca_bundle
    path = path or None
    if path is not None:
        _context_for(path)  # loaded now: a bad file is refused before any load
    _ca_bundle = path


def tls_context() -> ssl.SSLContext:
    """The process's context for https targets (`use_ca_bundle`), built once per CA file."""
    return _context_for(_ca_bundle)


@functools.cache
def _context_for(cafile: str | None) -> ssl.SSLContext:
    if cafile is None:
        context = ssl.create_default_context()
        if ssl.get_default_verify_paths().cafile is None:  # no system bundle: certifi's, as the HTTP clients did
            import certifi

            context.load_verify_locations(certifi.where())
        return context
    try:
        return ssl.create_default_context(cafile=cafile)
    except (OSError, ValueError) as e:  # ssl.SSLError is an OSError: not PEM, no certificate in it
        raise ValueError(f"--ca-bundle {cafile}: cannot be read as a CA bundle ({_reason(e)})") from None


def tls_failure(error: BaseException) -> str | None:
    """One line for a TLS handshake that failed (the certificate did not verify, no common
    protocol, a plain-HTTP server on an https URL), or None for any other error: an EOF during the
    handshake is a closed connection, not TLS."""
    if not isinstance(error, ssl.SSLError) or isinstance(error, ssl.SSLEOFError | ssl.SSLZeroReturnError):
        return None
    if isinstance(error, ssl.SSLCertVerificationError):
        why = error.verify_message or _reason(error)
        return f"TLS: the target's certificate does not verify ({why}); --ca-bundle FILE names the CA that signed it"
    return f"TLS handshake failed: {_reason(error)}"


def _reason(error: BaseException) -> str:
    """An OS or `ssl` error's words, one line, without OpenSSL's `[LIB: CODE]` and `(_ssl.c:N)`."""
    text = getattr(error, "strerror", None) or str(error)
    return " ".join(re.sub(r"^\[[^\]]*\]\s*|\s*\(_ssl\.c:\d+\)$", "", text).split()) or type(error).__name__


# What `probe` found: any byte came back; the connection was refused, closed or failed otherwise
# (the requests fail the same way, and are counted so); it was accepted and nothing came back in
# time; no connection was accepted in time.
ANSWERED, FAILED, SILENT, NO_CONNECTION = "answered", "failed", "silent", "no_connection"


def probe(url: str, timeout_s: float, headers: dict[str, str] | None = None) -> str:
    """Whether the target at `url` answers anything within `timeout_s`: a connection to it, a GET
    of /v1/models with the run's `headers` (its credentials: every call to the target carries
    them), and any byte back (an error status counts: a server that answers, however slowly it
    serves the load, is measured, not stopped)."""
    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    deadline = time.monotonic() + timeout_s
    try:
        conn = socket.create_connection((parts.hostname, port), timeout=timeout_s)
    except TimeoutError:
        return NO_CONNECTION
    except OSError:
        return FAILED
    try:
        conn.settimeout(max(deadline - time.monotonic(), 0.001))
        if parts.scheme == "https":  # the handshake is the server's first answer
            conn = tls_context().wrap_socket(conn, server_hostname=parts.hostname)
        path = parts.path.rstrip("/") + "/v1/models"
        fields = "".join(f"{name}: {value}\r\n" for name, value in (headers or {}).items())
        conn.sendall(f"GET {path} HTTP/1.1\r\nHost: {parts.netloc}\r\n{fields}Connection: close\r\n\r\n".encode())
        return ANSWERED if conn.recv(1) else FAILED
    except TimeoutError:
        return SILENT
    except ssl.SSLError:
        return ANSWERED  # it answered the handshake, if not as hoped: `tls` failures say the rest
    except OSError:
        return FAILED
    finally:
        conn.close()
