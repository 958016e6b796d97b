"""One-off calls to the target made before load starts: model discovery and token calibration.

They use the standard library (gevent-patched under Locust); the hot path never comes here. An
https target's certificate is verified as the streams verify it (`target.tls_context`, --ca-bundle).
"""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.request
from typing import Any

from slogate.slo.plugin import target


class TargetError(Exception):
    """The target could not be reached or answered unexpectedly; str() is one line."""


def _call(url: str, headers: dict[str, str], body: dict[str, Any] | None = None, timeout: float = 30) -> Any:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, headers={**headers, "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout, context=target.tls_context()) as resp:
            return json.loads(resp.read())
    except urllib.error.HTTPError as e:
        raise TargetError(f"{e.code} {e.reason} from {url.rsplit('/', 1)[-1]}") from None
    except TimeoutError:
        raise TargetError(f"{url} accepted the connection but answered nothing in {timeout:g} s") from None
    except (urllib.error.URLError, OSError) as e:
        reason = getattr(e, "reason", e)
        tls = target.tls_failure(reason) if isinstance(reason, BaseException) else None
        raise TargetError(tls or f"{url} did not answer: {_plain(reason)}") from None
    except ValueError:
        raise TargetError(f"{url.rsplit('/', 1)[-1]} did not answer JSON") from None


def _plain(reason: object) -> str:
    """An OS error's words without errno's `[Errno 111]` prefix."""
    return re.sub(r"^\[Errno -?\d+\]\s*", "", str(reason))


def model_ids(host: str, headers: dict[str, str]) -> list[str]:
    """The ids the target's `/v1/models` lists (a base model, LoRA adapters), in its order."""
    data = _call(f"{host}/v1/models", headers)
    listed = data.get("data") if isinstance(data, dict) else None
    return [m["id"] for m in listed or () if isinstance(m, dict) and isinstance(m.get("id"), str)]


def first_model_id(host: str, headers: dict[str, str]) -> str:
    ids = model_ids(host, headers)
    if not ids:
        raise TargetError("/v1/models lists no model; pass --model")
    return ids[0]


def prime(host: str, headers: dict[str, str], path: str, bodies: list[dict[str, Any]], timeout: float) -> None:
    """Send non-streamed requests to `path` whose answers do not matter (cache priming)."""
    for body in bodies:
        _call(f"{host}{path}", headers, body, timeout=timeout)


def count_tokens(host: str, headers: dict[str, str], model: str, text: str) -> int | None:
    """Tokens in `text` as the server counts them (vLLM's /tokenize), or None if unsupported."""
    try:
        data = _call(f"{host}/tokenize", headers, {"model": model, "prompt": text, "add_special_tokens": False})
    except TargetError:
        return None
    count = data.get("count") if isinstance(data, dict) else None
    return count if isinstance(count, int) and count > 0 else None
