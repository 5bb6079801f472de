"""The open-loop sender: every request goes out at its scheduled time, whatever is still in flight.

Imports locust and gevent: only the load subprocess (`python -m canary.load.run`) imports it.

One dispatcher greenlet walks the plan in order, sleeps until each request's scheduled time
(`PlannedRequest.offset_s` from the run's start) and spawns a greenlet that streams it on a shared
FastHttpSession (its connection pool grows with what is in flight). A completion never paces the
next send: that is what makes it open, unlike the closed loop of `concurrency` users.

- `max_in_flight` (optional): a request due while that many are in flight waits for a free slot,
  and so does every request due after it (first come, first served). The time the dispatcher spent
  waiting for slots after a request's scheduled time is recorded per request (`Sample.slot_wait_s`):
  it is the server's backlog, not the client's lateness.
- `abort_in_flight` (optional): once that many are in flight the dispatcher stops sending; the
  rest of the plan counts as not sent and the stop reason says "over-saturated". A capacity
  search uses it to leave a rate the server cannot carry early instead of queueing for minutes.
- Every sample keeps its scheduled send time (`intended_at`) and its actual one (`sent_at`);
  lateness = actual - scheduled - slot wait. A client that could not keep its schedule is made
  visible by `stats.schedule_problems` (the result is invalid), never hidden.
"""

from __future__ import annotations

import time
from typing import Any

import gevent
from gevent.lock import Semaphore
from locust.contrib.fasthttp import FastHttpSession
from locust.env import Environment

from canary.load import rxstamp, user
from canary.load.runner import LagProbe, cpu_seconds, freeze_heap
from canary.load.stats import ClientHealth, Sample
from canary.load.workload import PlannedRequest, WorkloadSpec, build_plan

DRAIN_GRACE_S = 5.0


def run_open(spec: WorkloadSpec) -> dict[str, Any]:
    """Run the whole plan open loop in this process; the raw result (as `runner.run_local`'s)."""
    plan = build_plan(spec)
    source = user.RequestSource(plan=plan, path=spec.path, ignore_eos=spec.ignore_eos, deadline_s=spec.max_duration_s)
    env = Environment()
    pool = spec.max_in_flight or max(1, min(len(plan), spec.abort_in_flight or len(plan)))
    session = FastHttpSession(
        spec.base_url,
        env.events.request,
        None,
        network_timeout=spec.request_timeout_s,
        connection_timeout=spec.request_timeout_s,
        concurrency=pool,
        insecure=True,
    )
    rxstamp.keep_stamping()
    slots = Semaphore(spec.max_in_flight) if spec.max_in_flight else None
    samples: list[Sample] = []
    greenlets: list[gevent.Greenlet] = []
    state = {"in_flight": 0, "max_in_flight": 0}

    def send(planned: PlannedRequest, intended: float, slot_wait: float) -> None:
        try:
            samples.append(user.stream_request(session, source, planned, intended, slot_wait))
        finally:
            state["in_flight"] -= 1
            if slots is not None:
                slots.release()

    lag_probe = LagProbe(spec.lag_probe_interval_s)
    freeze_heap()
    lag_probe.start()
    cpu0, wall0 = cpu_seconds(), time.perf_counter()
    source.start()
    stop_reason = "complete"
    dispatched = 0
    # when the dispatcher waited for a slot (first come, first served: a wait delays every later request)
    blocked: list[tuple[float, float]] = []
    for planned in plan:
        intended = source.t0_perf + (planned.offset_s or 0.0)
        delay = intended - time.perf_counter()
        if delay > 0:
            gevent.sleep(delay)
        remaining = spec.max_duration_s - (time.perf_counter() - source.t0_perf)
        if remaining <= 0:
            stop_reason = "deadline"
            break
        if spec.abort_in_flight is not None and state["in_flight"] >= spec.abort_in_flight:
            stop_reason = f"over-saturated: {state['in_flight']} requests in flight (abort_in_flight)"
            break
        if slots is not None:
            started = time.perf_counter()
            if not slots.acquire(timeout=remaining):
                stop_reason = "deadline"
                break
            blocked.append((started, time.perf_counter()))
        slot_wait = _overlap(blocked, intended, time.perf_counter()) if slots is not None else 0.0
        state["in_flight"] += 1
        state["max_in_flight"] = max(state["max_in_flight"], state["in_flight"])
        dispatched += 1
        greenlets.append(gevent.spawn(send, planned, intended, slot_wait))
    left = spec.max_duration_s - (time.perf_counter() - source.t0_perf)
    gevent.joinall(greenlets, timeout=max(0.0, left) + DRAIN_GRACE_S)
    cut = sum(1 for g in greenlets if not g.ready())
    gevent.killall([g for g in greenlets if not g.ready()], block=False)
    health = ClientHealth(cpu_s=cpu_seconds() - cpu0, wall_s=time.perf_counter() - wall0, lag_s=list(lag_probe.lags))
    lag_probe.stop()
    if cut and stop_reason == "complete":
        stop_reason = "deadline"
    result: dict[str, Any] = {
        "samples": [s.to_json() for s in samples],
        "health": health.to_json(),
        "planned": len(plan),
        "not_sent": len(plan) - dispatched,
        "cut": cut,
        "stop_reason": stop_reason,
        "max_in_flight_seen": state["max_in_flight"],
    }
    return {**result, "parts": [{k: v for k, v in result.items() if k != "samples"}], "processes": 1}


def _overlap(intervals: list[tuple[float, float]], begin: float, end: float) -> float:
    """Time within [begin, end] covered by `intervals` (in order, disjoint); drops those before `begin`
    (scheduled times only grow, so no later request needs them)."""
    while intervals and intervals[0][1] <= begin:
        intervals.pop(0)
    return sum(max(0.0, min(b, end) - max(a, begin)) for a, b in intervals)
