"""The run lease: one run of a vllm-pd release at a time (a coordination.k8s.io/v1 Lease).

A run that deploys cells itself (waves, `target.kubernetes.gpu_budget`) holds the Lease
`<release>-canary-run` in the cells' namespace while it runs: it creates the Lease, or takes over
one whose holder stopped renewing it for `lease_duration_s` (a run killed outright: its objects are
then a dead run's, which the sweep removes), and renews it every third of that from a background
thread. A second run of the release (the one-shot Job of a `helm upgrade` beside the CronJob's)
finds the Lease held and renewed: it waits up to `lease_wait_s` for it, then refuses with the
holder's name; it never sweeps or deploys meanwhile. The rotation state is read and written only
under the Lease. At the end the holder deletes its Lease.

Times are the API's MicroTime (UTC, microseconds); expiry is judged on the renew time the holder
wrote plus its lease duration, against this machine's UTC clock.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from canary.errors import CanaryError
from canary.plan.kube_names import LABEL_INSTANCE, LABEL_RUN

LEASES = "/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"
MICROTIME = "%Y-%m-%dT%H:%M:%S.%fZ"

Call = Callable[..., tuple[int, dict[str, Any]]]
"""(method, path, body=None) -> (HTTP status, parsed JSON body): WaveDeployer._call."""


class LeaseError(CanaryError):
    """The run lease could not be read, taken or kept."""


class LeaseHeld(LeaseError):
    """Another live run holds the release's lease."""


def lease_name(release: str) -> str:
    """The Lease's name for a release (a DNS subdomain of at most 63 characters here)."""
    return f"{release[:50].rstrip('-.')}-canary-run"


def format_time(when: datetime) -> str:
    return when.astimezone(UTC).strftime(MICROTIME)


def parse_time(text: object) -> datetime | None:
    """A MicroTime (or RFC 3339) text, None when absent or unreadable."""
    if not isinstance(text, str) or not text:
        return None
    try:
        parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


@dataclass(frozen=True)
class Holder:
    """Who holds a Lease, and until when (renew time + duration)."""

    identity: str
    run: str
    expires: datetime | None

    def alive(self, now: datetime) -> bool:
        return bool(self.identity) and self.expires is not None and now < self.expires


def holder_of(lease: dict[str, Any]) -> Holder:
    spec = lease.get("spec") or {}
    labels = (lease.get("metadata") or {}).get("labels") or {}
    renewed = parse_time(spec.get("renewTime")) or parse_time(spec.get("acquireTime"))
    duration = spec.get("leaseDurationSeconds")
    expires = renewed + timedelta(seconds=int(duration)) if renewed and isinstance(duration, int) else None
    return Holder(str(spec.get("holderIdentity") or ""), str(labels.get(LABEL_RUN, "")), expires)


class RunLease:
    """Acquire, renew and release one release's run lease (see the module docstring)."""

    def __init__(
        self,
        call: Call,
        *,
        namespace: str,
        release: str,
        run: str,
        duration_s: int,
        wait_s: float,
        poll_interval_s: float = 5.0,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        identity: str | None = None,
    ) -> None:
        self._call = call
        self.namespace = namespace
        self.release = release
        self.run = run
        self.name = lease_name(release)
        self.identity = identity or f"{run}@{socket.gethostname()}"
        self.duration_s = duration_s
        self.wait_s = wait_s
        self.poll_interval_s = poll_interval_s
        self._now = now
        self._clock = clock
        self._sleep = sleep
        self.taken_over: Holder | None = None
        self.lost: str | None = None
        self._stop = threading.Event()
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ REST

    @property
    def path(self) -> str:
        return f"{LEASES.format(namespace=self.namespace)}/{self.name}"

    def _get(self) -> dict[str, Any] | None:
        status, data = self._call("GET", self.path)
        if status == 404:
            return None
        if status != 200:
            raise LeaseError(
                f"reading Lease {self.namespace}/{self.name} failed: HTTP {status} {data.get('message', '')}"
            )
        return data

    def _body(self, previous: dict[str, Any] | None) -> dict[str, Any]:
        now = format_time(self._now())
        spec = (previous or {}).get("spec") or {}
        metadata: dict[str, Any] = {
            "name": self.name,
            "namespace": self.namespace,
            "labels": {LABEL_INSTANCE: self.release, LABEL_RUN: self.run},
        }
        if previous is not None:
            version = (previous.get("metadata") or {}).get("resourceVersion")
            if version:  # the API server refuses the write (409) if someone wrote in between
                metadata["resourceVersion"] = version
        ours = spec.get("holderIdentity") == self.identity
        return {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": metadata,
            "spec": {
                "holderIdentity": self.identity,
                "leaseDurationSeconds": self.duration_s,
                "acquireTime": spec.get("acquireTime") if ours else now,
                "renewTime": now,
                "leaseTransitions": int(spec.get("leaseTransitions") or 0) + (0 if ours or previous is None else 1),
            },
        }

    def _write(self, previous: dict[str, Any] | None) -> bool:
        """Create (no previous) or replace the Lease as ours; True when it now names us."""
        if previous is None:
            status, data = self._call("POST", LEASES.format(namespace=self.namespace), body=self._body(None))
        else:
            # a merge patch naming the resourceVersion it read: the API server refuses it (409) when
            # someone wrote in between, as an update would be
            status, data = self._call("PATCH", self.path, body=self._body(previous))
        if status == 409:  # someone else created or wrote it first
            return False
        if status not in (200, 201):
            raise LeaseError(
                f"writing Lease {self.namespace}/{self.name} failed: HTTP {status} {data.get('message', '')}"
            )
        current = self._get()  # read back: only the holder the server kept counts
        return current is not None and holder_of(current).identity == self.identity

    # ------------------------------------------------------------------ lifecycle

    def acquire(self) -> None:
        """Take the lease; wait up to wait_s while another live run holds it, then LeaseHeld."""
        started = self._clock()
        while True:
            current = self._get()
            holder = holder_of(current) if current is not None else None
            free = holder is None or holder.identity == self.identity or not holder.alive(self._now())
            if free and self._write(current):
                if holder is not None and holder.identity and holder.identity != self.identity:
                    self.taken_over = holder
                return
            waited = self._clock() - started
            if waited >= self.wait_s:
                who = holder.identity if holder is not None and holder.identity else "a run that wrote it first"
                expires = holder.expires.isoformat(timespec="seconds") if holder and holder.expires else "?"
                raise LeaseHeld(
                    f"release {self.release!r} in namespace {self.namespace!r} is being checked by another run: "
                    f"Lease {self.name} is held by {who} (renewed, expires {expires}); waited "
                    f"{waited:.0f}s (target.kubernetes.lease_wait_s={self.wait_s:g}). Not sweeping or deploying: "
                    "run again when it is done"
                )
            self._sleep(self.poll_interval_s)

    def renew(self) -> None:
        """Write a new renew time; LeaseError when the lease is no longer ours."""
        with self._lock:
            current = self._get()
            if current is None or holder_of(current).identity != self.identity:
                taker = holder_of(current).identity if current is not None else "nobody (deleted)"
                raise LeaseError(f"Lease {self.namespace}/{self.name} was taken by {taker}")
            if not self._write(current):
                raise LeaseError(f"renewing Lease {self.namespace}/{self.name} lost to another writer")

    def release_lease(self) -> None:
        """Delete the Lease if it is still ours."""
        with self._lock:
            current = self._get()
            if current is None or holder_of(current).identity != self.identity:
                return
            version = (current.get("metadata") or {}).get("resourceVersion")
            body: dict[str, Any] = {"preconditions": {"resourceVersion": version}} if version else {}
            status, data = self._call("DELETE", self.path, body=body)
            if status not in (200, 202, 404, 409):
                raise LeaseError(
                    f"deleting Lease {self.namespace}/{self.name} failed: HTTP {status} {data.get('message', '')}"
                )

    def live_other(self) -> Holder | None:
        """The holder of a live lease of the release when it is not this run, else None."""
        current = self._get()
        if current is None:
            return None
        holder = holder_of(current)
        return holder if holder.alive(self._now()) and holder.identity != self.identity else None

    def check(self) -> None:
        """LeaseError when the renewal thread found the lease lost."""
        if self.lost:
            raise LeaseError(f"run lease lost: {self.lost}; not starting another wave")

    def _renew_loop(self) -> None:
        interval = max(1.0, self.duration_s / 3)
        while not self._stop.wait(interval):
            try:
                self.renew()
            except (LeaseError, OSError, ValueError) as exc:
                self.lost = str(exc)
                return

    @contextmanager
    def held(self, *, renew_in_background: bool = True) -> Iterator[RunLease]:
        """Acquire; renew in a daemon thread while inside; stop renewing and release on exit."""
        self.acquire()
        thread = None
        if renew_in_background:
            thread = threading.Thread(target=self._renew_loop, name=f"lease-{self.name}", daemon=True)
            thread.start()
        try:
            yield self
        finally:
            self._stop.set()
            if thread is not None:
                thread.join(timeout=30)
            self.release_lease()
