"""The startup check's settings (`checks.startup`): imports only canary.config and canary.core (the config layer builds
`checks` from every check folder's settings module)."""

from __future__ import annotations

from pydantic import Field

from canary.config.base import CheckSection, PositiveInt, Strict


class StartupCheckConfig(Strict):
    """Startup: time to ready, failure classification, live-config verification."""

    enabled: bool = Field(True, description="Run the startup check (other checks need a started cell).")
    timeout_s: PositiveInt = Field(600, description="Deadline for a server to become ready.")
    poll_interval_s: float = Field(0.5, gt=0, description="How often /health is polled.")
    verify_live_config: bool = Field(True, description="Fail when the engine runs another config than asked.")
    layout_probe: bool = Field(
        True,
        description="Load the read-only KV layout probe into every engine (canary/targets/engine_site/"
        "layout_probe.py) and judge its record with the layout gates.",
    )


SECTION = CheckSection(StartupCheckConfig, "Startup check.")
