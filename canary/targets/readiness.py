"""Is an OpenAI-compatible server ready? `/health` answers 200 and `/v1/models` lists the model.

Shared by the local target (waiting for the servers it started), the endpoint target and the
startup check. Every wait has a deadline; a caller-supplied `gone` callback ends the wait early
when the process behind the URL has died.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass

PROBE_TIMEOUT_S = 3.0


@dataclass(frozen=True)
class Probe:
    """One readiness probe."""

    ready: bool
    detail: str
    models: tuple[str, ...] = ()


def _get(url: str, timeout_s: float) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            return int(response.status), response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, b""


def probe(base_url: str, model: str | None, timeout_s: float = PROBE_TIMEOUT_S) -> Probe:
    """Probe once; never raises. model None: any listed model will do."""
    base = base_url.rstrip("/")
    try:
        status, _ = _get(f"{base}/health", timeout_s)
        if status != 200:
            return Probe(False, f"/health answered {status}")
        status, body = _get(f"{base}/v1/models", timeout_s)
    except (OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        return Probe(False, f"not reachable: {reason}")
    if status != 200:
        return Probe(False, f"/v1/models answered {status}")
    try:
        listed = tuple(str(m.get("id")) for m in json.loads(body).get("data", []))
    except (ValueError, AttributeError):
        return Probe(False, "/v1/models did not return a model list")
    if model is not None and model not in listed:
        return Probe(False, f"/v1/models lists {list(listed)}, not {model!r}", listed)
    if not listed:
        return Probe(False, "/v1/models lists no model")
    return Probe(True, "ready", listed)


def wait_ready(
    base_url: str,
    model: str | None,
    deadline: float,
    *,
    interval_s: float = 0.5,
    gone: Callable[[], bool] | None = None,
) -> Probe:
    """Poll until ready, the monotonic deadline passes, or gone() says the process died."""
    last = Probe(False, "not probed")
    while True:
        if gone is not None and gone():
            return Probe(False, f"process exited before it was ready (last probe: {last.detail})")
        last = probe(base_url, model)
        if last.ready:
            return last
        if time.monotonic() >= deadline:
            return last
        time.sleep(max(0.0, min(interval_s, deadline - time.monotonic())))
