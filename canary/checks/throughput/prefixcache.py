"""Prefix-cache hits of a load run, per engine of the cell, from each engine's /metrics.

Around the throughput check's load runs (one measurement: its warm-up and every repeat, with any
parity-under-load samples riding the first run) every engine of the cell (prefill and decode of a
P/D cell, the server of an aggregated one) is scraped before and after, and the growth of vLLM's
prefix-cache counters is recorded per role:

- `vllm:prefix_cache_queries` / `vllm:prefix_cache_hits` (tokens looked up in / found in the
  engine's own KV cache; vllm/v1/metrics/loggers.py);
- `vllm:external_prefix_cache_queries` / `vllm:external_prefix_cache_hits` (tokens the engine's KV
  connector was asked for / supplied: on a NIXL decode, the prompt tokens read from prefill). vLLM
  0.32 exports them on every engine; only one with a KV connector counts anything (an aggregated
  engine's stay at 0: "no tokens queried").

The hit rate is hits / queries, None when nothing was queried. A counter an engine does not export
is recorded as absent (no number), an engine that could not be scraped with its error: nothing here
raises, and nothing is invented. A counter that went down, or whose `_created` time changed, was
reset (the engine restarted): its growth is then its value after (Prometheus's `increase`: counted
since the restart), and the record says `reset`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from canary.core import metric_keys as keys
from canary.core import promtext
from canary.errors import CanaryError
from canary.targets.base import Deployment

LOCAL = ("vllm:prefix_cache_queries", "vllm:prefix_cache_hits")
"""The engine's own prefix cache: queried tokens, hit tokens."""
EXTERNAL = ("vllm:external_prefix_cache_queries", "vllm:external_prefix_cache_hits")
"""The KV connector's: queried tokens, hit tokens (engines with a connector only)."""
EVIDENCE_KEY = "prefix_cache"


@dataclass(frozen=True)
class Counter:
    """One cumulative counter of one scrape: its value (summed over engines and labels) and the
    `_created` time of its series (None where the exposition has none)."""

    value: float
    created: float | None = None


def read_counter(samples: list[promtext.Sample], name: str) -> Counter | None:
    """The counter `name` (exposed as name or name_total) in a scrape; None when the engine does not
    export it."""
    if not any(s.name in (name, f"{name}_total") for s in samples):
        return None
    created = [s.value for s in samples if s.name == f"{name}_created"]
    return Counter(promtext.total(samples, name), max(created) if created else None)


Scrape = dict[str, Counter | None]
"""The four counters of one engine's scrape, by metric name (None: not exported)."""


def read(samples: list[promtext.Sample]) -> Scrape:
    """The prefix-cache counters of one scrape."""
    return {name: read_counter(samples, name) for name in (*LOCAL, *EXTERNAL)}


def _reset(before: Counter, after: Counter) -> bool:
    if after.value < before.value:
        return True
    return before.created is not None and after.created is not None and after.created != before.created


@dataclass(frozen=True)
class Growth:
    """What one cache (local or external) of one engine did over the load: tokens queried and hit."""

    present: bool
    queried: float | None = None
    hits: float | None = None
    reset: bool = False

    @property
    def hit_rate(self) -> float | None:
        """hits / queries; None when the counters are absent or nothing was queried."""
        if self.queried is None or self.hits is None or self.queried <= 0:
            return None
        return self.hits / self.queried

    def to_json(self) -> dict[str, Any]:
        """As evidence."""
        if not self.present:
            return {"present": False}
        rate = self.hit_rate
        return {
            "present": True,
            "queried_tokens": self.queried,
            "hit_tokens": self.hits,
            "hit_rate": None if rate is None else round(rate, 4),
            "reset": self.reset,
        }


def growth(before: Scrape, after: Scrape, names: tuple[str, str]) -> Growth:
    """The growth of a (queries, hits) pair of counters between two scrapes. Absent on either side:
    not present. Either counter reset: both are taken since the restart (their values after)."""
    q0, q1 = before.get(names[0]), after.get(names[0])
    h0, h1 = before.get(names[1]), after.get(names[1])
    if q0 is None or q1 is None or h0 is None or h1 is None:
        return Growth(present=False)
    if _reset(q0, q1) or _reset(h0, h1):
        return Growth(present=True, queried=q1.value, hits=h1.value, reset=True)
    return Growth(present=True, queried=q1.value - q0.value, hits=h1.value - h0.value)


Snapshot = dict[str, Scrape | str]
"""Per engine role: its counters, or why they could not be read."""


def engine_urls(deployment: Deployment) -> dict[str, str | None]:
    """Each engine role of the deployment (not the router) and its /metrics URL."""
    return {role: deployment.servers[role].metrics_url for role in deployment.engine_roles}


def snapshot(urls: Mapping[str, str | None], timeout_s: float = 5.0) -> Snapshot:
    """Scrape every engine's counters (an engine without a URL or that does not answer: the reason)."""
    found: Snapshot = {}
    for role, url in urls.items():
        if url is None:
            found[role] = "no /metrics URL"
            continue
        try:
            found[role] = read(promtext.scrape(url, timeout_s))
        except CanaryError as exc:
            found[role] = str(exc)
        except ValueError as exc:  # answered, but not a Prometheus exposition
            found[role] = f"cannot parse {url}: {exc}"
    return found


@dataclass(frozen=True)
class EngineHits:
    """One engine's prefix-cache growth over the load (or why there is none)."""

    role: str
    local: Growth
    external: Growth
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        """As evidence."""
        if self.error is not None:
            return {"error": self.error}
        return {"local": self.local.to_json(), "external": self.external.to_json()}


def compare(before: Snapshot, after: Snapshot) -> list[EngineHits]:
    """Per engine (in the order of `after`): the growth of both caches, or the scrape error."""
    engines: list[EngineHits] = []
    for role, then in after.items():
        first = before.get(role, "not scraped before the load")
        if isinstance(first, str) or isinstance(then, str):
            error = first if isinstance(first, str) else str(then)
            engines.append(EngineHits(role, Growth(False), Growth(False), error))
            continue
        engines.append(EngineHits(role, growth(first, then, LOCAL), growth(first, then, EXTERNAL)))
    return engines


def evidence(engines: list[EngineHits]) -> dict[str, Any]:
    """evidence.prefix_cache: the metric names read and each engine's growth."""
    return {
        "metrics": {"local": list(LOCAL), "external": list(EXTERNAL)},
        "window": "this measurement's load runs (warm-up and repeats; parity-under-load samples included)",
        "engines": {e.role: e.to_json() for e in engines},
    }


def metrics(engines: list[EngineHits]) -> dict[str, float]:
    """The numbers for CheckResult.metrics: per role, the local cache's queried tokens, hit tokens and
    hit rate (the rate only when something was queried; nothing for an absent counter)."""
    found: dict[str, float] = {}
    for engine in engines:
        local = engine.local
        if local.queried is None or local.hits is None:
            continue
        found[keys.prefix_cache_key("queried_tokens", engine.role)] = local.queried
        found[keys.prefix_cache_key("hit_tokens", engine.role)] = local.hits
        rate = local.hit_rate
        if rate is not None:
            found[keys.prefix_cache_key(keys.PREFIX_CACHE_HIT_RATE, engine.role)] = round(rate, 4)
    return found
