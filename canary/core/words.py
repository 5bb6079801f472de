"""Values in words for what a person reads: lists without Python's brackets, the closest names to a
misspelt one, and text cut at a word boundary with an ellipsis."""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Sequence

ELLIPSIS = "…"


def listing(items: Iterable[object], limit: int | None = None) -> str:
    """'a, b, c' (never a Python list); past `limit` items, 'a, b and 3 more'."""
    words = [str(item) for item in items]
    if limit is not None and len(words) > limit:
        return f"{', '.join(words[:limit])} and {len(words) - limit} more"
    return ", ".join(words)


def closest(word: str, candidates: Iterable[str], n: int = 3, cutoff: float = 0.6) -> list[str]:
    """The candidates closest to `word`, closest first (difflib's ratio; none below `cutoff`)."""
    return difflib.get_close_matches(word, list(dict.fromkeys(candidates)), n=n, cutoff=cutoff)


def by_closeness(word: str, candidates: Sequence[str]) -> list[str]:
    """Every candidate, the closest to `word` first (ties in their given order)."""
    return sorted(candidates, key=lambda c: -difflib.SequenceMatcher(None, word, c).ratio())


def did_you_mean(word: str, candidates: Iterable[str], prefix: str = "") -> str:
    """'did you mean PREFIXclosest?' for the closest candidate, or '' when none is close."""
    near = closest(word, candidates, n=1)
    return f"did you mean {prefix}{near[0]}?" if near else ""


def cut(text: str, width: int) -> str:
    """`text` in at most `width` characters: whole, or cut at the last word boundary that fits with an
    ellipsis (mid-word only when a single word is wider than that)."""
    if len(text) <= width:
        return text
    if width <= 1:
        return ELLIPSIS[:width]
    room = text[: width - 1]
    if not text[width - 1].isspace():  # the room ends inside a word: drop that word
        boundary = room.rfind(" ")
        room = room[:boundary] if boundary > 0 else room
    return room.rstrip(" ,;:") + ELLIPSIS
