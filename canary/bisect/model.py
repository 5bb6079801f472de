"""What a bisection produced, written like a verdict into the bisected run's directory: bisect.json
(every bisected cell of the run, the source of truth), bisect.md (its view) and bisect.prom (the
canary_bisect_* metrics of canary.export.prometheus.schema)."""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from canary.bisect.search import OUTCOME_CODES, Outcome, SearchResult, Step
from canary.core.atomic import write_atomic
from canary.export.prometheus import schema
from canary.export.prometheus.schema import Sample

BISECT_JSON, BISECT_MD, BISECT_PROM = "bisect.json", "bisect.md", "bisect.prom"
SCHEMA_VERSION = 1
RangeKind = Literal["series", "images"]


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
    phase: Literal["bad-end", "good-end", "search", "confirm"]
    observation: Literal["good", "bad", "unknown"]
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


def patch_subject(path: Path) -> str:
    """The Subject line of a patch file (`[PATCH]` tags dropped), else its first non-empty line."""
    text = path.read_text(encoding="utf-8", errors="replace")
    for line in text.splitlines():
        if line.startswith("Subject:"):
            return re.sub(r"^\[[^\]]*\]\s*", "", line[len("Subject:") :].strip())
    return next((line.strip() for line in text.splitlines() if line.strip()), "")


def step_record(kind: RangeKind, names: list[str], step: Step) -> StepRecord:
    """A search step as recorded."""
    return StepRecord(
        number=step.number,
        point=step.point,
        label=point_label(kind, names, step.point),
        phase=step.phase,
        observation=step.observation,
        detail=step.detail,
        evidence=step.evidence,
        duration_s=step.duration_s,
    )


def apply_result(report: BisectReport, result: SearchResult, culprit: Culprit | None, finished: dt.datetime) -> None:
    """Fill the report from the search's result."""
    report.outcome = result.outcome
    report.reason = result.reason
    report.culprit = culprit
    report.last_good, report.first_bad = result.good, result.bad
    report.steps = [step_record(report.range_kind, report.range, s) for s in result.steps]
    report.cell_runs = len(result.steps)
    report.finished_at = finished
    report.duration_s = result.duration_s


# --------------------------------------------------------------------------- writing


def load_file(run_dir: Path, run_id: str) -> BisectFile:
    """bisect.json of a run (empty when there is none or it cannot be read)."""
    path = run_dir / BISECT_JSON
    if path.is_file():
        try:
            return BisectFile.model_validate_json(path.read_text(encoding="utf-8"))
        except ValueError:
            pass
    return BisectFile(run_id=run_id)


def write_report(run_dir: Path, run_id: str, report: BisectReport) -> list[Path]:
    """Put the report into bisect.json (replacing the cell's earlier one) and rewrite bisect.md and
    bisect.prom; atomically, so Ctrl-C never leaves a half-written file."""
    data = load_file(run_dir, run_id)
    data.bisections = [b for b in data.bisections if b.cell != report.cell] + [report]
    return [
        write_atomic(run_dir / BISECT_JSON, data.model_dump_json(indent=2)),
        write_atomic(run_dir / BISECT_MD, render_markdown(data)),
        write_atomic(run_dir / BISECT_PROM, schema.bisect_exposition(samples(data))),
    ]


def samples(data: BisectFile) -> list[Sample]:
    """The canary_bisect_* series of every finished bisection."""
    out: list[Sample] = []
    for b in data.bisections:
        if b.outcome == "running":
            continue
        labels = {"cell": b.cell, "image": b.image, "range": b.range_kind}
        out.append(Sample(schema.BISECT_OUTCOME.name, labels, float(OUTCOME_CODES[b.outcome])))
        if b.culprit is not None:
            culprit = {**labels, "culprit": b.culprit.name}
            out.append(Sample(schema.BISECT_CULPRIT.name, culprit, float(b.culprit.position)))
        size = len(b.range) - (1 if b.range_kind == "images" else 0)
        out.append(Sample(schema.BISECT_RANGE_SIZE.name, labels, float(size)))
        out.append(Sample(schema.BISECT_CELL_RUNS.name, labels, float(b.cell_runs)))
        out.append(Sample(schema.BISECT_DURATION.name, labels, b.duration_s))
        if b.finished_at is not None:
            out.append(Sample(schema.BISECT_TIMESTAMP.name, labels, b.finished_at.timestamp()))
    return out


_GLYPH = {"good": "✅ pass", "bad": "❌ fail", "unknown": "❔ unknown"}
_OUTCOME = {
    "found": "FOUND",
    "not-reproduced": "NOT REPRODUCED",
    "inconclusive": "INCONCLUSIVE",
    "interrupted": "INTERRUPTED",
    "running": "RUNNING",
}


def headline(b: BisectReport) -> str:
    """One line: the outcome and the culprit."""
    if b.culprit is not None:
        what = f"patch {b.culprit.name}: {b.culprit.subject}" if b.range_kind == "series" else b.culprit.name
        return f"{_OUTCOME[b.outcome]}: {b.cell}: {what} ({b.cell_runs} cell runs, {b.duration_s / 60:.1f} min)"
    return f"{_OUTCOME[b.outcome]}: {b.cell}: {b.reason} ({b.cell_runs} cell runs, {b.duration_s / 60:.1f} min)"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render_markdown(data: BisectFile) -> str:
    """bisect.md: per bisected cell the outcome, the culprit and every step."""
    lines = [f"# Bisection of run {data.run_id}", ""]
    for b in data.bisections:
        lines += [f"## {b.cell}", "", f"**{headline(b)}**", ""]
        lines.append(f"- reason: {b.reason}")
        if b.culprit is not None:
            where = f" (`{b.culprit.path}`)" if b.culprit.path else ""
            lines.append(f"- culprit: #{b.culprit.position} `{b.culprit.name}`{where}: {b.culprit.subject}")
        source = f"series `{b.series}`" if b.range_kind == "series" else "image range"
        lines.append(f"- range: {source}, image `{b.image}`, {len(b.range)} entries: " + ", ".join(b.range))
        lines.append(f"- narrowed to: last good {b.label(b.last_good)}; first bad {b.label(b.first_bad)}")
        lines.append(f"- each step reran checks: {', '.join(b.rerun_checks) or 'startup only'}")
        lines.append(f"- policy: {', '.join(f'{k} {v}' for k, v in b.policy.items())}")
        lines += ["", "| # | phase | ran | verdict | minutes | detail |", "|---|---|---|---|---|---|"]
        for s in b.steps:
            lines.append(
                f"| {s.number} | {s.phase} | {_cell(s.label)} | {_GLYPH[s.observation]} | "
                f"{s.duration_s / 60:.1f} | {_cell(s.detail)[:300]} |"
            )
        lines.append("")
    return "\n".join(lines)
