"""Config errors only the expanded matrix shows: a plan in which no cell runs, an expectation that matches no
cell, an include-only model no cell runs. Checked on the full matrix (before pairwise reduction and `--only`)
by `canary plan`, `canary run` and its dry run alike, so a config that would test nothing, or whose known-bug
marker a typo lost, is refused before anything starts.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from canary.config import CanaryConfig, CellMatch
from canary.config.catalog import Catalog
from canary.core.words import listing
from canary.errors import ConfigError
from canary.plan.cell import Cell
from canary.plan.matrix import expand, matches

MAX_REASON_LINES = 18
"""Reasons listed when no cell runs; the rest are counted in one more line."""
STATUS_WORDS = {"skipped": "impossible", "unsupported": "unsupported on this platform"}


def validate_plan(config: CanaryConfig, source: str, catalog: Catalog | None = None) -> list[Cell]:
    """The full matrix's cells, or ConfigError naming the file and key path of what is wrong."""
    cells = expand(config, catalog)
    check_something_runs(cells, source)
    check_expectations_match(cells, config, source)
    check_include_only_models_run(cells, config, source)
    return cells


def check_something_runs(cells: Sequence[Cell], source: str) -> None:
    """ConfigError when no cell of the matrix is planned, with why each was dropped, grouped."""
    if any(c.status == "planned" for c in cells):
        return
    if not cells:
        raise ConfigError(source, "matrix.exclude", "removes every cell of the matrix: nothing would be tested")
    groups: dict[tuple[str, str], list[str]] = defaultdict(list)
    for cell in cells:
        groups[(cell.status, cell.reason or "no reason given")].append(cell.id)
    lines = [
        f"  {len(ids)} {STATUS_WORDS.get(status, status)}: {reason} (e.g. {ids[0]})"
        for (status, reason), ids in sorted(groups.items(), key=lambda item: (-len(item[1]), item[0]))
    ]
    if len(lines) > MAX_REASON_LINES:
        rest = len(lines) - MAX_REASON_LINES + 1
        lines = [*lines[: MAX_REASON_LINES - 1], f"  ... and {rest} more reasons"]
    unsupported = any(c.status == "unsupported" for c in cells)
    hint = "; matrix.run_unsupported: true runs the unsupported ones anyway" if unsupported else ""
    raise ConfigError(
        source,
        "matrix",
        f"none of its {len(cells)} cells would run: nothing would be tested{hint}. Why each was dropped:\n"
        + "\n".join(lines),
    )


def check_expectations_match(cells: Sequence[Cell], config: CanaryConfig, source: str) -> None:
    """ConfigError for an expectation whose match selects no cell of the full matrix."""
    for index, expectation in enumerate(config.matrix.expectations):
        if any(matches(expectation.match, cell) for cell in cells):
            continue
        raise ConfigError(
            source,
            f"matrix.expectations.{index}.match",
            f"matches no cell of the matrix ({len(cells)} cells), so its {expectation.expect} marker would "
            f"apply nowhere: {_why_nothing_matches(expectation.match, cells)}",
        )


def check_include_only_models_run(cells: Sequence[Cell], config: CanaryConfig, source: str) -> None:
    """ConfigError for an include-only model that no cell of the full matrix runs (no include names it)."""
    for index, model in enumerate(config.models):
        if model.include_only and not any(cell.model == model.name for cell in cells):
            raise ConfigError(
                source,
                f"models.{index}.include_only",
                f"{model.name} is left out of the cross product and no matrix.include cell names it: it would "
                f"plan nothing (add an include with model: {model.name}, or drop include_only)",
            )


def _why_nothing_matches(match: CellMatch, cells: Sequence[Cell]) -> str:
    """Which fields of a match select no cell on their own (a typo), else that their combination does."""
    given = match.model_dump(exclude_none=True)
    alone = []
    for field, value in given.items():
        if not any(matches(CellMatch.model_validate({field: value}), cell) for cell in cells):
            seen = sorted({v for cell in cells for v in _values(field, cell)}, key=lambda v: (str(type(v)), v))
            alone.append(f"no cell has {field} {value!r} (the matrix has {', '.join(str(v) for v in seen)})")
    if alone:
        return "; ".join(alone)
    fields = listing(f"{field} {value}" for field, value in given.items())
    return f"each of {listing(sorted(given))} matches some cell, but no cell has all of {fields}"


def _values(field: str, cell: Cell) -> list[str | int]:
    """The values a cell offers a CellMatch field."""
    if field == "block_size":
        return [cell.prefill_block_size, cell.decode_block_size]
    if field == "decode_runner":
        return [cell.runner_for("decode")]
    if field == "decode_image":
        return [cell.image_for("decode")]
    if field == "backend":
        return [cell.backend]
    return [getattr(cell, field)]
