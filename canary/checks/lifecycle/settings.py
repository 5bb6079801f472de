"""The lifecycle check's settings (`checks.lifecycle`): imports only canary.config and canary.core."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from canary.config.base import CheckSection, PositiveInt, Strict


class LifecycleCheckConfig(Strict):
    """Restart a P/D pair's prefill server while decode keeps serving; judge that decode lives through it and
    that the pair serves the same greedy tokens once prefill is back."""

    enabled: bool = Field(
        False, description="Run the lifecycle check (off by default: it restarts an engine, 20-60 s on CPU)."
    )
    cells: list[dict[str, Any]] = Field(
        default_factory=list,
        description="The P/D cells it runs on, each a cell match (the fields of matrix.expectations[].match, e.g. "
        "{model: llama, decode_tp: 2}, checked when the config loads); empty: every P/D cell. The others get "
        "`skipped`.",
    )
    prompts: PositiveInt = Field(
        3, le=16, description="Greedy prompts sent through the pair before and after the restart (parity 3/3)."
    )
    max_tokens: PositiveInt = Field(16, description="Greedy tokens per prompt (ignore_eos).")
    restart_timeout_s: float = Field(
        300.0, gt=0, description="How long the restarted prefill server may take to be ready again."
    )
    request_timeout_s: float = Field(120.0, gt=0, description="Timeout of one request.")


SECTION = CheckSection(LifecycleCheckConfig, "Prefill restart under a serving decode.")
