"""Writers of a run's results: results.json (and, added by the report modules, JUnit, Markdown, HTML)."""

from __future__ import annotations

import os
from pathlib import Path

from canary.results import RunResult


def write_json(run: RunResult, run_dir: Path) -> Path:
    """Write results.json atomically (temp file + rename: never half-written)."""
    path = run_dir / "results.json"
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(run.model_dump_json(indent=2), encoding="utf-8")
    os.replace(tmp, path)
    return path


def point_latest(results_root: Path, run_dir: Path) -> Path:
    """Make results_root/latest a symlink to run_dir (atomically replaced)."""
    link = results_root / "latest"
    tmp = results_root / f".latest.{os.getpid()}"
    if tmp.is_symlink() or tmp.exists():
        tmp.unlink()
    tmp.symlink_to(run_dir.name)
    os.replace(tmp, link)
    return link


def write_all(run: RunResult, run_dir: Path) -> list[Path]:
    """Write every result file of a run; returns the paths written."""
    return [write_json(run, run_dir)]
