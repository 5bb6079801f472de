"""Statistics of a load run from its raw per-request samples (never from locust's rounded stats).

Definitions (the same as `vllm bench serve` where it has one):
- TTFT: send -> first token event. ITL: every gap between consecutive token events (pooled over
  requests). TPOT per request: (last token - first token) / (output tokens - 1). E2E: send -> end
  of the stream.
- The measuring window runs from the first send to the last end among measured (non-warm-up)
  requests; rates divide by it. Failed requests count in `error_rate` and never as latency samples.
- Goodput: successful requests per second that met every SLO that is set (TTFT, TPOT, E2E).
- Client queueing (paced or open loop): actual send - intended (scheduled) send, the delay added
  because every user (the in-flight cap) was busy.
- Send lateness (open loop): actual send - scheduled send - the wait for a free slot under
  `max_in_flight`: how late the client itself was. A schedule the client could not keep
  (`schedule_problems`) makes the result invalid: its offered rate was not the one asked for.
- The client is the bottleneck (result invalid) when its CPU use or its gevent loop lag passes
  the limits of the spec: timings taken by a starved client are too long, rates too low.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from canary.core.metric_keys import GOODPUT_REQUESTS_PER_S, OUTPUT_TOKENS_PER_S, REQUESTS_PER_S, latency_key

PERCENTILES = (50, 90, 99)


@dataclass
class Sample:
    """One request as the client saw it. Times: `*_at` are epoch seconds, `*_s` durations."""

    index: int
    warmup: bool
    sent_at: float
    ended_at: float
    expected_prompt_tokens: int
    expected_output_tokens: int
    worker: int = 0
    intended_at: float | None = None
    ttft_s: float | None = None
    itl_s: list[float] = field(default_factory=list)
    e2e_s: float | None = None
    token_events: int = 0
    prompt_tokens: int | None = None
    output_tokens: int | None = None
    error: str | None = None
    error_detail: str | None = None
    request_id: str | None = None
    slot_wait_s: float | None = None

    @property
    def ok(self) -> bool:
        """Whether the request succeeded."""
        return self.error is None

    @property
    def tpot_s(self) -> float | None:
        """Time per output token after the first (None with fewer than two tokens)."""
        tokens = self.output_tokens or 0
        if not self.ok or tokens < 2 or not self.itl_s:
            return None
        return sum(self.itl_s) / (tokens - 1)

    @property
    def queue_s(self) -> float | None:
        """Client-side delay of an open-loop request past its intended send time."""
        return None if self.intended_at is None else max(0.0, self.sent_at - self.intended_at)

    @property
    def lateness_s(self) -> float | None:
        """Open loop: how late the client sent this request past its schedule, less any wait for a slot."""
        if self.intended_at is None or self.slot_wait_s is None:
            return None
        return max(0.0, self.sent_at - self.intended_at - self.slot_wait_s)

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Sample:
        """Inverse of to_json."""
        return cls(**data)


@dataclass
class ClientHealth:
    """The load generator's own state during a run (per process; merged over workers)."""

    cpu_s: float
    wall_s: float
    lag_s: list[float]
    processes: int = 1

    @property
    def cpu_ratio(self) -> float:
        """CPU seconds per wall second of the busiest process (1.0 = one core saturated)."""
        return self.cpu_s / self.wall_s if self.wall_s > 0 else 0.0

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ClientHealth:
        """Inverse of to_json."""
        return cls(**data)

    @classmethod
    def merge(cls, parts: Sequence[ClientHealth]) -> ClientHealth:
        """Several worker processes: the busiest one's CPU ratio, every lag sample."""
        if not parts:
            return cls(cpu_s=0.0, wall_s=0.0, lag_s=[], processes=0)
        busiest = max(parts, key=lambda p: p.cpu_ratio)
        lags = [lag for p in parts for lag in p.lag_s]
        return cls(cpu_s=busiest.cpu_s, wall_s=busiest.wall_s, lag_s=lags, processes=len(parts))


@dataclass(frozen=True)
class Slo:
    """Goodput objectives in seconds; None: not judged."""

    ttft_s: float | None = None
    tpot_s: float | None = None
    e2e_s: float | None = None

    def met(self, sample: Sample) -> bool:
        """Whether a successful sample met every objective."""
        if not sample.ok:
            return False
        checks = ((self.ttft_s, sample.ttft_s), (self.tpot_s, sample.tpot_s), (self.e2e_s, sample.e2e_s))
        return all(limit is None or (value is not None and value <= limit) for limit, value in checks)


def percentile(values: Sequence[float], pct: float) -> float:
    """Percentile with linear interpolation between closest ranks (numpy's default method)."""
    if not values:
        raise ValueError("percentile of no values")
    if not 0 <= pct <= 100:
        raise ValueError(f"percentile {pct} outside 0..100")
    ordered = sorted(values)
    rank = (len(ordered) - 1) * pct / 100.0
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def distribution(prefix: str, values: Sequence[float]) -> dict[str, float]:
    """mean and p50/p90/p99 of values as {prefix_mean_s: ..., prefix_p50_s: ...}; {} when empty."""
    if not values:
        return {}
    out = {latency_key(prefix, "mean"): statistics.fmean(values)}
    for pct in PERCENTILES:
        out[latency_key(prefix, f"p{pct}")] = percentile(values, pct)
    return out


def client_problems(health: ClientHealth, max_cpu_ratio: float, max_lag_p99_s: float) -> list[str]:
    """Why the client, not the server, limited the run (empty: the client kept up)."""
    problems: list[str] = []
    if health.cpu_ratio > max_cpu_ratio:
        problems.append(
            f"client CPU {health.cpu_ratio:.2f} core-seconds per second > {max_cpu_ratio:.2f}: the load generator "
            "was saturated"
        )
    if health.lag_s:
        lag_p99 = percentile(health.lag_s, 99)
        if lag_p99 > max_lag_p99_s:
            why = (
                "the client was busy"
                if health.cpu_ratio > 0.5
                else f"the client used only {health.cpu_ratio:.2f} core: other processes starved it of CPU"
            )
            problems.append(
                f"client event-loop lag p99 {lag_p99 * 1e3:.1f} ms > {max_lag_p99_s * 1e3:.1f} ms: "
                f"timestamps were taken late ({why})"
            )
    return problems


def schedule_problems(samples: Iterable[Sample], max_lateness_p99_s: float) -> list[str]:
    """Why an open-loop client did not keep its schedule (empty: it did, or nothing was scheduled)."""
    late = [q for s in samples if not s.warmup and (q := s.lateness_s) is not None]
    if not late:
        return []
    p99 = percentile(late, 99)
    if p99 <= max_lateness_p99_s:
        return []
    return [
        f"send lateness p99 {p99 * 1e3:.1f} ms > {max_lateness_p99_s * 1e3:.1f} ms (max {max(late) * 1e3:.0f} ms): "
        "the client did not keep its arrival schedule, so the offered rate was not the one asked for"
    ]


def summarize(
    samples: Iterable[Sample],
    *,
    slo: Slo | None = None,
    intended_rate: float | None = None,
    health: ClientHealth | None = None,
) -> dict[str, float]:
    """Every metric of one run, units in the keys. Warm-up samples are left out."""
    measured = [s for s in samples if not s.warmup]
    ok = [s for s in measured if s.ok]
    out: dict[str, float] = {
        "requests_total": float(len(measured)),
        "requests_succeeded": float(len(ok)),
        "requests_failed": float(len(measured) - len(ok)),
        "error_rate": (len(measured) - len(ok)) / len(measured) if measured else 0.0,
    }
    if measured:
        begin = min(s.sent_at for s in measured)
        end = max(s.ended_at for s in measured)
        duration = max(end - begin, 1e-9)
        output_tokens = sum(s.output_tokens or 0 for s in ok)
        prompt_tokens = sum(s.prompt_tokens or 0 for s in ok)
        good = sum(1 for s in ok if (slo or Slo()).met(s))
        out.update(
            {
                REQUESTS_PER_S: len(ok) / duration,
                OUTPUT_TOKENS_PER_S: output_tokens / duration,
                GOODPUT_REQUESTS_PER_S: good / duration,
            },
            duration_s=duration,
            total_tokens_per_s=(output_tokens + prompt_tokens) / duration,
            goodput_ratio=good / len(measured),
            mean_concurrency=sum(s.ended_at - s.sent_at for s in measured) / duration,
            output_tokens_mean=output_tokens / len(ok) if ok else 0.0,
            prompt_tokens_mean=prompt_tokens / len(ok) if ok else 0.0,
        )
        sends = sorted(s.sent_at for s in measured)
        if len(sends) > 1 and sends[-1] > sends[0]:
            out["achieved_request_rate_per_s"] = (len(sends) - 1) / (sends[-1] - sends[0])
    if intended_rate is not None:
        out["intended_request_rate_per_s"] = intended_rate
    out.update(distribution("ttft", [s.ttft_s for s in ok if s.ttft_s is not None]))
    out.update(distribution("tpot", [t for s in ok if (t := s.tpot_s) is not None]))
    out.update(distribution("itl", [gap for s in ok for gap in s.itl_s]))
    out.update(distribution("e2e", [s.e2e_s for s in ok if s.e2e_s is not None]))
    out.update(distribution("queue", [q for s in measured if (q := s.queue_s) is not None]))
    out.update(distribution("send_lateness", [q for s in measured if (q := s.lateness_s) is not None]))
    out.update(distribution("slot_wait", [q for s in measured if (q := s.slot_wait_s) is not None]))
    if health is not None:
        out["client_cpu_ratio"] = health.cpu_ratio
        if health.lag_s:
            out["client_lag_p99_s"] = percentile(health.lag_s, 99)
            out["client_lag_max_s"] = max(health.lag_s)
    return out


def error_counts(samples: Iterable[Sample]) -> dict[str, int]:
    """Failed measured requests per error kind."""
    counts: dict[str, int] = {}
    for s in samples:
        if not s.warmup and s.error is not None:
            counts[s.error] = counts.get(s.error, 0) + 1
    return counts


def median_metrics(runs: Sequence[dict[str, float]]) -> dict[str, float]:
    """Per-metric median over repeated runs (keys present in every run)."""
    if not runs:
        return {}
    keys = [k for k in runs[0] if all(k in r for r in runs)]
    return {k: statistics.median(r[k] for r in runs) for k in keys}


def window_values(samples: Sequence[Sample], metric: str, windows: int, min_per_window: int = 5) -> list[float]:
    """One run's `metric` over `windows` consecutive groups of its measured, successful requests (in
    order of completion): the run's own spread. A rate divides a group's requests (or output tokens)
    by the time from the previous group's last completion (the first group: the first send) to its
    own; a latency statistic (`ttft_p50_s`, `e2e_mean_s`, ...) is taken over the group's requests.
    [] when the metric has no per-request form or the run has fewer than `min_per_window` requests
    per group."""
    ok = sorted((s for s in samples if not s.warmup and s.ok), key=lambda s: s.ended_at)
    size = len(ok) // windows if windows > 0 else 0
    if size < max(1, min_per_window):
        return []
    values: list[float] = []
    previous = min(s.sent_at for s in ok)
    for index in range(windows):
        group = ok[index * size : (index + 1) * size]
        end = group[-1].ended_at
        span = max(end - previous, 1e-9)
        previous = end
        if metric == REQUESTS_PER_S:
            values.append(len(group) / span)
        elif metric == OUTPUT_TOKENS_PER_S:
            values.append(sum(s.output_tokens or 0 for s in group) / span)
        else:
            value = _latency_of(group, metric)
            if value is None:
                return []
            values.append(value)
    return values


def _latency_of(group: Sequence[Sample], metric: str) -> float | None:
    prefix = metric.split("_", 1)[0]
    per_request: dict[str, list[float]] = {
        "ttft": [s.ttft_s for s in group if s.ttft_s is not None],
        "tpot": [t for s in group if (t := s.tpot_s) is not None],
        "itl": [gap for s in group for gap in s.itl_s],
        "e2e": [s.e2e_s for s in group if s.e2e_s is not None],
    }
    return distribution(prefix, per_request.get(prefix, [])).get(metric)


def higher_is_better(metric: str) -> bool:
    """Rates (…_per_s) and ratios of good outcomes improve upward; latencies and errors downward."""
    return metric.endswith("_per_s") or metric == "goodput_ratio"


def relative_change(candidate: float, baseline: float, metric: str) -> float:
    """How much worse the candidate is, as a fraction of the baseline (negative: better)."""
    if baseline == 0:
        return 0.0 if candidate == 0 else (math.inf if not higher_is_better(metric) else -math.inf)
    change = (candidate - baseline) / abs(baseline)
    return -change if higher_is_better(metric) else change
