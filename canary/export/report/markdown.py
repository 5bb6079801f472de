"""summary.md: the outcome and why, the run at a glance (matrix grids: each entry links to its
cell's row), per-cell numbers, what changed against the previous and the last good run (with a
text sparkline of the key metrics, canary.export.report.trends), each cell's SLO capacity and the P/D
cells' disaggregation gains when the capacity search ran, then why cells failed (with the
culprit a bisection named, from the run's bisect.json whenever there is one)."""

from __future__ import annotations

from pathlib import Path

from canary.core.atomic import write_atomic
from canary.core.svg import Spark
from canary.core.words import cut
from canary.export.report.capacity import markdown_lines as capacity_lines
from canary.export.report.grid import (
    DETAIL_COLUMNS,
    Section,
    anchor,
    cell_value,
    fmt,
    kv_grain,
    log_excerpt,
    sections,
)
from canary.export.report.outcome import attempts_line, headline, not_passing, status_word, why
from canary.export.report.trends import KEY_METRICS, NO_PREVIOUS, Trends, changes, same_run
from canary.export.report.workload import markdown_lines as workload_lines
from canary.judge.bisection import OUTCOME_WORDS, BisectFile, culprit_text, read_file
from canary.judge.results import CellResult, RunResult
from canary.judge.verdicts import FAILING_VERDICTS, VERDICT_SYMBOL

MAX_EXCERPT_LINES = 30
SPARK_LEVELS = "▁▂▃▄▅▆▇█"
NOT_COMPARABLE = "·"


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
                f"[{VERDICT_SYMBOL[e.verdict]} {e.verdict}](#{anchor(e.result.cell.id)})"
                + (f" ({_escape(e.variant)})" if e.variant else "")
                for e in entries
            )
            cells.append(text or "")
        lines.append(f"| {row} | " + " | ".join(cells) + " |")
    return [*lines, ""]


def _details(run: RunResult) -> list[str]:
    headers = ["cell", "verdict", *(c.header for c in DETAIL_COLUMNS), "KV grain", "reason"]
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    for result in run.cells:
        values = [cell_value(result, c) for c in DETAIL_COLUMNS]
        lines.append(
            "| "
            + " | ".join(
                [
                    f'<a id="{anchor(result.cell.id)}"></a>`{result.cell.id}`',
                    f"{VERDICT_SYMBOL[result.verdict]} {result.verdict}",
                    *values,
                    kv_grain(result),
                    _escape(cut(" ".join(result.reason.split()), REASON_SHOWN)),
                ]
            )
            + " |"
        )
    return [*lines, ""]


REASON_SHOWN = 200
"""Characters of a cell's reason in summary.md's table (cut at a word, with an ellipsis; results.json and
summary.html have it whole)."""
DIGEST_SHOWN = 12
"""Hex digits of an image digest shown in summary.md."""


def image_line(facts: object) -> str | None:
    """`image: <ref> (vLLM 0.32.0, sha256:abc…)` from the startup check's evidence["image_facts"]; roles that
    run the same facts share one entry, others are named (a mixed cell: `prefill ...; decode ...`)."""
    if not isinstance(facts, dict) or not facts:
        return None
    by_text: dict[str, list[str]] = {}
    for role, fact in facts.items():
        if not isinstance(fact, dict):
            continue
        known = [f"vLLM {fact['vllm_version']}" if fact.get("vllm_version") else "vLLM version unknown"]
        digest = fact.get("digest")
        if isinstance(digest, str) and digest:
            algorithm, _, hexdigits = digest.partition(":")
            known.append(f"{algorithm}:{hexdigits[:DIGEST_SHOWN]}…" if hexdigits else digest[:DIGEST_SHOWN])
        by_text.setdefault(f"`{fact.get('ref')}` ({', '.join(known)})", []).append(str(role))
    if not by_text:
        return None
    if len(by_text) == 1:
        return "image: " + next(iter(by_text))
    return "image: " + "; ".join(f"{'/'.join(roles)} {text}" for text, roles in by_text.items())


def _images(run: RunResult) -> list[str]:
    lines = []
    for result in run.cells:
        startup = result.check("startup")
        line = image_line(startup.evidence.get("image_facts")) if startup is not None else None
        if line:
            lines.append(f"- `{result.cell.id}`: {_escape(line)}")
    return [*lines, ""] if lines else []


def text_sparkline(points: list[Spark]) -> str:
    """'▁▃▅█·▇': the judged values in eight levels, '·' where a value is not comparable."""
    judged = [p.value for p in points if p.judged]
    low, high = min(judged, default=0.0), max(judged, default=0.0)
    out = []
    for point in points:
        if not point.judged:
            out.append(NOT_COMPARABLE)
            continue
        top = len(SPARK_LEVELS) - 1
        level = top // 2 if high == low else round((point.value - low) / (high - low) * top)
        out.append(SPARK_LEVELS[level])
    return "".join(out)


def _changes(run: RunResult, trends: Trends) -> list[str]:
    if trends.note:
        lines = [f"_{_escape(trends.note)}_", ""]
    elif not trends.runs_read:
        lines = [f"_{NO_PREVIOUS}: this is the first run of {run.config_name} in the history._", ""]
    else:
        lines = []
    heads = [f"{c.header} (recent runs)" for c in KEY_METRICS]
    lines += ["| cell | vs previous run | vs last good run | " + " | ".join(heads) + " |"]
    lines.append("|" + "---|" * (3 + len(KEY_METRICS)))
    for result in run.cells:
        trend = trends.of(result.cell.id)
        cells = [f"[`{result.cell.id}`](#{anchor(result.cell.id)})"]
        for seen in (trend.previous, trend.last_good):
            words = "; ".join(changes(seen, result))
            cells.append(_escape(f"{seen.run_id}: {words}" if seen else words))
        if same_run(trend):
            cells[-1] = "the previous run"
        elif trend.previous is not None and trend.last_good is None:
            cells[-1] = "none in the runs read"
        cells += [text_sparkline(trend.recent[c]) if c in trend.recent else "" for c in KEY_METRICS]
        lines.append("| " + " | ".join(cells) + " |")
    return [*lines, ""]


def _banner(run: RunResult) -> list[str]:
    """The outcome, then every cell that kept the run from passing and why (linked to its row)."""
    items = [
        f"- [`{c.cell.id}`](#{anchor(c.cell.id)}) {VERDICT_SYMBOL[c.verdict]} {c.verdict}: {_escape(why(c))}"
        for c in not_passing(run)
    ]
    return [f"**{_escape(headline(run))}**", "", *items, *([""] if items else [])]


def _excerpt(result: CellResult) -> list[str]:
    for check in result.checks:
        excerpt = log_excerpt(check)
        if excerpt:
            tail = excerpt.strip().splitlines()[-MAX_EXCERPT_LINES:]
            return [f"Log excerpt ({check.name}):", "", "```text", *tail, "```", ""]
    return []


def _bisected(bisections: BisectFile | None, result: CellResult) -> list[str]:
    """A bisected cell's outcome and culprit, pointing at bisect.md (nothing for a cell not bisected)."""
    found = bisections.of(result.cell.id) if bisections is not None else None
    if found is None:
        return []
    what = culprit_text(found) or found.reason
    runs = f"{found.cell_runs} cell runs, {found.duration_s / 60:.1f} min"
    return [f"- **bisect**: {OUTCOME_WORDS[found.outcome]}: {_escape(what)} ({runs}; [bisect.md](bisect.md))"]


def _failures(run: RunResult, bisections: BisectFile | None = None) -> list[str]:
    lines: list[str] = []
    for result in run.cells:
        if result.verdict not in FAILING_VERDICTS and result.verdict != "expected-fail":
            continue
        lines += [f"### {VERDICT_SYMBOL[result.verdict]} `{result.cell.id}`: {result.verdict}", "", result.reason, ""]
        lines += _bisected(bisections, result)
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


def render(run: RunResult, trends: Trends | None = None, bisections: BisectFile | None = None) -> str:
    """The Markdown summary of a run, compared with its history when trends are given, naming what
    the bisections found when they are given."""
    trends = trends or Trends()
    counts = ", ".join(f"{VERDICT_SYMBOL[v]} {v}: {n}" for v, n in sorted(run.counts().items()))
    status = status_word(run)
    finished = run.finished_at.isoformat(timespec="seconds") if run.finished_at else "not finished"
    lines = [
        f"# vllm-canary run `{run.run_id}`: {status}",
        "",
        *_banner(run),
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
    images = _images(run)
    if images:
        lines += ["## Images", "", *images]
    lines += workload_lines(run)
    lines += capacity_lines(run)
    lines += ["## Changes", "", *_changes(run, trends)]
    failures = _failures(run, bisections)
    if failures:
        lines += ["## Failures and expected failures", "", *failures]
    return "\n".join(lines).rstrip() + "\n"


def write_markdown(run: RunResult, run_dir: Path, trends: Trends | None = None) -> Path:
    """Write summary.md (with its bisect.json whenever there is one: a bisection renders it again)."""
    return write_atomic(run_dir / "summary.md", render(run, trends, read_file(run_dir)))
