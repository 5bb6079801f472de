"""summary.md: the run at a glance (matrix grids), then per-cell numbers, then why cells failed."""

from __future__ import annotations

from pathlib import Path

from canary.atomic import write_atomic
from canary.report.grid import (
    DETAIL_COLUMNS,
    Section,
    accuracy_interval,
    fmt,
    kv_grain,
    log_excerpt,
    number,
    sections,
)
from canary.report.outcome import attempts_line, headline, status_word
from canary.results import CellResult, RunResult
from canary.verdicts import FAILING_VERDICTS, VERDICT_SYMBOL

MAX_EXCERPT_LINES = 30


def _escape(text: str) -> str:
    """Text safe inside a Markdown table cell."""
    return text.replace("|", "\\|").replace("\n", " ").strip()


def _legend() -> str:
    return " · ".join(f"{symbol} {verdict}" for verdict, symbol in VERDICT_SYMBOL.items())


def _grid(section: Section) -> list[str]:
    lines = [f"### {section.title}", "", "| block | " + " | ".join(section.columns) + " |"]
    lines.append("|---|" + "---|" * len(section.columns))
    for row in section.rows:
        cells = []
        for column in section.columns:
            entries = section.at(row, column)
            text = "<br>".join(
                f"{VERDICT_SYMBOL[e.verdict]} {e.verdict}" + (f" ({_escape(e.variant)})" if e.variant else "")
                for e in entries
            )
            cells.append(text or "")
        lines.append(f"| {row} | " + " | ".join(cells) + " |")
    return [*lines, ""]


def _details(run: RunResult) -> list[str]:
    headers = ["cell", "verdict", *(c.header for c in DETAIL_COLUMNS), "GSM8K [Wilson]", "KV grain", "reason"]
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    for result in run.cells:
        values = [fmt(number(result, c.check, c.key), c.unit) for c in DETAIL_COLUMNS]
        lines.append(
            "| "
            + " | ".join(
                [
                    f"`{result.cell.id}`",
                    f"{VERDICT_SYMBOL[result.verdict]} {result.verdict}",
                    *values,
                    accuracy_interval(result),
                    kv_grain(result),
                    _escape(result.reason)[:200],
                ]
            )
            + " |"
        )
    return [*lines, ""]


def _excerpt(result: CellResult) -> list[str]:
    for check in result.checks:
        excerpt = log_excerpt(check)
        if excerpt:
            tail = excerpt.strip().splitlines()[-MAX_EXCERPT_LINES:]
            return [f"Log excerpt ({check.name}):", "", "```text", *tail, "```", ""]
    return []


def _failures(run: RunResult) -> list[str]:
    lines: list[str] = []
    for result in run.cells:
        if result.verdict not in FAILING_VERDICTS and result.verdict != "expected-fail":
            continue
        lines += [f"### {VERDICT_SYMBOL[result.verdict]} `{result.cell.id}`: {result.verdict}", "", result.reason, ""]
        for check in result.checks:
            if check.verdict == "pass":
                continue
            lines.append(f"- **{check.name}**: {check.verdict}: {check.summary}")
            if check.evidence.get("failure_class"):
                lines.append(f"  - failure class: `{check.evidence['failure_class']}`")
            if tries := attempts_line(check):
                lines.append(f"  - {tries}")
            if check.evidence.get("failure_hint"):
                lines.append(f"  - hint: {_escape(str(check.evidence['failure_hint']))}")
            for gate in check.gates:
                mark = "passed" if gate.passed else "FAILED"
                lines.append(
                    f"  - gate `{gate.name}` {mark}: observed {fmt(gate.observed)}, "
                    f"threshold {fmt(gate.threshold)}. {gate.detail}".rstrip()
                )
        if result.logs:
            lines.append("- logs: " + ", ".join(f"[{role}]({path})" for role, path in sorted(result.logs.items())))
        lines += ["", *_excerpt(result)]
    return lines


def render(run: RunResult) -> str:
    """The Markdown summary of a run."""
    counts = ", ".join(f"{VERDICT_SYMBOL[v]} {v}: {n}" for v, n in sorted(run.counts().items()))
    status = status_word(run)
    finished = run.finished_at.isoformat(timespec="seconds") if run.finished_at else "not finished"
    lines = [
        f"# vllm-canary run `{run.run_id}`: {status}",
        "",
        f"**{_escape(headline(run))}**",
        "",
        f"- config: `{run.config_name}` ({run.config_path or 'n/a'}), platform `{run.platform}`, target `{run.target}`",
        f"- started {run.started_at.isoformat(timespec='seconds')}, finished {finished}, {run.duration_s:.0f} s"
        + (" (interrupted)" if run.interrupted else ""),
        f"- cells: {counts or 'none'}",
        f"- canary {run.canary_version or 'unknown'}; baseline image `{run.baseline_image or 'n/a'}`",
        "",
        "## Matrix",
        "",
        f"Legend: {_legend()}",
        "",
    ]
    for section in sections(run):
        lines += _grid(section)
    lines += ["## Cells", "", *_details(run)]
    failures = _failures(run)
    if failures:
        lines += ["## Failures and expected failures", "", *failures]
    return "\n".join(lines).rstrip() + "\n"


def write_markdown(run: RunResult, run_dir: Path) -> Path:
    """Write summary.md."""
    return write_atomic(run_dir / "summary.md", render(run))
