"""How wide the terminal is, for what the canary prints into it (tables, progress lines).

$COLUMNS when set; else the terminal's own width; else (a pipe or a file, no terminal) NON_TTY_WIDTH
for the tables, and no limit for progress lines: a log file keeps every line whole (long reasons
are in the run's files too: results.json, summary.md)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TextIO

from canary.core.words import cut

NON_TTY_WIDTH = 120
"""Columns of the tables printed into a pipe or file without $COLUMNS (a log read in a terminal later)."""


def columns(env: Mapping[str, str]) -> int | None:
    """$COLUMNS as a positive number, or None."""
    value = env.get("COLUMNS", "")
    return int(value) if value.isdigit() and int(value) > 0 else None


def terminal_width(stream: TextIO, env: Mapping[str, str]) -> int | None:
    """The width lines printed to `stream` must fit: $COLUMNS, else the terminal's; None when the stream
    is no terminal (nothing to fit)."""
    set_width = columns(env)
    if set_width is not None:
        return set_width
    try:
        return os.get_terminal_size(stream.fileno()).columns if stream.isatty() else None
    except (OSError, ValueError):  # a closed or fake stream
        return None


def fit(line: str, width: int | None) -> str:
    """One printed line in `width` columns: whole, or cut at a word with an ellipsis (no limit: whole)."""
    return line if width is None else cut(line, width)
