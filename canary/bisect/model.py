"""What a bisection produced, written like a verdict into the bisected run's directory: bisect.json
(every bisected cell of the run, the source of truth), bisect.md (its view) and bisect.prom (the
canary_bisect_* metrics of canary.export.prometheus.schema)."""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path

from canary.bisect.search import SearchResult, Step
from canary.core.atomic import write_atomic
from canary.export.prometheus import schema
from canary.export.prometheus.schema import Sample
from canary.judge.bisection import (
    BISECT_JSON,
    OUTCOME_CODES,
    OUTCOME_WORDS,
    BisectFile,
    BisectReport,
    Culprit,
    RangeKind,
    StepRecord,
    culprit_text,
    load_file,
    point_label,
)

BISECT_MD, BISECT_PROM = "bisect.md", "bisect.prom"
__all__ = [
    "BISECT_JSON",
    "BISECT_MD",
    "BISECT_PROM",
    "BisectFile",
    "BisectReport",
    "Culprit",
    "RangeKind",
    "StepRecord",
    "load_file",
    "point_label",
]


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


def spent_s(b: BisectReport) -> float:
    """Seconds spent: the whole bisection once it ended, the steps so far while it runs."""
    return b.duration_s if b.finished_at is not None else sum(s.duration_s for s in b.steps)


def headline(b: BisectReport) -> str:
    """One line: the outcome and the culprit (or the reason), the runs and minutes spent."""
    what = culprit_text(b) if b.culprit is not None else b.reason or "started"
    return f"{OUTCOME_WORDS[b.outcome]}: {b.cell}: {what} ({b.cell_runs} cell runs, {spent_s(b) / 60:.1f} min)"


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
            subject = f": {b.culprit.subject}" if b.culprit.subject else ""  # an image has none
            lines.append(f"- culprit: #{b.culprit.position} `{b.culprit.name}`{where}{subject}")
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
