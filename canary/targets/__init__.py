"""Targets by `target.kind`, one folder each: local processes, containers, an endpoint, or Kubernetes.

A kind is a folder `canary/targets/<kind>/` (the folder's name is the kind): its `settings.py` declares the
kind and its `target.<kind>` settings (`TARGET = TargetSection(...)`, in the config layer, assembled into
TargetConfig by canary.config.targets), its `target.py` implements it and registers its class with
`@target_kind("<kind>")`. The `target.py` is imported only when its kind is used (the Kubernetes client is
heavy). This `__init__` imports nothing of the canary at run time but canary.errors: the config imports the
folders' settings modules through this package.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar, cast

from canary.errors import CanaryError

if TYPE_CHECKING:
    from canary.config import CanaryConfig
    from canary.targets.base import Target

TargetClass = TypeVar("TargetClass", bound=type)
TARGET_CLASSES: dict[str, type] = {}
"""target.kind -> the class its `target.py` registered (filled as those modules are imported)."""


def target_kind(kind: str) -> Callable[[TargetClass], TargetClass]:
    """Register a class as the target of `kind` (the name of the folder its module lives in). Every target class
    takes the same constructor, `(config, *, source)`, and says its kind as `kind`."""

    def register(cls: TargetClass) -> TargetClass:
        folder = cls.__module__.split(".")
        if folder[:2] != ["canary", "targets"] or folder[2:] != [kind, "target"]:
            raise TypeError(f"target kind {kind!r} must be registered from canary/targets/{kind}/target.py")
        declared = getattr(cls, "kind", kind)  # an engine target's kind is its runner's, set per instance
        if declared != kind:
            raise TypeError(f"{cls.__name__}.kind is {declared!r}, registered as {kind!r}")
        TARGET_CLASSES[kind] = cls
        return cls

    return register


def target_class(kind: str) -> type:
    """The class of a kind: its folder's `target.py` imported, the class it registered returned."""
    from canary.config.targets import TARGET_KINDS

    if kind not in TARGET_KINDS:
        raise CanaryError(f"unknown target kind {kind!r}; known: {', '.join(TARGET_KINDS)}")
    module = importlib.import_module(f"{__name__}.{kind}.target")
    if kind not in TARGET_CLASSES:
        raise CanaryError(f"{module.__name__} registers no target: decorate its class with @target_kind({kind!r})")
    return TARGET_CLASSES[kind]


def create_target(config: CanaryConfig, *, source: str = "config") -> Target:
    """The target named by config.target.kind (source: the config file, named in its errors)."""
    cls = target_class(config.target.kind)
    return cast("Target", cls(config, source=source))  # every target: (config, *, source), no special case
