"""Exporters of a run's results (Pushgateway, node-exporter textfile, HTTP exporter)."""

from __future__ import annotations

from pathlib import Path

from canary.config import CanaryConfig
from canary.results import RunResult


def export_run(run: RunResult, config: CanaryConfig, run_dir: Path) -> list[str]:
    """Export a finished run everywhere the config says; returns one status line per exporter."""
    return []
