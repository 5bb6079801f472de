"""Targets by `target.kind`: local processes, an existing endpoint, or Kubernetes."""

from __future__ import annotations

from typing import TYPE_CHECKING

from canary.errors import CanaryError

if TYPE_CHECKING:
    from canary.config import CanaryConfig
    from canary.targets.base import Target


def create_target(config: CanaryConfig, *, source: str = "config") -> Target:
    """The target named by config.target.kind (source: the config file, named in its errors)."""
    kind = config.target.kind
    if kind == "local":
        from canary.targets.local import LocalTarget

        return LocalTarget(config, source=source)
    if kind == "endpoint":
        from canary.targets.endpoint import EndpointTarget

        return EndpointTarget(config)
    if kind == "kubernetes":
        from canary.targets.kubernetes.target import KubernetesTarget

        return KubernetesTarget(config)  # type: ignore[no-any-return,unused-ignore]
    raise CanaryError(f"unknown target kind {kind!r}")
