"""The lifecycle check's time estimate: a prefill restart and its prompts before and after."""

from __future__ import annotations

from canary.checks.base import EstimateInput
from canary.checks.lifecycle.settings import LifecycleCheckConfig
from canary.checks.lifecycle.steps import selected
from canary.plan.waves import RequestPhase

RESTART_S = 60.0
"""A prefill server's restart: measured 16-45 s for a tiny model on CPU (--enforce-eager); about a minute
for a small model on a GPU."""


def estimate(inp: EstimateInput) -> float | None:
    """The prompts twice and one request during the outage, one at a time, plus the restart; nothing on a
    cell it does not run on."""
    settings = inp.config.checks.section(LifecycleCheckConfig)
    if not selected(inp.cell, settings):
        return None
    phase = RequestPhase("lifecycle prompts", 2 * settings.prompts + 1, settings.max_tokens, 1)
    return phase.seconds(inp.model) + RESTART_S
