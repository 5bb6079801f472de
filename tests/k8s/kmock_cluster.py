"""kmock, the in-memory Kubernetes API emulator, serving real HTTP on loopback from a thread.

It is the Kubernetes stand-in of these tests (no API server can run here): the official client
talks to it over HTTP exactly as to a cluster. It stores objects as given (no controllers, no
defaulting) and does not filter by label selector, so tests put pods in the states a kubelet
would have written.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import kmock

TEXT = {"Content-Type": "text/plain; charset=utf-8"}


class KmockCluster:
    """A running kmock KubernetesEmulator and helpers to shape its objects."""

    def __init__(self, loop: asyncio.AbstractEventLoop, emulator: kmock.KubernetesEmulator, url: str) -> None:
        self.loop = loop
        self.emulator = emulator
        self.url = url.rstrip("/")

    def _in_loop(self, fn: Callable[[], None]) -> None:
        async def call() -> None:
            fn()

        asyncio.run_coroutine_threadsafe(call(), self.loop).result(timeout=10)

    def put(self, resource: str, namespace: str, obj: dict[str, Any]) -> None:
        """Create or replace an object (e.g. resource 'v1/pods')."""
        name = obj["metadata"]["name"]

        def store() -> None:
            self.emulator.objects[resource, namespace, name] = obj

        self._in_loop(store)

    def declare(self, resource: str, kind: str) -> None:
        """Make a resource known even while it has no objects (lists then return [])."""

        def store() -> None:
            self.emulator.resources[resource] = {
                "namespaced": True,
                "kind": kind,
                "singular": kind.lower(),
                "verbs": ["get", "list", "watch"],
                "shortnames": [],
                "categories": [],
                "subresources": ["log"] if kind == "Pod" else [],
            }

        self._in_loop(store)

    def log(self, namespace: str, pod: str, container: str, text: str, *, previous: bool = False) -> None:
        """Serve a container log (GET .../pods/POD/log?container=C[&previous=true]), honouring
        tailLines and limitBytes as the API server does (the last N lines; at most N bytes)."""
        data = text.encode()

        def is_previous(request: Any) -> bool:
            return str(request.params.get("previous", "")).lower() == "true"

        def matches(request: Any) -> bool:
            return is_previous(request) == previous and request.params.get("container") == container

        def body(request: Any) -> bytes:
            served = data
            if (tail := request.params.get("tailLines")) is not None:
                lines = served.splitlines(keepends=True)
                served = b"".join(lines[len(lines) - min(int(tail), len(lines)) :])
            if (limit := request.params.get("limitBytes")) is not None:
                served = served[: int(limit)]
            return served

        def store() -> None:
            (
                self.emulator["get", kmock.subresource("log"), kmock.namespace(namespace), kmock.name(pod), matches]
                << kmock.headers(TEXT)
                << body
            )

        self._in_loop(store)

    def no_previous_log(self, namespace: str, pod: str, container: str) -> None:
        """Answer a previous-log request as the API server does when there is none (HTTP 400)."""
        status = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "code": 400,
            "reason": "BadRequest",
            "message": f'previous terminated container "{container}" in pod "{pod}" not found',
        }

        def matches(request: Any) -> bool:
            return str(request.params.get("previous", "")).lower() == "true"

        def store() -> None:
            view = self.emulator["get", kmock.subresource("log"), kmock.namespace(namespace), kmock.name(pod), matches]
            view << 400 << status

        self._in_loop(store)

    def fail_lists(self, resource_path: str, status: int, reason: str) -> None:
        """Answer every request to a path with an error Status (e.g. RBAC forbids it)."""
        body = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "code": status,
            "reason": reason,
            "message": f"{reason} (kmock)",
        }

        def store() -> None:
            self.emulator["get", resource_path] << status << body

        self._in_loop(store)


@contextmanager
def kmock_cluster() -> Iterator[KmockCluster]:
    """Start kmock on 127.0.0.1 (a free port) in a background thread; stop it afterwards."""
    ready: concurrent.futures.Future[KmockCluster] = concurrent.futures.Future()
    stop: dict[str, Any] = {}

    async def serve() -> None:
        async with kmock.KubernetesEmulator() as emulator, kmock.Server(emulator) as server:
            done = asyncio.Event()
            stop["event"], stop["loop"] = done, asyncio.get_running_loop()
            ready.set_result(KmockCluster(asyncio.get_running_loop(), emulator, str(server.url)))
            await done.wait()

    def run() -> None:
        try:
            asyncio.run(serve())
        except BaseException as exc:  # surface start-up failures to the waiting test
            if not ready.done():
                ready.set_exception(exc)
            raise

    thread = threading.Thread(target=run, name="kmock", daemon=True)
    thread.start()
    cluster = ready.result(timeout=30)
    try:
        yield cluster
    finally:
        stop["loop"].call_soon_threadsafe(stop["event"].set)
        thread.join(timeout=10)
