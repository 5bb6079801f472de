"""What a Prometheus metric of the canary is (name, help, unit, labels) and how a check declares one.

The exporters (canary.export.prometheus.schema) hold every metric; a check declares its own in its
folder (`canary/checks/<name>/exported.py`, passed to `register(metrics=...)`) as `Exported`: the
metric and the CheckResult.metrics key it reads. Import-light: checks and exporters both read it.
"""

from __future__ import annotations

from dataclasses import dataclass

PREFIX = "canary_"

CELL_LABELS: tuple[str, ...] = (
    "cell",
    "model",
    "backend",
    "prefill_block_size",
    "decode_block_size",
    "kernel_block_size",
    "kv_cache_dtype",
    "runner",
    "topology",
    "image",
)
"""The labels of every cell metric: the cell's coordinates (canary.export.prometheus.schema.cell_labels)."""
RESERVED_LABELS = frozenset({"job", "scope", "instance"})
"""Labels the Pushgateway's grouping key owns: no metric may define them."""


@dataclass(frozen=True)
class MetricSpec:
    """One metric: name (unit suffix included), help, unit and label names."""

    name: str
    help: str
    unit: str
    labels: tuple[str, ...]

    def __post_init__(self) -> None:
        if not self.name.startswith(PREFIX):
            raise ValueError(f"{self.name}: metric names start with {PREFIX}")
        if self.unit and not self.name.endswith(f"_{self.unit}"):
            raise ValueError(f"{self.name}: the name must end with its unit _{self.unit}")
        if RESERVED_LABELS & set(self.labels):
            raise ValueError(f"{self.name}: labels {sorted(RESERVED_LABELS & set(self.labels))} are reserved")


def cell_metric(name: str, help_text: str, unit: str = "", *extra: str) -> MetricSpec:
    """A metric per cell: `canary_<name>` with the cell labels and `extra` ones."""
    return MetricSpec(PREFIX + name, help_text, unit, (*CELL_LABELS, *extra))


@dataclass(frozen=True)
class Exported:
    """A check's exported number: the metric, the CheckResult.metrics key its value comes from, and the
    values of its extra labels (a latency's `percentile`, ...)."""

    spec: MetricSpec
    key: str
    extra: tuple[tuple[str, str], ...] = ()
