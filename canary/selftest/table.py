"""The selftest's detection table (one row per clean run and per fault)."""

from __future__ import annotations

from rich.table import Table

from canary.selftest.model import SelftestResult


def render_table(result: SelftestResult) -> Table:
    """The detection table (one row per clean run and per fault)."""
    table = Table(title=f"selftest: {'OK' if result.ok else 'FAILED'} in {result.duration_s / 60:.1f} min")
    for column in ("run", "fault", "expected check", "detected", "checks that fired", "time to verdict", "run time"):
        table.add_column(column, overflow="fold")
    for clean in result.clean:
        table.add_row(
            f"clean-{clean.index}" + (f" ({clean.config})" if clean.config else ""),
            "none",
            "(no alarm)",
            "no alarm" if clean.ok else "FALSE ALARM",
            "; ".join(clean.alarms) or "-",
            "-",
            f"{clean.run_duration_s:.0f} s",
        )
    for fault in result.faults:
        table.add_row(
            fault.id,
            fault.title,
            fault.expected_check,
            "yes" if fault.detected else "NO",
            ", ".join(fault.fired) + (f" (errors: {', '.join(fault.errors)})" if fault.errors else "") or "-",
            f"{fault.time_to_verdict_s:.0f} s" if fault.time_to_verdict_s is not None else "-",
            f"{fault.run_duration_s:.0f} s",
        )
    return table
