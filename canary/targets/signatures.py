"""Name the cause of a failed start from the logs, using the signature catalog in configs/.

The catalog (configs/signatures.yaml) is data: an id, a title, regular expressions matched per
log line, a priority and a hint for each known failure. `classify` searches every log of a cell
(and the target's own failure text, which is where a timeout is recorded) and returns the most
specific match with a short excerpt around the matching line as evidence.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from pydantic import Field, field_validator, model_validator

from canary.core.yaml_model import FrozenModel, load_yaml_model
from canary.paths import SIGNATURES_CATALOG

CONTEXT_LINES = 3
"""Lines of context before and after the matching line in an excerpt."""
MAX_LINE_CHARS = 400
"""Excerpt lines are cut to this length (vLLM prints whole configs on one line)."""
ORIGIN = re.compile(r"^(?:vllm \d+\.\d+\.\d+|torch|python|canary)(?:\b.*)?$")
"""A signature pattern's origin when it is not a message of the pinned vLLM (Signature.origins)."""


class Signature(FrozenModel):
    """One known failure."""

    id: str = Field(pattern=r"^[a-z0-9][a-z0-9-]*$", description="Stable id, e.g. no-common-block-size.")
    title: str = Field(min_length=1, description="One line for people.")
    priority: int = Field(description="Higher wins when several signatures match.")
    patterns: list[str] = Field(min_length=1, description="Regular expressions, matched per log line.")
    hint: str = Field("", description="What it usually means and what to do.")
    fatal: bool = Field(
        False,
        description="A match means the server can never become ready even though its process lives on "
        "(a thread it needs has died): the local target stops waiting at once instead of at the deadline.",
    )

    origins: dict[str, str] = Field(
        default_factory=dict,
        description="Where a pattern's message comes from when it is not in the pinned vLLM's source (pattern -> "
        "`vllm <version>`: another vLLM release; `torch`, `python` or `canary`, then a note). Patterns without an "
        "entry are messages of the pinned vLLM (tests/source checks both ways against its sdist).",
    )

    @model_validator(mode="after")
    def _origins_name_patterns(self) -> Signature:
        for pattern, origin in self.origins.items():
            if pattern not in self.patterns:
                raise ValueError(f"origins: {pattern!r} is not one of the patterns")
            if not ORIGIN.match(origin):
                raise ValueError(f"origins: {origin!r} must start with `vllm <version>`, torch, python or canary")
        return self

    @field_validator("patterns")
    @classmethod
    def _compiles(cls, patterns: list[str]) -> list[str]:
        for pattern in patterns:
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ValueError(f"invalid regular expression {pattern!r}: {exc}") from None
        return patterns

    def search(self, line: str) -> bool:
        """Whether any pattern matches the line."""
        return any(rx.search(line) for rx in _compiled(tuple(self.patterns)))


class SignatureCatalog(FrozenModel):
    """configs/signatures.yaml."""

    schema_version: int = Field(description="Catalog schema version.")
    signatures: list[Signature] = Field(min_length=1, description="Known failures.")

    @field_validator("signatures")
    @classmethod
    def _unique_ids(cls, signatures: list[Signature]) -> list[Signature]:
        ids = [s.id for s in signatures]
        duplicates = sorted({i for i in ids if ids.count(i) > 1})
        if duplicates:
            raise ValueError(f"duplicate signature ids {duplicates}")
        return signatures

    def get(self, signature_id: str) -> Signature | None:
        """A signature by id."""
        return next((s for s in self.signatures if s.id == signature_id), None)


@lru_cache(maxsize=256)
def _compiled(patterns: tuple[str, ...]) -> tuple[re.Pattern[str], ...]:
    return tuple(re.compile(p) for p in patterns)


@lru_cache(maxsize=4)
def _load(path: str) -> SignatureCatalog:
    return load_yaml_model(Path(path), SignatureCatalog)


def load_signatures(path: Path | None = None) -> SignatureCatalog:
    """Load (once) and validate the catalog."""
    return _load(str(path or SIGNATURES_CATALOG))


@dataclass(frozen=True)
class Match:
    """Where a signature matched."""

    signature: Signature
    source: str
    line_number: int
    line: str
    excerpt: str


@dataclass(frozen=True)
class Classification:
    """The verdict of `classify`: the winning signature (None: unrecognised) and all that matched."""

    best: Match | None
    matched: list[str] = field(default_factory=list)

    @property
    def failure_class(self) -> str | None:
        """The winning signature id."""
        return self.best.signature.id if self.best else None

    def evidence(self) -> dict[str, object]:
        """What goes into a CheckResult's evidence."""
        if self.best is None:
            return {"failure_class": None, "matched_signatures": []}
        sig = self.best.signature
        return {
            "failure_class": sig.id,
            "failure_title": sig.title,
            "failure_hint": sig.hint.strip(),
            "excerpt_source": self.best.source,
            "excerpt_line": self.best.line_number,
            "excerpt": self.best.excerpt,
            "matched_signatures": self.matched,
        }


def _cut(line: str) -> str:
    return line if len(line) <= MAX_LINE_CHARS else line[: MAX_LINE_CHARS - 3] + "..."


def excerpt(lines: list[str], index: int, context: int = CONTEXT_LINES) -> str:
    """Lines index-context .. index+context, numbered, the matching one marked with '>'."""
    start, stop = max(0, index - context), min(len(lines), index + context + 1)
    width = len(str(stop))
    return "\n".join(f"{'>' if i == index else ' '} {i + 1:>{width}} | {_cut(lines[i])}" for i in range(start, stop))


def find_all(texts: Mapping[str, str], catalog: SignatureCatalog | None = None) -> list[Match]:
    """The first match of every signature in every text (texts: source name -> text)."""
    catalog = catalog or load_signatures()
    found: list[Match] = []
    for source, text in texts.items():
        lines = text.splitlines()
        for signature in catalog.signatures:
            for index, line in enumerate(lines):
                if signature.search(line):
                    found.append(Match(signature, source, index + 1, _cut(line), excerpt(lines, index)))
                    break
    return found


def classify(texts: Mapping[str, str], catalog: SignatureCatalog | None = None) -> Classification:
    """The most specific signature found in the texts (priority, then catalog order, then text order)."""
    catalog = catalog or load_signatures()
    matches = find_all(texts, catalog)
    if not matches:
        return Classification(best=None)
    order = {s.id: i for i, s in enumerate(catalog.signatures)}
    sources = list(texts)
    matches.sort(key=lambda m: (-m.signature.priority, order[m.signature.id], sources.index(m.source), m.line_number))
    matched = list(dict.fromkeys(m.signature.id for m in matches))
    return Classification(best=matches[0], matched=matched)


class LogWatch:
    """Reads a growing log incrementally and reports the first line matching a fatal signature."""

    def __init__(self, path: Path, catalog: SignatureCatalog | None = None) -> None:
        self.path = path
        self.fatal = [sig for sig in (catalog or load_signatures()).signatures if sig.fatal]
        self._offset = 0
        self._partial = ""

    def poll(self) -> tuple[Signature, str] | None:
        """The first fatal signature in the lines written since the last poll, with its line."""
        if not self.fatal:
            return None
        try:
            with self.path.open("r", encoding="utf-8", errors="replace") as log:
                log.seek(self._offset)
                chunk = log.read()
                self._offset = log.tell()
        except OSError:
            return None
        lines = (self._partial + chunk).split("\n")
        self._partial = lines.pop()  # an unfinished last line waits for its end
        for line in lines:
            for signature in self.fatal:
                if signature.search(line):
                    return signature, _cut(line)
        return None
