"""The KV-transfer check's exported metrics: Prometheus name, help, unit and the CheckResult.metrics key each reads."""

from __future__ import annotations

from canary.core import metric_keys as k
from canary.core.metric_spec import Exported, cell_metric

NIXL_BYTES = cell_metric(
    "nixl_transferred_bytes", "KV-cache bytes NIXL moved from prefill to decode during the checks.", "bytes"
)
DECODE_RECOMPUTED = cell_metric(
    "decode_recomputed_prompt_ratio",
    "Share of the decode server's prompt tokens it computed itself instead of receiving them over NIXL.",
    "ratio",
)
NIXL_FAILED = cell_metric("nixl_failed_transfers", "NIXL transfers that failed during the checks.")

EXPORTED: tuple[Exported, ...] = (
    Exported(NIXL_BYTES, k.NIXL_BYTES_TRANSFERRED),
    Exported(NIXL_FAILED, k.NIXL_FAILED_TRANSFERS),
    Exported(DECODE_RECOMPUTED, k.DECODE_RECOMPUTED_TOKEN_SHARE),
)
"""What this check exports, in order (its `register(metrics=...)`)."""
