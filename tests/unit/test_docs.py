"""Docs promises: a short README with the two commands, generated reference pages that match the code,
links that land, an mkdocs nav that covers every page, and repository paths in the docs that exist.

The site's own strict build (`make docs-check`, part of `make test`) checks links between pages and
their anchors too; these tests need no mkdocs and run with the unit tests."""

from __future__ import annotations

import importlib.util
import re
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType

import pytest
import yaml

from canary import cli
from canary.paths import REPO_ROOT

README = REPO_ROOT / "README.md"
DOCS = REPO_ROOT / "docs"
README_MAX_LINES = 199
"""The README stays short (under 200 lines): detail goes to docs/."""
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)
CODE_SPAN = re.compile(r"``\s?(.+?)\s?``|`([^`\n]+)`")
REPO_DIRS = ("canary/", "configs/", "docker/", "docs/", "helm/", "mk/", "requirements/", "tests/")


def _load_generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("docs_generate", DOCS / "generate.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


GENERATOR = _load_generator()
GENERATED: dict[str, Callable[[], str]] = GENERATOR.GENERATED


def _pages() -> list[Path]:
    return sorted(p for p in DOCS.rglob("*.md") if "_snippets" not in p.parts)


def _relative_links(text: str) -> Iterator[str]:
    for target in LINK.findall(FENCE.sub("", text)):
        if not re.match(r"^[a-z][a-z0-9+.-]*:", target) and not target.startswith("#"):
            yield target


# --------------------------------------------------------------------------- README


def test_readme_is_short_and_shows_the_two_commands() -> None:
    text = README.read_text(encoding="utf-8")
    lines = text.count("\n")
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines (at most {README_MAX_LINES}): move detail to docs/"
    commands = [line.split("#", 1)[0].strip() for line in FENCE.findall(text)[0].splitlines()]
    assert "make canary" in commands and "make test" in commands, commands


def test_every_relative_link_in_the_readme_resolves_to_a_file() -> None:
    links = list(_relative_links(README.read_text(encoding="utf-8")))
    assert len(links) >= 10, links  # the docs hub, at least
    missing = [link for link in links if not (REPO_ROOT / link.split("#", 1)[0]).is_file()]
    assert not missing, f"README.md links to files that do not exist: {missing}"


def test_the_readmes_exit_codes_are_the_clis() -> None:
    text = README.read_text(encoding="utf-8")
    rows = re.findall(r"^\| (\d+) \| (.+) \|$", text, re.M)
    assert rows == [(str(e.code), e.meaning) for e in cli.EXIT_CODES], "README.md exit codes differ from cli.EXIT_CODES"


# --------------------------------------------------------------------------- generated pages


@pytest.mark.parametrize("path", sorted(GENERATED))
def test_the_generated_page_is_current(path: str) -> None:
    target = REPO_ROOT / path
    assert target.is_file(), f"{path} is missing: run {GENERATOR.REGENERATE}"
    assert target.read_text(encoding="utf-8") == GENERATED[path](), f"{path} is stale: run {GENERATOR.REGENERATE}"


def test_every_reference_page_is_generated() -> None:
    pages = {str(p.relative_to(REPO_ROOT)) for p in (DOCS / "reference").glob("*.md")}
    assert pages and pages <= set(GENERATED), f"hand-written pages under docs/reference/: {pages - set(GENERATED)}"


def test_the_check_mode_names_a_stale_page(tmp_path: Path) -> None:
    for path, render in GENERATED.items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(render(), encoding="utf-8")
    assert GENERATOR.stale(tmp_path) == []
    (tmp_path / "docs/reference/config.md").write_text("# Config reference\n\nold\n", encoding="utf-8")
    (tmp_path / "docs/architecture.svg").unlink()
    assert GENERATOR.stale(tmp_path) == ["docs/reference/config.md", "docs/architecture.svg"]


def test_the_references_cover_what_they_document() -> None:
    from canary.config import CanaryConfig
    from canary.export.prometheus import schema

    config = GENERATED["docs/reference/config.md"]()
    assert all(f"| `{name}` |" in config for name in CanaryConfig.model_fields)
    metrics = GENERATED["docs/reference/metrics.md"]()
    assert all(f"| `{spec.name}` | gauge |" in metrics for spec in schema.ALL_METRICS)
    codes = GENERATED["docs/reference/exit-codes.md"]()
    assert all(f"| {e.code} | `{e.name}` | {e.meaning} |" in codes for e in cli.EXIT_CODES)
    layers = GENERATED["docs/_snippets/layers.md"]()
    from canary import LAYERS

    assert all(f"| {layer} | `{prefix}` |" in layers for layer, prefixes in LAYERS for prefix in prefixes)


# --------------------------------------------------------------------------- the site


def test_the_nav_lists_every_page_and_only_pages_that_exist() -> None:
    config = yaml.safe_load((REPO_ROOT / "mkdocs.yml").read_text(encoding="utf-8"))

    def entries(node: object) -> Iterator[str]:
        if isinstance(node, str):
            yield node
        elif isinstance(node, list):
            for item in node:
                yield from entries(item)
        elif isinstance(node, dict):
            for value in node.values():
                yield from entries(value)

    nav = list(entries(config["nav"]))
    pages = [str(p.relative_to(DOCS)) for p in _pages()]
    assert sorted(nav) == sorted(pages), set(nav) ^ set(pages)
    assert config["theme"]["name"] == "material"


def test_every_relative_link_between_pages_resolves() -> None:
    broken = [
        f"{page.relative_to(REPO_ROOT)}: {link}"
        for page in _pages()
        for link in _relative_links(page.read_text(encoding="utf-8"))
        if not (page.parent / link.split("#", 1)[0]).resolve().is_file()
    ]
    assert not broken, broken


def test_repository_paths_named_in_the_docs_exist() -> None:
    """A path in a code span (`canary/checks/base.py`) that a rename left behind fails here."""
    stale = []
    for page in [README, *_pages()]:
        for double, single in CODE_SPAN.findall(FENCE.sub("", page.read_text(encoding="utf-8"))):
            span = (double or single).strip()
            if not span.startswith(REPO_DIRS) or re.search(r"[<>*\s]|\.\.\.|\{", span):
                continue
            path = span.split(":", 1)[0].rstrip("/")
            if not (REPO_ROOT / path).exists():
                stale.append(f"{page.relative_to(REPO_ROOT)}: {span}")
    assert not stale, f"paths that do not exist: {stale}"
