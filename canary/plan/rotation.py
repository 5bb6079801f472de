"""Rotation state: when each cell was last checked, so the next run resumes the rotation.

A small JSON file (`target.kubernetes.rotation.state_file`, default
RESULTS_DIR/rotation-<config name>.json), rewritten atomically after every checked cell, so a run
killed at its deadline still records what it finished:

    {"version": 1, "config": "h200-mrv2-pd",
     "cells": {"pd.flashinfer.p128-d128.fp8.v2.patched": {"last_checked": "2026-11-30T02:41:07+00:00",
                                                          "verdict": "pass"}}}

Cells no longer in the matrix are dropped on the next write. A run reads and writes the file only
while it holds the release's run lease (canary.run.wave_run), and a write is never last-writer-wins:
it reads the file first and keeps, per cell, the later check (another writer's newer record
survives an older run's save).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from canary.config import CanaryConfig
from canary.core.atomic import write_atomic
from canary.errors import CanaryError

STATE_VERSION = 1


class RotationStateError(CanaryError):
    """The rotation state file exists but cannot be read."""

    exit_code = 2


@dataclass
class CellSeen:
    """When a cell was last checked and with which verdict."""

    last_checked: datetime
    verdict: str


@dataclass
class RotationState:
    """The rotation state of one config."""

    path: Path
    config: str
    cells: dict[str, CellSeen] = field(default_factory=dict)
    scope: set[str] | None = None
    """The cells of the matrix (keep_only): a save merges only these from the file."""

    def last_checked(self) -> dict[str, datetime]:
        """Cell id -> last check time."""
        return {cell_id: seen.last_checked for cell_id, seen in self.cells.items()}

    def record(self, cell_id: str, when: datetime, verdict: str) -> None:
        """Remember a checked cell and write the file at once."""
        self.cells[cell_id] = CellSeen(when, verdict)
        self.save()

    def keep_only(self, cell_ids: Iterable[str]) -> None:
        """Forget cells that left the matrix (in memory; the next save writes it)."""
        wanted = set(cell_ids)
        self.scope = wanted
        self.cells = {k: v for k, v in self.cells.items() if k in wanted}

    def merge_from_file(self) -> None:
        """Take from the file on disk every in-scope cell it records later than this state does."""
        try:
            on_disk = read_state(self.path, self.config)
        except FileNotFoundError:
            return
        for cell_id, seen in on_disk.items():
            if self.scope is not None and cell_id not in self.scope:
                continue
            mine = self.cells.get(cell_id)
            if mine is None or seen.last_checked > mine.last_checked:
                self.cells[cell_id] = seen

    def save(self) -> None:
        """Merge the file's later records in, then write it atomically."""
        self.merge_from_file()
        payload = {
            "version": STATE_VERSION,
            "config": self.config,
            "cells": {
                cell_id: {"last_checked": seen.last_checked.isoformat(), "verdict": seen.verdict}
                for cell_id, seen in sorted(self.cells.items())
            },
        }
        write_atomic(self.path, json.dumps(payload, indent=1) + "\n")


def state_path(config: CanaryConfig, results_dir: Path | None = None) -> Path:
    """Where the rotation state of a config lives."""
    configured = config.target.kubernetes.rotation.state_file
    if configured:
        return Path(configured)
    return (results_dir or Path(config.export.results_dir)) / f"rotation-{config.name}.json"


def load_state(config: CanaryConfig, results_dir: Path | None = None) -> RotationState:
    """The state of a config (empty when the file does not exist yet)."""
    path = state_path(config, results_dir)
    state = RotationState(path=path, config=config.name)
    with contextlib.suppress(FileNotFoundError):
        state.cells.update(read_state(path, config.name))
    return state


def read_state(path: Path, config_name: str) -> dict[str, CellSeen]:
    """The cells a state file records; FileNotFoundError when there is none."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise
    except (OSError, ValueError) as exc:
        raise RotationStateError(f"{path}: cannot read the rotation state: {exc}") from None
    if not isinstance(data, dict) or data.get("version") != STATE_VERSION or not isinstance(data.get("cells"), dict):
        raise RotationStateError(f"{path}: not a version {STATE_VERSION} rotation state (keys version, config, cells)")
    if data.get("config") != config_name:
        raise RotationStateError(f"{path}: rotation state of config {data.get('config')!r}, not {config_name!r}")
    cells: dict[str, CellSeen] = {}
    for cell_id, entry in data["cells"].items():
        try:
            when = datetime.fromisoformat(str(entry["last_checked"]))
            verdict = str(entry["verdict"])
        except (KeyError, TypeError, ValueError) as exc:
            raise RotationStateError(f"{path}: cells.{cell_id}: expected last_checked and verdict ({exc})") from None
        if when.tzinfo is None:
            raise RotationStateError(f"{path}: cells.{cell_id}.last_checked: needs a timezone ({when.isoformat()})")
        cells[str(cell_id)] = CellSeen(when, verdict)
    return cells
