"""Which planned cells a command takes.

- `--only PREFIX` (repeatable, command line): the cells whose id starts with one of them.
- else the config's `matrix.select` (exact cell ids): the cells a plain run takes, e.g. the embedded
  default's first run, which must fit in a few minutes while its matrix declares more.
- else, or with `--all`, every planned cell.

An `--only` prefix that names no cell is refused (exit 2) with the closest ids. A selected id that is no cell
of the matrix (a `--set` narrowed it, or a cell was renamed) is named in the note, with its closest id; a
selection that keeps no cell is refused (exit 2), so a renamed cell never silently shrinks a run.
"""

from __future__ import annotations

from collections.abc import Sequence

from canary.core.words import closest, listing
from canary.errors import ConfigError, UsageError
from canary.plan.matrix import Plan


def select_cells(
    the_plan: Plan, *, only: Sequence[str], select: Sequence[str], everything: bool, config: str
) -> tuple[Plan, str | None]:
    """The plan narrowed as the module's docstring says, and a line saying how (None: every cell)."""
    ids = [c.id for c in the_plan.cells]
    if only:
        for prefix in only:
            if not any(i.startswith(prefix) for i in ids):
                raise UsageError(no_cell_matches(prefix, ids, config))
        kept = tuple(c for c in the_plan.cells if any(c.id.startswith(p) for p in only))
        return the_plan.model_copy(update={"cells": kept}), None
    if everything or not select:
        return the_plan, None
    kept = tuple(c for c in the_plan.cells if c.id in select)
    absent = [cell_id for cell_id in select if cell_id not in ids]
    if not kept:
        raise ConfigError(
            config,
            "matrix.select",
            f"takes none of this matrix's {len(ids)} cells ({_absent(absent, ids)}); run them with --all or --only ID, "
            f"list the cell ids with `canary plan {config} --all`",
        )
    note = f"matrix.select: {len(kept)} of {len(ids)} cells (`--all` takes every cell, `--only ID` the ones named)"
    if absent:  # a --set that narrowed the matrix, or an id renamed since: said, never silent
        note += f"; not in this matrix: {_absent(absent, ids)}"
    return the_plan.model_copy(update={"cells": kept}), note


def _absent(absent: Sequence[str], ids: Sequence[str]) -> str:
    """The selected ids that are no cell, each with its closest cell id."""
    parts = []
    for cell_id in absent:
        near = closest(cell_id, ids, n=1, cutoff=0.5)
        parts.append(f"{cell_id} (closest: {near[0]})" if near else cell_id)
    return ", ".join(parts)


def no_cell_matches(prefix: str, ids: Sequence[str], config: str) -> str:
    """An `--only` prefix no cell id starts with: where to find the ids, and the closest prefixes."""
    depth = prefix.count(".") + 1
    near = closest(prefix, (".".join(i.split(".")[:depth]) for i in ids), n=3, cutoff=0.5)
    hint = f" (closest: {listing(near)})" if near else ""
    return f"--only {prefix} matches no cell of {config}{hint}; list the cell ids with `canary plan {config} --all`"
