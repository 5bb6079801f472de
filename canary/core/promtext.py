"""Read a Prometheus /metrics endpoint (vLLM's) into plain samples, with a deadline.

Shared by the startup check (vllm:cache_config_info), the KV-transfer check (vllm:nixl_*) and
anything else that reads engine metrics.
"""

from __future__ import annotations

import urllib.request
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

from canary.errors import CanaryError


@dataclass(frozen=True)
class Sample:
    """One sample of a scrape."""

    name: str
    labels: dict[str, str]
    value: float


def parse(text: str) -> list[Sample]:
    """Parse Prometheus text exposition into samples (names as exposed, e.g. vllm:foo_total)."""
    return [
        Sample(name=s.name, labels=dict(s.labels), value=float(s.value))
        for family in text_string_to_metric_families(text)
        for s in family.samples
    ]


def scrape(url: str, timeout_s: float = 10.0) -> list[Sample]:
    """GET url and parse it; a clear CanaryError when unreachable."""
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            text = response.read().decode("utf-8", errors="replace")
    except OSError as exc:
        raise CanaryError(f"cannot scrape {url}: {exc}") from None
    return parse(text)


def total(samples: list[Sample], name: str, **labels: str) -> float:
    """Sum of the samples named `name` (any of name, name_total) whose labels include `labels`."""
    names = {name, f"{name}_total"}
    return sum(s.value for s in samples if s.name in names and all(s.labels.get(k) == v for k, v in labels.items()))


def first(samples: list[Sample], name: str) -> Sample | None:
    """The first sample with this name (for *_info metrics)."""
    return next((s for s in samples if s.name == name), None)
