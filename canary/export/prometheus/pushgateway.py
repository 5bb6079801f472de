"""Push a run to a Prometheus Pushgateway; spool it to disk when the gateway is unreachable.

Grouping key: ``job`` (config export.pushgateway.job) and ``scope`` (export.pushgateway.scope), so
several canaries can share one gateway. Every push is an HTTP PUT of the whole run: it replaces
everything the previous run of that group pushed, so cells gone from the matrix disappear too.

Unreachable gateway (connection refused, timeout, HTTP 5xx) after ``retries`` retries with
exponential backoff: the run's exposition is written to the spool directory
(``<results_dir>/.spool/pushgateway/<run-id>.json``). Every later push first pushes the spooled
runs, oldest first, each with its own grouping key, and deletes each once the gateway accepted it;
only then the current run. Nothing is lost while the spool directory survives (on Kubernetes:
results_dir on a persistent volume). A run the gateway rejects (HTTP 4xx: retrying cannot help)
is moved to ``.spool/pushgateway/rejected/`` with the gateway's answer, never retried forever.

The gateway keeps one run per group: a spooled run pushed right before a newer one is visible in
Prometheus only if Prometheus scrapes the gateway in between; its complete results stay in
``results/<run-id>/``.
"""

from __future__ import annotations

import base64
import fcntl
import json
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from canary.core.atomic import write_atomic
from canary.core.redact import redact_url

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
SPOOL_SUBDIR = Path(".spool") / "pushgateway"
MAX_BACKOFF_S = 8.0


class PushError(Exception):
    """A push failed; `retryable` is False when the gateway rejected the body (HTTP 4xx)."""

    def __init__(self, message: str, *, retryable: bool) -> None:
        super().__init__(message)
        self.retryable = retryable


@dataclass(frozen=True)
class Gateway:
    """Where and how to push."""

    url: str
    timeout_s: float = 10.0
    retries: int = 3
    backoff_s: float = 1.0
    authorization: str | None = None
    """The Authorization header's value (basic_auth() or bearer()); never printed."""

    @property
    def where(self) -> str:
        """The URL as messages may show it (no user information)."""
        return redact_url(self.url)

    def __repr__(self) -> str:
        return f"Gateway(url={self.where!r}, authorization={'***' if self.authorization else None})"


def basic_auth(username: str, password: str) -> str:
    """An Authorization value for HTTP basic auth."""
    return "Basic " + base64.b64encode(f"{username}:{password}".encode()).decode("ascii")


def bearer(token: str) -> str:
    """An Authorization value for a bearer token."""
    return f"Bearer {token}"


def _segment(label: str, value: str) -> str:
    """One grouping-key path segment, base64url-encoded when the value cannot sit in a path."""
    if not value:
        return f"{label}@base64/="
    if "/" in value:
        encoded = base64.urlsafe_b64encode(value.encode("utf-8")).decode("ascii")
        return f"{label}@base64/{encoded}"
    return f"{label}/{urllib.parse.quote(value, safe='')}"


def group_url(base_url: str, job: str, scope: str) -> str:
    """The URL of the group (job, scope)."""
    return f"{base_url.rstrip('/')}/metrics/{_segment('job', job)}/{_segment('scope', scope)}"


def push_once(gateway: Gateway, job: str, scope: str, body: bytes) -> None:
    """One PUT of body to the group; PushError on any failure."""
    headers = {"Content-Type": CONTENT_TYPE}
    if gateway.authorization:
        headers["Authorization"] = gateway.authorization
    request = urllib.request.Request(group_url(gateway.url, job, scope), data=body, method="PUT", headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=gateway.timeout_s) as response:
            response.read()
    except urllib.error.HTTPError as exc:
        detail = exc.read().decode("utf-8", errors="replace").strip()[:500]
        raise PushError(f"HTTP {exc.code} from {gateway.where}: {detail}", retryable=exc.code >= 500) from None
    except (OSError, ValueError) as exc:  # URLError, refused, timeout, bad URL
        reason = getattr(exc, "reason", exc)
        raise PushError(f"cannot reach {gateway.where}: {redact_url(str(reason))}", retryable=True) from None


def push(gateway: Gateway, job: str, scope: str, body: bytes) -> int:
    """Push with retries and exponential backoff; returns the attempts it took. PushError if all failed."""
    attempt = 0
    while True:
        attempt += 1
        try:
            push_once(gateway, job, scope, body)
            return attempt
        except PushError as exc:
            if not exc.retryable or attempt > gateway.retries:
                raise
            time.sleep(min(gateway.backoff_s * 2 ** (attempt - 1), MAX_BACKOFF_S))


@dataclass(frozen=True)
class Spooled:
    """A run waiting in the spool."""

    path: Path
    run_id: str
    job: str
    scope: str
    body: bytes


class Spool:
    """Runs that could not be pushed yet, one JSON file each, pushed oldest first."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def add(self, run_id: str, job: str, scope: str, body: bytes, reason: str) -> Path:
        """Keep a run for the next push."""
        record = {"run_id": run_id, "job": job, "scope": scope, "reason": reason, "body": body.decode("utf-8")}
        return write_atomic(self.directory / f"{run_id}.json", json.dumps(record))

    def pending(self) -> list[Spooled]:
        """Spooled runs, oldest first (run ids start with their UTC time)."""
        if not self.directory.is_dir():
            return []
        out = []
        for path in sorted(self.directory.glob("*.json")):
            record = json.loads(path.read_text(encoding="utf-8"))
            out.append(Spooled(path, record["run_id"], record["job"], record["scope"], record["body"].encode("utf-8")))
        return out

    def reject(self, entry: Spooled, reason: str) -> Path:
        """Move a run the gateway refused out of the way, with the refusal."""
        target = self.directory / "rejected" / entry.path.name
        target.parent.mkdir(parents=True, exist_ok=True)
        record = json.loads(entry.path.read_text(encoding="utf-8"))
        record["rejected"] = reason
        write_atomic(target, json.dumps(record))
        entry.path.unlink()
        return target

    @contextmanager
    def locked(self) -> Iterator[None]:
        """Hold the spool's lock (one pusher at a time)."""
        self.directory.mkdir(parents=True, exist_ok=True)
        with (self.directory / ".lock").open("w") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)


def push_run(gateway: Gateway, job: str, scope: str, run_id: str, body: bytes, spool_dir: Path) -> list[str]:
    """Push the spooled runs, then this one; spool this one if the gateway is unreachable.

    Returns one status line per run handled."""
    spool = Spool(spool_dir)
    lines: list[str] = []
    where = f"{gateway.where} (job={job}, scope={scope})"
    with spool.locked():
        for entry in spool.pending():
            try:
                push(gateway, entry.job, entry.scope, entry.body)
            except PushError as exc:
                if exc.retryable:
                    spool.add(run_id, job, scope, body, str(exc))
                    waiting = len(spool.pending())
                    return [f"pushgateway: {exc}; spooled {run_id} ({waiting} runs waiting in {spool_dir})"]
                moved = spool.reject(entry, str(exc))
                lines.append(f"pushgateway: REJECTED spooled run {entry.run_id}: {exc} (kept in {moved})")
                continue
            entry.path.unlink()
            lines.append(f"pushgateway: pushed spooled run {entry.run_id} to {entry.job}/{entry.scope}")
        try:
            attempts = push(gateway, job, scope, body)
        except PushError as exc:
            if exc.retryable:
                spool.add(run_id, job, scope, body, str(exc))
                lines.append(
                    f"pushgateway: {exc}; spooled {run_id} ({len(spool.pending())} runs waiting in {spool_dir})"
                )
            else:
                saved = spool.add(run_id, job, scope, body, str(exc))
                moved = spool.reject(Spooled(saved, run_id, job, scope, body), str(exc))
                lines.append(f"pushgateway: REJECTED run {run_id}: {exc} (kept in {moved})")
            return lines
        retried = f" after {attempts} attempts" if attempts > 1 else ""
        lines.append(f"pushgateway: pushed run {run_id} to {where}{retried}")
    return lines
