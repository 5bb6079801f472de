"""Generate the config reference page (Markdown) from the pydantic models' field descriptions.

The page is docs/reference/config.md; tests/unit/test_docs.py fails when it is stale. Regenerate with
`python -m canary.config.reference --write docs/reference/config.md` (or `make docs-generate`).
"""

from __future__ import annotations

import re
import sys
import types
import typing
from pathlib import Path

from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from canary.config import CanaryConfig
from canary.core.pages import page_main

PAGE = Path("docs/reference/config.md")
"""Where the page lives, relative to the repository root."""
_CODE_SPAN = re.compile(r"(`[^`]*`)")


def _type_name(annotation: object) -> str:
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _type_name(typing.get_args(annotation)[0])
    if origin is typing.Literal:
        return " \\| ".join(repr(a) for a in typing.get_args(annotation))
    if origin in (typing.Union, types.UnionType):
        return " \\| ".join(_type_name(a) for a in typing.get_args(annotation))
    if origin is not None:
        args = ", ".join(_type_name(a) for a in typing.get_args(annotation))
        return f"{getattr(origin, '__name__', str(origin))}[{args}]"
    if annotation is type(None):
        return "null"
    return getattr(annotation, "__name__", str(annotation))


def _nested_models(annotation: object) -> list[type[BaseModel]]:
    found: list[type[BaseModel]] = []
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    for arg in typing.get_args(annotation):
        found.extend(_nested_models(arg))
    return found


def _default(field: object) -> str:
    default = getattr(field, "default", PydanticUndefined)
    factory = getattr(field, "default_factory", None)
    if default is PydanticUndefined and factory is None:
        return "**required**"
    if factory is not None:
        value = factory()
        return "{}" if isinstance(value, BaseModel) else f"`{value!r}`"
    return f"`{default!r}`"


def _text(text: str) -> str:
    """Prose for a Markdown table cell: `<` and `>` outside code spans escaped (`<run-id>` is not HTML)."""
    parts = _CODE_SPAN.split(text)
    return "".join(part if part.startswith("`") else part.replace("<", "&lt;").replace(">", "&gt;") for part in parts)


def _summary(model: type[BaseModel]) -> str:
    """A model's docstring up to its first blank line, as one line."""
    paragraph = (model.__doc__ or "").strip().split("\n\n", 1)[0]
    return " ".join(line.strip() for line in paragraph.splitlines())


def render() -> str:
    """Markdown tables, one per model, walking from the root."""
    out: list[str] = []
    seen: set[type[BaseModel]] = set()
    queue: list[tuple[str, type[BaseModel]]] = [("(root)", CanaryConfig)]
    while queue:
        path, model = queue.pop(0)
        if model in seen:
            continue
        seen.add(model)
        out.append(f"## `{path}` ({model.__name__})\n")
        out.append(_text(_summary(model)) + "\n")
        out.append("| key | type | default | description |")
        out.append("|---|---|---|---|")
        for name, field in model.model_fields.items():
            annotation = field.annotation
            description = _text(field.description or "")
            out.append(f"| `{name}` | {_type_name(annotation)} | {_default(field)} | {description} |")
            for nested in _nested_models(annotation):
                child = name if path == "(root)" else f"{path}.{name}"
                queue.append((child, nested))
        out.append("")
    return "\n".join(out).rstrip() + "\n"


def page() -> str:
    """The whole reference page: a title, where it comes from, and the tables."""
    head = (
        "# Config reference\n\n"
        "Every key of a canary config file, generated from the config models (`canary/config/`) by "
        f"`python -m canary.config.reference --write {PAGE}`; a test fails when this page is stale. "
        "How configs are loaded, overridden with `--set` and checked: [Configs](../operations/configs.md).\n\n"
    )
    return head + render()


def main(argv: list[str] | None = None) -> int:
    """CLI: print the reference page, or --write it to a file."""
    return page_main(argv, description=__doc__ or "", page=page, default=PAGE)


if __name__ == "__main__":
    sys.exit(main())
