"""The startup check's time estimate: none of its own (a wave waits for its cells to start)."""

from __future__ import annotations

from canary.checks.base import EstimateInput


def estimate(_: EstimateInput) -> None:
    """Startup's wait is the wave's (target.kubernetes.typical_start_s, at worst ready_timeout_s)."""
    return None
