"""Test modules have unique basenames: pytest's default import mode imports each by its basename, so a
second `test_x.py` anywhere under tests/ fails the whole collection (as it once did in a clean clone)."""

from __future__ import annotations

from collections import Counter

from canary.paths import REPO_ROOT


def test_every_test_module_basename_is_unique() -> None:
    names = Counter(p.name for p in (REPO_ROOT / "tests").rglob("test_*.py"))
    assert not [n for n, count in names.items() if count > 1], sorted(n for n, c in names.items() if c > 1)
