"""Generate the config reference (Markdown) from the pydantic models' field descriptions.

README.md embeds the output between markers; a test fails when it is stale. Regenerate with
`python -m canary.config.reference --write README.md`.
"""

from __future__ import annotations

import argparse
import sys
import types
import typing
from pathlib import Path

from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from canary.config import CanaryConfig

BEGIN = "<!-- config-reference:begin -->"
END = "<!-- config-reference:end -->"


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
        out.append(f"#### `{path}` ({model.__name__})\n")
        out.append((model.__doc__ or "").strip().splitlines()[0] + "\n")
        out.append("| key | type | default | description |")
        out.append("|---|---|---|---|")
        for name, field in model.model_fields.items():
            annotation = field.annotation
            out.append(f"| `{name}` | {_type_name(annotation)} | {_default(field)} | {field.description or ''} |")
            for nested in _nested_models(annotation):
                child = name if path == "(root)" else f"{path}.{name}"
                queue.append((child, nested))
        out.append("")
    return "\n".join(out).rstrip() + "\n"


def embed(readme: str) -> str:
    """README text with the reference between the markers replaced."""
    if BEGIN not in readme or END not in readme:
        raise ValueError(f"README lacks the markers {BEGIN} / {END}")
    head, rest = readme.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    return f"{head}{BEGIN}\n{render()}{END}{tail}"


def main(argv: list[str] | None = None) -> int:
    """CLI: print the reference, or --write it into a README."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--write", type=Path, help="embed into this README between the markers")
    args = parser.parse_args(argv)
    if args.write:
        args.write.write_text(embed(args.write.read_text(encoding="utf-8")), encoding="utf-8")
    else:
        sys.stdout.write(render())
    return 0


if __name__ == "__main__":
    sys.exit(main())
