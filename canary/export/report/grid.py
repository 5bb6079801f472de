"""The matrix as people read it: per (image, topology) a grid of block sizes x attention backends.

Markdown, HTML and the terminal render the same grid, so they always agree. Cells that differ
only by model, KV-cache dtype or runner share a grid position; each entry says which it is.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from canary.checks.startup.kv_groups import group_text
from canary.judge.results import CellResult, CheckResult, RunResult
from canary.judge.verdicts import DEFINITIVE_FAILURES, INCONCLUSIVE_VERDICTS


@dataclass
class Entry:
    """One cell at a grid position."""

    result: CellResult
    variant: str

    @property
    def verdict(self) -> str:
        """The cell verdict."""
        return self.result.verdict


@dataclass
class Section:
    """The grid of one image and topology."""

    image: str
    image_ref: str
    topology: str
    rows: list[str] = field(default_factory=list)
    columns: list[str] = field(default_factory=list)
    entries: dict[tuple[str, str], list[Entry]] = field(default_factory=dict)

    def at(self, row: str, column: str) -> list[Entry]:
        """Entries at (block label, backend)."""
        return self.entries.get((row, column), [])

    @property
    def title(self) -> str:
        """Image and topology in words."""
        return f"{self.image} ({self.image_ref}) · {self.topology}"


def _block_sort_key(label: str) -> tuple[int, ...]:
    return tuple(int(part) for part in label.replace("b", "").replace("p", "").split("-d") if part.isdigit())


def sections(run: RunResult) -> list[Section]:
    """The run's grids, in the order cells were planned."""
    out: dict[tuple[str, str], Section] = {}
    vary_model = len({c.cell.model for c in run.cells}) > 1
    vary_dtype = len({c.cell.kv_cache_dtype for c in run.cells}) > 1
    vary_runner = len({c.cell.runner for c in run.cells}) > 1
    for result in run.cells:
        cell = result.cell
        section = out.setdefault(
            (cell.image, cell.topology), Section(image=cell.image, image_ref=cell.image_ref, topology=cell.topology)
        )
        row, column = cell.block_label, cell.backend
        if row not in section.rows:
            section.rows.append(row)
        if column not in section.columns:
            section.columns.append(column)
        parts = [cell.model] if vary_model else []
        parts += [cell.kv_cache_dtype] if vary_dtype else []
        parts += [cell.runner] if vary_runner else []
        if cell.mixed:  # a mixed pair shares its grid slot with the homogeneous pair: name decode's side
            parts.append(f"decode {cell.image_for('decode')}/{cell.runner_for('decode')}")
        section.entries.setdefault((row, column), []).append(Entry(result, " ".join(parts)))
    for section in out.values():
        section.rows.sort(key=_block_sort_key)
    return list(out.values())


def number(result: CellResult, check: str, key: str) -> float | None:
    """A number a check reported for a cell, or None."""
    found = result.check(check)
    if found is None:
        return None
    value = found.metrics.get(key)
    return None if value is None else float(value)


def fmt(value: float | None, unit: str = "", digits: int = 3) -> str:
    """A number for people: '-' when missing, ms for small seconds."""
    if value is None:
        return "-"
    if unit == "s" and abs(value) < 1.0:
        return f"{value * 1000:.1f} ms"
    if unit == "s":
        return f"{value:.1f} s"
    if unit == "%":
        return f"{value * 100:.1f}%"
    if unit == "B":
        return human_bytes(value)
    if abs(value) >= 10**digits:  # 1030, not 1.03e+03
        return f"{value:.0f}"
    return f"{value:.{digits}g}"


def human_bytes(value: float) -> str:
    """1536 -> 1.5 KiB."""
    size = float(value)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(size) < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} GiB"


@dataclass(frozen=True)
class Column:
    """A column of the per-cell details table: header, check, metric key, unit."""

    header: str
    check: str
    key: str
    unit: str = ""
    """'s' seconds, '%' a fraction, 'B' bytes, ACCURACY the GSM8K accuracy with its interval and n."""


ACCURACY = "accuracy"


DETAIL_COLUMNS: tuple[Column, ...] = (
    Column("ready in", "startup", "ready_s_total", "s"),
    Column("req/s", "throughput", "requests_per_s"),
    Column("out tok/s", "throughput", "output_tokens_per_s"),
    Column("TTFT p50", "throughput", "ttft_p50_s", "s"),
    Column("TPOT p50", "throughput", "tpot_p50_s", "s"),
    Column("E2E p99", "throughput", "e2e_p99_s", "s"),
    Column("GSM8K [Wilson] n", "accuracy", "accuracy", ACCURACY),
    Column("parity", "parity", "parity_match_rate", "%"),
    Column("parity under load", "throughput", "load_parity_match_rate", "%"),
    Column("NIXL", "kv_transfer", "nixl_bytes_transferred", "B"),
)


# Evidence keys that hold engine log lines: the classified signature's excerpt, else the log tail.
EXCERPT_KEYS = ("excerpt", "log_tail", "log_excerpt")


ROLE_INITIAL = {"aggregated": "", "prefill": "P ", "decode": "D "}


def kv_grain(result: CellResult) -> str:
    """What the engines' layout probe recorded, per engine: logical/kernel block and NIXL's registered
    block, e.g. `P 128/32 nixl 32 · D 128/128 nixl 128` ('-' where nothing was recorded); an engine with
    several KV cache groups (a hybrid model) lists each: `[sliding64 128/128 x1, full 128/128 x1]`
    (kind and window, logical/kernel block, NIXL regions: canary.checks.startup.kv_groups)."""
    startup = result.check("startup")
    layout = startup.evidence.get("layout") if startup is not None else None
    engines = layout.get("engines") if isinstance(layout, dict) else None
    if not isinstance(engines, dict):
        return "-"
    parts = []
    for role, summary in engines.items():
        if not isinstance(summary, dict) or not summary.get("recorded"):
            continue
        kernels = summary.get("kernel_block_sizes") or ["?"]
        text = f"{ROLE_INITIAL.get(role, role + ' ')}{summary.get('logical_block_size', '?')}/{kernels[0]}"
        if summary.get("nixl_block_size"):
            text += f" nixl {summary['nixl_block_size']}"
        groups = summary.get("groups")
        if isinstance(groups, list) and len(groups) > 1:
            text += " [" + ", ".join(group_text(g) for g in groups if isinstance(g, dict)) + "]"
        parts.append(text)
    return " · ".join(parts) or "-"


def log_excerpt(check: CheckResult) -> str | None:
    """The log lines a check kept as evidence, if any."""
    for key in EXCERPT_KEYS:
        value = check.evidence.get(key)
        if isinstance(value, str) and value.strip():
            return value
    return None


def accuracy_interval(result: CellResult) -> str:
    """'0.62 [0.52, 0.71] n=100' (the one GSM8K column: accuracy, its Wilson interval, questions) or '-'."""
    acc = number(result, "accuracy", "accuracy")
    low = number(result, "accuracy", "accuracy_wilson_low")
    high = number(result, "accuracy", "accuracy_wilson_high")
    questions = number(result, "accuracy", "questions")
    if acc is None:
        return "-"
    text = f"{acc:.2f}" if low is None or high is None else f"{acc:.2f} [{low:.2f}, {high:.2f}]"
    return text if questions is None else f"{text} n={questions:.0f}"


def cell_value(result: CellResult, column: Column, short: bool = False) -> str:
    """A details-table entry for people, marked when it is not comparable (not_to_scale; `short`: the
    terminal's mark, NOT_COMPARABLE_SHORT, which its table's title explains)."""
    if column.unit == ACCURACY:
        text = accuracy_interval(result)
    else:
        text = fmt(number(result, column.check, column.key), column.unit)
    return marked(text, not_to_scale(check_verdicts(result), column.check), short)


NOT_COMPARABLE = "not comparable"
NOT_COMPARABLE_SHORT = "n/c"
NOT_COMPARABLE_WHY = (
    "the check that measured it could not measure (invalid, error), or a check that found wrong outputs or KV "
    "failed on the cell: no measurement of the engine, never compared"
)


def marked(text: str, why: str, short: bool = False) -> str:
    """A number as every view prints it: `3.35 (not comparable)` (short: `3.35 (n/c)`) when `why`
    (not_to_scale) says it is not comparable, else as it is ('-', nothing measured, stays '-')."""
    if not why or text == "-":
        return text
    return f"{text} ({NOT_COMPARABLE_SHORT if short else NOT_COMPARABLE})"


def anchor(cell_id: str) -> str:
    """The id of a cell's details in summary.html and summary.md: 'cell-' + the id (characters other
    than letters, digits, '.', '_' and '-' become '-')."""
    return "cell-" + re.sub(r"[^A-Za-z0-9._-]", "-", cell_id)


CORRUPTING_CHECKS = ("parity", "kv_transfer")
"""Checks whose failure means the cell's outputs or KV were wrong: its speed is not comparable."""


def not_to_scale(verdicts: Mapping[str, str], check: str) -> str:
    """Why a check's numbers of a cell are not comparable ('' when they are), from the cell's check
    verdicts: the check could not measure (invalid, error), or, for the speed numbers (throughput),
    a corrupting check failed (a cell that returns wrong tokens may be fast for it)."""
    own = verdicts.get(check)
    if own in INCONCLUSIVE_VERDICTS:
        return f"{check} {own}"
    if check == "throughput":
        for name in CORRUPTING_CHECKS:
            if verdicts.get(name) in DEFINITIVE_FAILURES:
                return f"{name} {verdicts[name]}"
    return ""


def check_verdicts(result: CellResult) -> dict[str, str]:
    """check name -> verdict of a cell."""
    return {check.name: check.verdict for check in result.checks}
