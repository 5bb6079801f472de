"""Values in words (canary/core/words.py): lists, closest names, text cut at a word."""

from __future__ import annotations

import pytest

from canary.core.words import by_closeness, closest, cut, did_you_mean, listing


@pytest.mark.parametrize(
    ("text", "width", "cut_to"),
    [
        ("abc def ghi", 11, "abc def ghi"),  # fits: whole
        ("abc def ghi", 8, "abc def…"),  # the room ends at a word's end: that word stays
        ("abc def ghi", 7, "abc…"),  # mid-word: the word goes
        ("abc, def", 6, "abc…"),  # no dangling punctuation before the ellipsis
        ("abcdefghij", 5, "abcd…"),  # one word wider than the room: cut in it
    ],
)
def test_cut_keeps_whole_words_and_marks_the_cut(text: str, width: int, cut_to: str) -> None:
    assert cut(text, width) == cut_to
    assert len(cut(text, width)) <= width


def test_listing_has_no_brackets_and_counts_the_rest() -> None:
    assert listing(["sm80", "sm90"]) == "sm80, sm90"
    assert listing(range(5), limit=2) == "0, 1 and 3 more"
    assert listing([]) == ""


def test_closest_names_come_closest_first() -> None:
    assert closest("acuracy", ["parity", "accuracy", "startup"]) == ["accuracy"]
    assert did_you_mean("acuracy", ["parity", "accuracy"], "checks.") == "did you mean checks.accuracy?"
    assert did_you_mean("zzz", ["parity", "accuracy"]) == ""
    assert by_closeness("cpu-defalt.yaml", ["selftest.yaml", "cpu-default.yaml"])[0] == "cpu-default.yaml"
