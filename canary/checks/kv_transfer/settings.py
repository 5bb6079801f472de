"""The KV-transfer check's settings (`checks.kv_transfer`): imports only canary.config and canary.core."""

from __future__ import annotations

from pydantic import Field

from canary.config.base import CheckSection, Probability, Strict


class KvTransferCheckConfig(Strict):
    """KV transfer proof for P/D cells from the decode server's NIXL counters."""

    enabled: bool = Field(True, description="Run the KV-transfer check on pd-nixl cells (aggregated: skipped).")
    min_bytes: int = Field(1, ge=0, description="Bytes that must have moved during the checks (at least 1).")
    probe_requests: int = Field(
        2, ge=0, description="Short requests the check sends itself, so the proof never depends on other checks."
    )
    max_recompute_share: Probability = Field(
        0.5,
        description="Largest share of decode's uncached prompt tokens it may compute itself (the rest must come "
        "over NIXL); a decode that silently recomputes the prefill computes all of them.",
    )


SECTION = CheckSection(KvTransferCheckConfig, "KV proof.")
