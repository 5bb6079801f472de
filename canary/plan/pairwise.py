"""Pairwise (2-way covering) reduction of a planned matrix.

allpairspy builds a covering array over the axes of the planned cells, constrained to
combinations that exist among them. High-risk cells are always kept, and any pair of axis values
the constrained generator missed is covered greedily, so the result provably covers every pair
of values that occurs together in some planned cell.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

from allpairspy import AllPairs

from canary.plan.cell import Cell

Pair = tuple[tuple[str, str], tuple[str, str]]


def _pairs_of(cell: Cell) -> set[Pair]:
    items = sorted(cell.axis_values().items())
    return {(a, b) for a, b in itertools.combinations(items, 2)}


def reduce_pairwise(cells: Sequence[Cell]) -> list[Cell]:
    """Keep a subset of planned cells covering every pair of axis values; keep non-planned cells as is."""
    planned = [c for c in cells if c.status == "planned"]
    if not planned:
        return list(cells)
    # a mixed pair adds decode_runner/decode_image to its coordinates: reduce over the axes every cell has
    common = set.intersection(*(set(c.axis_values()) for c in planned))
    axes = [
        name
        for name in planned[0].axis_values()
        if name in common and len({c.axis_values()[name] for c in planned}) > 1
    ]
    if not axes:
        return list(cells)

    by_tuple: dict[tuple[str, ...], Cell] = {}
    prefixes: set[tuple[str, ...]] = set()
    for cell in planned:
        values = tuple(cell.axis_values()[a] for a in axes)
        by_tuple.setdefault(values, cell)
        prefixes.update(values[:n] for n in range(1, len(values) + 1))

    parameters = [sorted({c.axis_values()[a] for c in planned}) for a in axes]
    chosen: dict[str, Cell] = {c.id: c for c in planned if c.high_risk}
    if len(axes) >= 2:
        for row in AllPairs(parameters, filter_func=lambda row: tuple(row) in prefixes):
            found = by_tuple.get(tuple(row))
            if found is not None:
                chosen.setdefault(found.id, found)
    else:
        for cell in planned:
            chosen.setdefault(cell.id, cell)

    _cover_remaining_pairs(planned, chosen)
    keep = set(chosen)
    return [c for c in cells if c.status != "planned" or c.id in keep]


def _cover_remaining_pairs(planned: list[Cell], chosen: dict[str, Cell]) -> None:
    """Greedily add the cell covering most uncovered pairs until every pair is covered."""
    needed: set[Pair] = set().union(*(_pairs_of(c) for c in planned))
    covered: set[Pair] = set().union(*(_pairs_of(c) for c in chosen.values())) if chosen else set()
    missing = needed - covered
    while missing:
        best = max(planned, key=lambda c: (len(_pairs_of(c) & missing), c.id))
        gain = _pairs_of(best) & missing
        if not gain:  # pragma: no cover - every needed pair comes from some planned cell
            break
        chosen[best.id] = best
        missing -= gain


def uncovered_pairs(full: Sequence[Cell], reduced: Sequence[Cell]) -> set[Pair]:
    """Pairs of the full planned matrix that the reduced one does not cover (empty when correct)."""
    needed: set[Pair] = set().union(*(_pairs_of(c) for c in full if c.status == "planned"))
    have: set[Pair] = set().union(*(_pairs_of(c) for c in reduced if c.status == "planned"))
    return needed - have
