"""Drive locust inside the load subprocess: one local runner, or a master with worker processes.

Imports locust (gevent monkey-patching): only `python -m canary.load.process` imports this module.

Every process measures itself: its CPU seconds over the run (`resource.getrusage`) and the lag
of its gevent loop (a greenlet that asks to wake every `lag_probe_interval_s` and records how late
it woke). A saturated client shows as CPU near one core or as lag; `stats.client_problems` turns
that into an invalid result.

Distributed mode (locust master/workers): the master sends each worker the spec and its share
(every N-th request of the same seeded plan), starts the users through locust (which spreads
them over the workers), and collects each worker's raw samples and self-measurements with a
custom message when its share is done.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import resource
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import gevent
from locust.env import Environment
from locust.runners import MasterRunner, WorkerRunner

from canary.core.ports import free_port
from canary.load import user
from canary.load.stats import ClientHealth
from canary.load.workload import WorkloadSpec, build_plan, share_of_plan

log = logging.getLogger("canary.load")

MSG_PLAN = "canary_plan"
MSG_RESULT = "canary_result"
WORKER_CONNECT_TIMEOUT_S = 180.0
RESULT_GRACE_S = 30.0


def cpu_seconds() -> float:
    """User + system CPU seconds of this process so far."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def freeze_heap() -> None:
    """Keep the garbage collector off everything this process built before its load starts.

    A full collection walks every tracked object: here locust's, gevent's and the plan's, some 60k,
    about 40 ms of CPU that stalls every stream at once, so tokens arriving meanwhile share one read
    (their gaps come out as 0 and twice the real one). Frozen objects are never walked again, so
    collections during the run only see the run's own objects. `vllm bench serve` freezes its heap
    the same way before measuring.
    """
    gc.collect()
    gc.freeze()


class LagProbe:
    """Measures how late the gevent loop wakes a sleeping greenlet."""

    def __init__(self, interval_s: float) -> None:
        self.interval_s = interval_s
        self.lags: list[float] = []
        self._greenlet: gevent.Greenlet | None = None

    def _loop(self) -> None:
        while True:
            asked = time.perf_counter()
            gevent.sleep(self.interval_s)
            self.lags.append(max(0.0, time.perf_counter() - asked - self.interval_s))

    def start(self) -> None:
        """Start probing."""
        self._greenlet = gevent.spawn(self._loop)

    def stop(self) -> None:
        """Stop probing."""
        if self._greenlet is not None:
            self._greenlet.kill(block=False)


def _process_share(spec: WorkloadSpec, share: int, shares: int) -> user.RequestSource:
    plan = build_plan(spec)
    if shares > 1:
        plan = share_of_plan(plan, share, shares)
    return user.RequestSource(
        plan=plan, path=spec.path, ignore_eos=spec.ignore_eos, deadline_s=spec.max_duration_s, worker=share
    )


def _users_for(spec: WorkloadSpec, planned: int) -> int:
    return max(1, min(spec.concurrency, planned))


def _part_result(source: user.RequestSource, health: ClientHealth, stop_reason: str) -> dict[str, Any]:
    return {
        "samples": [s.to_json() for s in source.samples],
        "health": health.to_json(),
        "planned": len(source.plan),
        "not_sent": source.not_sent,
        "cut": source.in_flight,
        "stop_reason": stop_reason,
    }


def run_local(spec: WorkloadSpec) -> dict[str, Any]:
    """The whole run in this process with a locust LocalRunner."""
    source = _process_share(spec, 0, 1)
    user.configure(source, spec.base_url, spec.request_timeout_s)
    env = Environment(user_classes=[user.StreamingUser], host=spec.base_url)
    runner = env.create_local_runner()
    probe = LagProbe(spec.lag_probe_interval_s)
    freeze_heap()
    probe.start()
    cpu0, wall0 = cpu_seconds(), time.perf_counter()
    source.start()
    users = _users_for(spec, len(source.plan))
    runner.start(users, spawn_rate=users)
    finished = source.all_done.wait(timeout=spec.max_duration_s + 5.0)
    health = ClientHealth(cpu_s=cpu_seconds() - cpu0, wall_s=time.perf_counter() - wall0, lag_s=list(probe.lags))
    probe.stop()
    runner.quit()
    result = _part_result(source, health, "complete" if finished and not source.not_sent else "deadline")
    return {**result, "parts": [{k: v for k, v in result.items() if k != "samples"}], "processes": 1}


@contextlib.contextmanager
def local_workers(count: int, master_port: int) -> Iterator[list[subprocess.Popen[bytes]]]:
    """Start `count` worker processes of this machine; stop them when done."""
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "canary.load.process",
                "--worker",
                "--master-host",
                "127.0.0.1",
                "--master-port",
                str(master_port),
            ],
        )
        for _ in range(count)
    ]
    try:
        yield procs
    finally:
        for proc in procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)


def run_master(
    spec: WorkloadSpec, expect_workers: int, bind_host: str = "127.0.0.1", bind_port: int | None = None
) -> dict[str, Any]:
    """A locust master: local worker processes (spec.workers) or `expect_workers` remote ones."""
    port = bind_port or free_port(bind_host if bind_host not in ("*", "0.0.0.0") else "127.0.0.1")
    env = Environment(user_classes=[user.StreamingUser], host=spec.base_url)
    master: MasterRunner = env.create_master_runner(bind_host, port)
    parts: dict[str, dict[str, Any]] = {}

    def on_result(environment: Environment, msg: Any, **_: Any) -> None:
        parts[str(msg.node_id)] = msg.data

    master.register_message(MSG_RESULT, on_result)
    spawn_local = spec.workers if expect_workers == 0 else 0
    wanted = spawn_local or expect_workers
    with local_workers(spawn_local, port):
        deadline = time.monotonic() + WORKER_CONNECT_TIMEOUT_S
        while len(master.clients.ready) < wanted:
            if time.monotonic() > deadline:
                master.quit()
                raise RuntimeError(f"only {len(master.clients.ready)} of {wanted} locust workers connected")
            gevent.sleep(0.1)
        workers = list(master.clients.ready)[:wanted]
        for share, worker in enumerate(workers):
            master.send_message(
                MSG_PLAN, {"spec": spec.model_dump(mode="json"), "share": share, "shares": wanted}, client_id=worker.id
            )
        master.start(spec.concurrency, spawn_rate=spec.concurrency)
        deadline = time.monotonic() + spec.max_duration_s + RESULT_GRACE_S
        while len(parts) < wanted and time.monotonic() < deadline:
            gevent.sleep(0.1)
        master.quit()
    missing = wanted - len(parts)
    samples = [s for p in parts.values() for s in p["samples"]]
    health = ClientHealth.merge([ClientHealth.from_json(p["health"]) for p in parts.values()])
    stop = "complete" if not missing and all(p["stop_reason"] == "complete" for p in parts.values()) else "deadline"
    return {
        "samples": samples,
        "health": health.to_json(),
        "planned": spec.total_requests,
        "not_sent": sum(p["not_sent"] for p in parts.values()) + (spec.total_requests if missing == wanted else 0),
        "cut": sum(p["cut"] for p in parts.values()),
        "stop_reason": stop if not missing else f"{missing} worker(s) sent no result",
        "parts": [{k: v for k, v in p.items() if k != "samples"} for p in parts.values()],
        "processes": len(parts),
    }


def run_worker(master_host: str, master_port: int) -> int:
    """A locust worker: waits for its share of the plan, runs it, reports to the master."""
    env = Environment(user_classes=[user.StreamingUser])
    worker: WorkerRunner = env.create_worker_runner(master_host, master_port)
    state: dict[str, Any] = {}

    def on_plan(environment: Environment, msg: Any, **_: Any) -> None:
        spec = WorkloadSpec.model_validate(msg.data["spec"])
        source = _process_share(spec, int(msg.data["share"]), int(msg.data["shares"]))
        user.configure(source, spec.base_url, spec.request_timeout_s)
        probe = LagProbe(spec.lag_probe_interval_s)
        freeze_heap()
        probe.start()
        source.start()
        state.update(spec=spec, source=source, probe=probe, cpu0=cpu_seconds(), wall0=time.perf_counter())
        gevent.spawn(report_when_done)

    def report_when_done() -> None:
        spec: WorkloadSpec = state["spec"]
        source: user.RequestSource = state["source"]
        finished = source.all_done.wait(timeout=spec.max_duration_s + 5.0)
        probe: LagProbe = state["probe"]
        health = ClientHealth(
            cpu_s=cpu_seconds() - state["cpu0"], wall_s=time.perf_counter() - state["wall0"], lag_s=list(probe.lags)
        )
        probe.stop()
        stop_reason = "complete" if finished and not source.not_sent else "deadline"
        worker.send_message(MSG_RESULT, _part_result(source, health, stop_reason))

    worker.register_message(MSG_PLAN, on_plan)
    worker.greenlet.join(timeout=24 * 3600)
    return 0
