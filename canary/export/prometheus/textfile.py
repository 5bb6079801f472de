"""The node-exporter textfile: the run's metrics in Prometheus text format, written atomically.

node-exporter's textfile collector reads every *.prom file of its directory
(--collector.textfile.directory) on each scrape; a file must never be seen half-written, hence
temp file + rename in the same directory.
"""

from __future__ import annotations

from pathlib import Path

from canary.core.atomic import write_atomic
from canary.export.prometheus.schema import exposition
from canary.judge.results import RunResult

DEFAULT_NAME = "vllm_canary.prom"


def textfile_path(configured: str | Path) -> Path:
    """The file to write: the path itself when it ends in .prom, else DEFAULT_NAME inside it."""
    path = Path(configured)
    return path if path.suffix == ".prom" else path / DEFAULT_NAME


def write_textfile(run: RunResult, path: Path) -> Path:
    """Write the run's metrics to path (a .prom file) atomically."""
    return write_atomic(path, exposition(run))
