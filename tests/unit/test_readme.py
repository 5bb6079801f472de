"""README promises: the two commands, and a config reference that matches the schema."""

from __future__ import annotations

from canary.config.reference import embed
from canary.paths import REPO_ROOT


def test_readme_shows_the_two_commands() -> None:
    text = (REPO_ROOT / "README.md").read_text()
    assert "make canary" in text and "make test" in text


def test_config_reference_is_current() -> None:
    text = (REPO_ROOT / "README.md").read_text()
    assert embed(text) == text, "README config reference is stale: python -m canary.config.reference --write README.md"
