"""The locust user: streams one planned request at a time and records a raw Sample per request.

Importing this module imports locust, which gevent-monkey-patches the process: only the load
subprocess (`python -m canary.load.process`) imports it.

The response body is read straight from the connection's socket (`rxstamp.StampedLines`: each
SSE line as soon as it arrives, stamped with the kernel's receive time of its bytes, not with when
this loop got round to them), not with locust's `iter_content`/`iter_lines`, which wait for 1 KB
and would report TTFT late.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import gevent
from gevent.event import Event
from locust import FastHttpUser, constant, task
from locust.contrib.fasthttp import FastHttpSession
from locust.exception import StopUser

from canary.load import rxstamp
from canary.load.sse import StreamRecord
from canary.load.stats import Sample
from canary.load.workload import PlannedRequest


@dataclass
class RequestSource:
    """The plan shared by every user of one process, and the samples they return."""

    plan: list[PlannedRequest]
    path: str
    ignore_eos: bool
    deadline_s: float
    worker: int = 0
    samples: list[Sample] = field(default_factory=list)
    all_done: Event = field(default_factory=Event)
    next_index: int = 0
    in_flight: int = 0
    t0_perf: float = 0.0
    t0_epoch: float = 0.0
    # ordered plans (multi_turn): the indexes into `plan` not yet taken, those finished, a wake-up
    _pending: list[int] | None = None
    _finished: set[int] = field(default_factory=set)
    _progress: Event = field(default_factory=Event)

    def start(self) -> None:
        """Mark time zero of the run (open-loop arrivals are relative to it)."""
        self.t0_perf = time.perf_counter()
        self.t0_epoch = time.time()
        if any(r.after is not None for r in self.plan):
            self._pending = list(range(len(self.plan)))
        if not self.plan:
            self.all_done.set()

    def epoch(self, perf: float) -> float:
        """A perf_counter reading as epoch seconds (one anchor per run: immune to clock steps)."""
        return self.t0_epoch + (perf - self.t0_perf)

    def take(self) -> PlannedRequest | None:
        """The next request to send, or None when the plan is spent or the deadline has passed."""
        if self._pending is not None:
            return self._take_ordered()
        if self.next_index >= len(self.plan) or time.perf_counter() - self.t0_perf >= self.deadline_s:
            return None
        request = self.plan[self.next_index]
        self.next_index += 1
        self.in_flight += 1
        return request

    def _take_ordered(self) -> PlannedRequest | None:
        """The first request not taken whose predecessor (`after`) has finished; waits while none has.

        The first pending request's predecessor always was taken (it comes earlier in the plan), so
        while nothing is ready something is in flight, and its finish wakes the waiting users."""
        assert self._pending is not None
        while self._pending:
            remaining = self.deadline_s - (time.perf_counter() - self.t0_perf)
            if remaining <= 0:
                return None
            for position, index in enumerate(self._pending):
                after = self.plan[index].after
                if after is None or after in self._finished:
                    del self._pending[position]
                    self.next_index += 1
                    self.in_flight += 1
                    return self.plan[index]
            self._progress.clear()
            self._progress.wait(timeout=remaining)
        return None

    def finish(self, sample: Sample) -> None:
        """Keep a sample; signal when every planned request is back."""
        self.samples.append(sample)
        self.in_flight -= 1
        if self._pending is not None:
            self._finished.add(sample.index)
            self._progress.set()
        if len(self.samples) == len(self.plan) or (self.in_flight == 0 and self._expired()):
            self.all_done.set()

    def _expired(self) -> bool:
        return time.perf_counter() - self.t0_perf >= self.deadline_s

    @property
    def not_sent(self) -> int:
        """Planned requests never sent."""
        return len(self.plan) - self.next_index


SOURCE: RequestSource | None = None


def configure(source: RequestSource, host: str, request_timeout_s: float) -> None:
    """Point every StreamingUser of this process at a plan and a server."""
    global SOURCE
    SOURCE = source
    StreamingUser.host = host
    StreamingUser.network_timeout = request_timeout_s
    StreamingUser.connection_timeout = request_timeout_s
    rxstamp.keep_stamping()  # before any request: the kernel stamps every token's bytes on arrival


class StreamingUser(FastHttpUser):
    """Sends the shared plan's requests one after another (open loop: not before their time)."""

    wait_time = constant(0)
    network_timeout = 60.0
    connection_timeout = 60.0
    insecure = True

    @task
    def send_next(self) -> None:
        """Take, time and record one request; stop when the plan is spent."""
        source = SOURCE
        if source is None:
            raise StopUser()
        planned = source.take()
        if planned is None:
            if source.in_flight == 0:
                source.all_done.set()
            raise StopUser()
        intended_perf = None
        if planned.offset_s is not None:
            intended_perf = source.t0_perf + planned.offset_s
            delay = intended_perf - time.perf_counter()
            if delay > 0:
                gevent.sleep(delay)
        source.finish(stream_request(self.client, source, planned, intended_perf))


def stream_request(
    client: FastHttpSession,
    source: RequestSource,
    planned: PlannedRequest,
    intended_perf: float | None,
    slot_wait_s: float | None = None,
) -> Sample:
    """Send one planned request on `client` (a locust FastHttpSession), read its stream, return its Sample.

    The send time is taken just before the request goes out; `intended_perf` is its scheduled time
    (None: closed loop), `slot_wait_s` how long an open-loop dispatcher waited for a free slot.
    """
    request_id = planned.request_id
    headers = {
        "Content-Type": "application/json",
        "Accept": "text/event-stream",
        "Accept-Encoding": "identity",
        "x-request-id": request_id,
    }
    sent = time.perf_counter()
    record = StreamRecord(sent_at=sent)
    error: str | None = None
    detail: str | None = None
    try:
        # the body goes to geventhttpclient as bytes, untouched (locust's annotation says str | dict)
        body: Any = planned.body
        response = client.request("POST", source.path, data=body, headers=headers, stream=True, name=source.path)
        status = response.status_code
        raw = getattr(response, "_response", None)
        if status and status != 200:  # an HTTP error status (locust also sets response.error)
            error, detail = f"http_{status}", _read_error_body(raw)
        elif getattr(response, "error", None) is not None or raw is None:
            error, detail = _classify_exception(getattr(response, "error", None))
        else:
            for line, arrived in rxstamp.StampedLines(raw, floor=sent):
                record.feed(line, arrived)
    except Exception as exc:  # a broken stream, a timeout, a reset
        error, detail = _classify_exception(exc)
    ended = time.perf_counter()
    if error is None:
        error, detail = _judge_stream(record, planned, source.ignore_eos)
    return Sample(
        index=planned.index,
        warmup=planned.warmup,
        sent_at=source.epoch(sent),
        ended_at=source.epoch(ended),
        expected_prompt_tokens=planned.prompt_tokens,
        expected_output_tokens=planned.max_tokens,
        worker=source.worker,
        intended_at=None if intended_perf is None else source.epoch(intended_perf),
        ttft_s=None if record.first_token_at is None else record.first_token_at - sent,
        itl_s=record.gaps,
        e2e_s=ended - sent,
        token_events=record.token_events,
        prompt_tokens=record.prompt_tokens,
        output_tokens=record.output_tokens,
        error=error,
        error_detail=detail,
        request_id=request_id,
        slot_wait_s=slot_wait_s,
    )


def _judge_stream(record: StreamRecord, planned: PlannedRequest, ignore_eos: bool) -> tuple[str | None, str | None]:
    """An error kind for a stream that ended but is not a complete, correct answer."""
    if record.stream_error is not None:
        return "stream_error", record.stream_error
    if not record.done:
        return "stream_incomplete", f"no [DONE] after {record.token_events} token events"
    if record.first_token_at is None:
        return "no_tokens", "the stream carried no token"
    if record.usage is None:
        return "no_usage", "no usage chunk (stream_options.include_usage ignored?)"
    if ignore_eos and record.output_tokens != planned.max_tokens:
        return "output_length", f"usage says {record.output_tokens} tokens, asked for {planned.max_tokens}"
    return None, None


def _classify_exception(exc: BaseException | None) -> tuple[str, str]:
    text = f"{type(exc).__name__}: {exc}" if exc is not None else "no response"
    name = type(exc).__name__.lower() if exc is not None else ""
    if "timeout" in name or "timed out" in text.lower():
        return "timeout", text[:200]
    if exc is not None and isinstance(exc, (ConnectionRefusedError, ConnectionResetError)):
        return "connection", text[:200]
    if "closed" in text.lower() or "parse" in name or "incomplete" in text.lower():
        return "stream_broken", text[:200]
    return "connection", text[:200]


def _read_error_body(raw: object) -> str:
    try:
        body = raw.read()  # type: ignore[attr-defined]
    except Exception:
        return ""
    return bytes(body)[:200].decode("utf-8", "replace")
