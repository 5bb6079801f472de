"""The project's YAML files as pydantic models: one strict base, one loader, one error wording.

Every file format (the config, the backend, image and signature catalogs, the selftest faults)
derives from StrictModel, so a misspelt key is an error, never silently ignored. Every problem
becomes a ConfigError (exit 2) naming the file and the key path (or line and column for YAML
syntax), in the same words whichever file it is.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from types import UnionType
from typing import Annotated, Any, TypeVar, Union, get_args, get_origin

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError

from canary.core.redact import redact_url
from canary.core.words import did_you_mean
from canary.errors import ConfigError


class StrictModel(BaseModel):
    """Base of every model read from a file: unknown keys are errors."""

    model_config = ConfigDict(extra="forbid")


class FrozenModel(StrictModel):
    """A StrictModel that cannot change once loaded (catalogs: cached and shared)."""

    model_config = ConfigDict(extra="forbid", frozen=True)


Model = TypeVar("Model", bound=BaseModel)

UNKNOWN_KEY_HINT = "check the spelling"


def read_text(path: Path) -> str:
    """A file's text; ConfigError when it is missing or unreadable."""
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(str(path), "", "file not found") from None
    except OSError as exc:
        raise ConfigError(str(path), "", f"cannot read: {exc.strerror or exc}") from None


def parse_yaml(text: str, source: str) -> Any:
    """Parsed YAML; ConfigError naming the line and column of a syntax error, or an empty file."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or "invalid YAML"
        raise ConfigError(source, where, f"YAML syntax error: {problem}") from None
    if data is None:
        raise ConfigError(source, "", "file is empty")
    return data


def read_yaml(path: Path) -> Any:
    """A YAML file, parsed (read_text, then parse_yaml)."""
    return parse_yaml(read_text(path), str(path))


def error_location(loc: tuple[int | str, ...]) -> str:
    """A pydantic error location as a dotted key path (keys and list indexes only)."""
    # pydantic adds the tag of a discriminated union / the function name of a validator: keep keys only
    return ".".join(str(p) for p in loc if not str(p).startswith("function-"))


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    """The models an annotation holds directly (Model, Model | None, Annotated[Model, ...])."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    if get_origin(annotation) in (Union, UnionType, Annotated):
        return [m for arg in get_args(annotation) for m in _models_in(arg)]
    return []


def _items_in(annotation: Any) -> list[Any]:
    """The value annotations of a list or mapping annotation (through Optional and Annotated)."""
    origin = get_origin(annotation)
    if origin in (Union, UnionType, Annotated):
        return [item for arg in get_args(annotation) for item in _items_in(arg)]
    if origin in (list, tuple, Sequence, dict, Mapping):
        return [get_args(annotation)[-1]] if get_args(annotation) else []
    return []


def known_keys(model: type[BaseModel], path: Sequence[int | str]) -> list[str]:
    """The keys the model accepts in the mapping at `path` (keys and list indexes from the top), or []
    when the path does not lead to a model."""
    annotations: list[Any] = [model]
    for part in path:
        models = [m for a in annotations for m in _models_in(a)]
        if models:
            fields = [m.model_fields[str(part)] for m in models if str(part) in m.model_fields]
            annotations = [f.annotation for f in fields]
        else:  # a list index or a mapping's key
            annotations = [item for a in annotations for item in _items_in(a)]
        if not annotations:
            return []
    return sorted({name for a in annotations for m in _models_in(a) for name in m.model_fields})


def unknown_key(model: type[BaseModel] | None, loc: Sequence[int | str]) -> str:
    """'did you mean <the closest known key>?' for a key the model does not accept at loc, or ''."""
    if model is None or not loc:
        return ""
    parent = tuple(loc[:-1])
    prefix = error_location(parent)
    return did_you_mean(str(loc[-1]), known_keys(model, parent), f"{prefix}." if prefix else "")


def describe(
    error: dict[str, Any], unknown_key_hint: str = UNKNOWN_KEY_HINT, model: type[BaseModel] | None = None
) -> str:
    """One pydantic error in words, with the offending value when it is a scalar, and for an unknown key
    the closest key the model accepts there."""
    kind = error.get("type", "")
    if kind == "extra_forbidden":
        suggestion = unknown_key(model, tuple(error.get("loc", ())))
        return f"unknown key: {suggestion} ({unknown_key_hint})" if suggestion else f"unknown key ({unknown_key_hint})"
    if kind == "missing":
        return "required key is missing"
    got = error.get("input")
    message = str(error.get("msg", "invalid value"))
    if isinstance(got, str):
        return f"{message} (got {redact_url(got)!r})"  # a URL's password is never echoed
    if isinstance(got, (int, float, bool)):
        return f"{message} (got {got!r})"
    return message


def validation_error(
    source: str, exc: ValidationError, unknown_key_hint: str = UNKNOWN_KEY_HINT, model: type[BaseModel] | None = None
) -> ConfigError:
    """The ConfigError of a failed validation: its first error's key path and words (an unknown key with
    the closest one `model` accepts there), and how many more."""
    first = exc.errors()[0]
    more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
    return ConfigError(source, error_location(first["loc"]), describe(dict(first), unknown_key_hint, model) + more)


def validate_mapping(data: Any, model: type[Model], source: str) -> Model:
    """Validate parsed YAML (a mapping at the top level) into `model`; ConfigError naming source and key."""
    if not isinstance(data, dict):
        raise ConfigError(source, "", f"expected a mapping at the top level, got {type(data).__name__}")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise validation_error(source, exc, model=model) from None


def load_yaml_model(path: Path, model: type[Model]) -> Model:
    """Read a YAML file and validate it into `model`; every problem is a ConfigError naming the file."""
    return validate_mapping(read_yaml(path), model, str(path))
