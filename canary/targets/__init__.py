"""Targets by `target.kind`, a small registry: local processes, containers, an endpoint, or Kubernetes.

Each kind names the module and class that implements it; the module is imported only when the
kind is used (the Kubernetes client is heavy). tests/unit/targets/test_registry.py holds the
registry against the config's `target.kind` literal.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, cast

from canary.errors import CanaryError

if TYPE_CHECKING:
    from canary.config import CanaryConfig
    from canary.targets.base import Target

TARGETS: dict[str, str] = {
    "local": "canary.targets.local:LocalTarget",
    "container": "canary.targets.container:ContainerTarget",
    "endpoint": "canary.targets.endpoint:EndpointTarget",
    "kubernetes": "canary.targets.kubernetes.target:KubernetesTarget",
}
"""target.kind -> "module:class"."""


def create_target(config: CanaryConfig, *, source: str = "config") -> Target:
    """The target named by config.target.kind (source: the config file, named in its errors). Every target
    class takes the same constructor: `(config, *, source)`."""
    kind = config.target.kind
    if kind not in TARGETS:
        raise CanaryError(f"unknown target kind {kind!r}; known: {', '.join(TARGETS)}")
    module, _, name = TARGETS[kind].partition(":")
    cls = getattr(importlib.import_module(module), name)
    return cast("Target", cls(config, source=source))  # every target: (config, *, source), no special case
