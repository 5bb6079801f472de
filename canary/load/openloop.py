"""The open-loop sender: every request goes out at its scheduled time, whatever is still in flight.

Imports locust and gevent: only the load subprocess (`python -m canary.load.process`) imports it.

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
- multi_turn (ordered plans): the dispatcher walks only the conversations' first turns, on the
  schedule; a turn that finishes spawns its conversation's next turn, due `think_s` later (seeded,
  canary.load.workload), sent then unless the run stopped or the deadline came first; it waits for
  a slot of its own under `max_in_flight` (its wait is its slot_wait_s).
- Every sample keeps its scheduled send time (`intended_at`) and its actual one (`sent_at`);
  lateness = actual - scheduled - slot wait. A client that could not keep its schedule is made
  visible by `stats.schedule_problems` (the result is invalid), never hidden.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import gevent
from gevent.lock import Semaphore
from locust.contrib.fasthttp import FastHttpSession
from locust.env import Environment

from canary.load import rxstamp, user
from canary.load.locust_driver import LagProbe, cpu_seconds, freeze_heap
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
    state = _State()
    # multi_turn: a conversation's next turn, sent when this one finished (plus its think time)
    successor = {r.after: r for r in plan if r.after is not None}

    def send(planned: PlannedRequest, intended: float, slot_wait: float) -> None:
        try:
            samples.append(user.stream_request(session, source, planned, intended, slot_wait))
        finally:
            state.in_flight -= 1
            if slots is not None:
                slots.release()
            follower = successor.get(planned.index)
            if follower is not None and state.stop == "complete":
                due = time.perf_counter() + (follower.think_s or 0.0)
                greenlets.append(gevent.spawn(follow, follower, due))

    def may_send() -> bool:
        """Whether one more request may go out now (else the stop reason says why not)."""
        if state.stop != "complete":
            return False
        if time.perf_counter() - source.t0_perf >= spec.max_duration_s:
            state.stop = "deadline"
        elif spec.abort_in_flight is not None and state.in_flight >= spec.abort_in_flight:
            state.stop = f"over-saturated: {state.in_flight} requests in flight (abort_in_flight)"
        return state.stop == "complete"

    def start() -> None:
        state.in_flight += 1
        state.max_in_flight = max(state.max_in_flight, state.in_flight)
        state.dispatched += 1

    def follow(planned: PlannedRequest, intended: float) -> None:
        """A later turn of a conversation: due `think_s` after its predecessor finished."""
        if intended - source.t0_perf >= spec.max_duration_s:
            return  # due after the deadline: not sent
        delay = intended - time.perf_counter()
        if delay > 0:
            gevent.sleep(delay)
        if not may_send():
            return
        waited = 0.0
        if slots is not None:
            asked = time.perf_counter()
            if not slots.acquire(timeout=spec.max_duration_s - (asked - source.t0_perf)):
                return
            waited = time.perf_counter() - asked
        start()
        send(planned, intended, waited)

    lag_probe = LagProbe(spec.lag_probe_interval_s)
    freeze_heap()
    lag_probe.start()
    cpu0, wall0 = cpu_seconds(), time.perf_counter()
    source.start()
    # when the dispatcher waited for a slot (first come, first served: a wait delays every later request)
    blocked: list[tuple[float, float]] = []
    for planned in plan:
        if planned.after is not None:
            continue  # a later turn: sent by `follow` once its predecessor finished
        intended = source.t0_perf + (planned.offset_s or 0.0)
        delay = intended - time.perf_counter()
        if delay > 0:
            gevent.sleep(delay)
        if not may_send():
            break
        if slots is not None:
            started = time.perf_counter()
            if not slots.acquire(timeout=spec.max_duration_s - (started - source.t0_perf)):
                state.stop = "deadline"
                break
            blocked.append((started, time.perf_counter()))
        slot_wait = _overlap(blocked, intended, time.perf_counter()) if slots is not None else 0.0
        start()
        greenlets.append(gevent.spawn(send, planned, intended, slot_wait))
    drain_until = max(time.perf_counter(), source.t0_perf + spec.max_duration_s) + DRAIN_GRACE_S
    while pending := [g for g in greenlets if not g.ready()]:  # a finishing turn may spawn the next one
        left = drain_until - time.perf_counter()
        if left <= 0:
            break
        gevent.joinall(pending, timeout=left)
    unfinished = [g for g in greenlets if not g.ready()]
    stop_reason = state.stop
    if unfinished and stop_reason == "complete":
        stop_reason = state.stop = "deadline"  # before the kill: a killed turn starts no next one
    gevent.killall(unfinished, block=False)
    health = ClientHealth(cpu_s=cpu_seconds() - cpu0, wall_s=time.perf_counter() - wall0, lag_s=list(lag_probe.lags))
    lag_probe.stop()
    result: dict[str, Any] = {
        "samples": [s.to_json() for s in samples],
        "health": health.to_json(),
        "planned": len(plan),
        "not_sent": len(plan) - state.dispatched,
        "cut": len(unfinished),
        "stop_reason": stop_reason,
        "max_in_flight_seen": state.max_in_flight,
    }
    return {**result, "parts": [{k: v for k, v in result.items() if k != "samples"}], "processes": 1}


@dataclass
class _State:
    """The dispatcher's and the turns' shared counts, and why sending stopped ("complete": it did not)."""

    in_flight: int = 0
    max_in_flight: int = 0
    dispatched: int = 0
    stop: str = "complete"


def _overlap(intervals: list[tuple[float, float]], begin: float, end: float) -> float:
    """Time within [begin, end] covered by `intervals` (in order, disjoint); drops those before `begin`
    (scheduled times only grow, so no later request needs them)."""
    while intervals and intervals[0][1] <= begin:
        intervals.pop(0)
    return sum(max(0.0, min(b, end) - max(a, begin)) for a, b in intervals)
