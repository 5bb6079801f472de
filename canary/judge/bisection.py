"""bisect.json, the bisections of a run's red cells (written by canary.bisect), as a model every
view reads: the HTML report (a section per bisected cell), the run history (one row per bisected
cell) and bisect.md / bisect.prom (canary.bisect.model). Here, below the exporters, so they read the
file without importing the layer that writes it."""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

BISECT_JSON = "bisect.json"
SCHEMA_VERSION = 1
RangeKind = Literal["series", "images"]
Observation = Literal["good", "bad", "unknown"]
Outcome = Literal["found", "not-reproduced", "inconclusive", "interrupted"]
Phase = Literal["bad-end", "good-end", "search", "confirm"]
OUTCOME_CODES: dict[Outcome, int] = {"found": 0, "not-reproduced": 1, "inconclusive": 2, "interrupted": 3}
"""canary_bisect_outcome_code's values."""
OUTCOME_WORDS: dict[str, str] = {
    "found": "FOUND",
    "not-reproduced": "NOT REPRODUCED",
    "inconclusive": "INCONCLUSIVE",
    "interrupted": "INTERRUPTED",
    "running": "RUNNING",
}
"""How the reports write an outcome (a bisection still running, or killed, is `running`)."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Culprit(_Model):
    """The first bad patch (or image) of the range."""

    position: int = Field(description="1-based position in the range (patch number / image after the good one).")
    name: str = Field(description="The patch file name, or the image reference.")
    subject: str = Field("", description="The patch's Subject line (series only).")
    path: str = Field("", description="The patch file (series only).")


class StepRecord(_Model):
    """One cell run of the bisection."""

    number: int
    point: int = Field(description="Prefix length (series: patches applied) or image index (0 = the good one).")
    label: str = Field(description="What ran: `patches 01..04` or the image reference.")
    phase: Phase
    observation: Observation
    detail: str = Field(description="The cell's verdict and reason.")
    evidence: dict[str, Any] = Field(default_factory=dict, description="Checks, failing gates, the step's files.")
    duration_s: float


class BisectReport(_Model):
    """One bisection of one cell."""

    cell: str
    image: str = Field(description="Image key whose range was bisected.")
    range_kind: RangeKind
    range: list[str] = Field(description="Patch file names in series order, or image references good .. bad.")
    series: str = Field("", description="The series file bisected (series only).")
    rerun_checks: list[str] = Field(description="The checks each step ran: those that failed in the run.")
    policy: dict[str, Any]
    outcome: Outcome | Literal["running"]
    reason: str
    culprit: Culprit | None = None
    last_good: int = Field(description="Highest point known good.")
    first_bad: int = Field(description="Lowest point known bad (the culprit when found).")
    steps: list[StepRecord] = Field(default_factory=list)
    cell_runs: int = 0
    started_at: dt.datetime
    finished_at: dt.datetime | None = None
    duration_s: float = 0.0

    def label(self, point: int) -> str:
        """What ran at a point."""
        return point_label(self.range_kind, self.range, point)


class BisectFile(_Model):
    """bisect.json: the bisections of a run's cells (the last one per cell)."""

    schema_version: int = SCHEMA_VERSION
    run_id: str
    bisections: list[BisectReport] = Field(default_factory=list)

    def of(self, cell_id: str) -> BisectReport | None:
        """The bisection of a cell, if it was bisected."""
        return next((b for b in self.bisections if b.cell == cell_id), None)


def point_label(kind: RangeKind, names: list[str], point: int) -> str:
    """`no patch` / `patches 01..05` (series) or the image reference (images)."""
    if kind == "images":
        return names[point]
    if point == 0:
        return "no patch (the image without its series)"
    first, last = _number(names[0], 1), _number(names[point - 1], point)
    return f"patch {first}" if point == 1 else f"patches {first}..{last}"


def _number(name: str, position: int) -> str:
    match = re.match(r"^(\d+)", name)
    return match.group(1) if match else f"#{position}"


def culprit_text(b: BisectReport) -> str:
    """The culprit in words: `patch FILE: SUBJECT` (series) or the image reference; '' when none."""
    if b.culprit is None:
        return ""
    if b.range_kind == "series":
        return f"patch {b.culprit.name}: {b.culprit.subject}" if b.culprit.subject else f"patch {b.culprit.name}"
    return b.culprit.name


def load_file(run_dir: Path, run_id: str) -> BisectFile:
    """bisect.json of a run (empty when there is none or it cannot be read)."""
    found = read_file(run_dir)
    return found if found is not None else BisectFile(run_id=run_id)


def read_file(run_dir: Path) -> BisectFile | None:
    """bisect.json of a run; None when the run has none (or it is not a bisect.json: a view shows no
    bisection rather than fail the report)."""
    path = run_dir / BISECT_JSON
    if not path.is_file():
        return None
    try:
        return BisectFile.model_validate_json(path.read_text(encoding="utf-8"))
    except (ValueError, OSError):
        return None
