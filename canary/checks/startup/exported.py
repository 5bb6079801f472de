"""The startup check's exported metric: Prometheus name, help, unit and the CheckResult.metrics key it reads."""

from __future__ import annotations

from canary.core import metric_keys as k
from canary.core.metric_spec import Exported, cell_metric

STARTUP_SECONDS = cell_metric(
    "startup_duration_seconds", "Time from launch until every server of the cell was ready.", "seconds"
)

EXPORTED: tuple[Exported, ...] = (Exported(STARTUP_SECONDS, k.READY_S_TOTAL),)
"""What this check exports, in order (its `register(metrics=...)`)."""
