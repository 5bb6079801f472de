"""What a target gives the checks: a deployed cell's URLs, metrics endpoints, logs and startup facts.

Targets are chosen by `target.kind` from a small registry (`canary.targets.create_target`).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from canary.matrix import Cell


@dataclass
class ServerInfo:
    """One server process / pod of a cell (role: aggregated, prefill, decode, router)."""

    role: str
    base_url: str
    metrics_url: str | None = None
    log_path: Path | None = None
    ready_seconds: float | None = None
    pid: int | None = None
    exit_code: int | None = None

    def log_text(self) -> str:
        """The captured log (empty if none)."""
        if self.log_path is None or not self.log_path.exists():
            return ""
        return self.log_path.read_text(encoding="utf-8", errors="replace")


@dataclass
class Deployment:
    """A cell as deployed: where to send requests, where to read metrics and logs."""

    cell: Cell
    base_url: str
    served_model: str
    servers: dict[str, ServerInfo] = field(default_factory=dict)
    started: bool = False
    ready_seconds: float | None = None
    failure: str | None = None

    def server(self, role: str) -> ServerInfo | None:
        """A server by role."""
        return self.servers.get(role)

    @property
    def engine_roles(self) -> list[str]:
        """Roles that run vLLM engines (not the router)."""
        return [r for r in self.servers if r != "router"]


class Target(Protocol):
    """Deploys cells and tears them down."""

    kind: str

    def deploy(self, cell: Cell, log_dir: Path) -> AbstractContextManager[Deployment]:
        """Start (or find) the cell. The context manager's exit stops whatever was started."""
        ...

    def describe(self, cell: Cell) -> dict[str, object]:
        """What deploy would do (commands, env, manifests), for --dry-run; starts nothing."""
        ...


def iter_servers(deployment: Deployment) -> Iterator[ServerInfo]:
    """Servers in a stable order."""
    for role in ("aggregated", "prefill", "decode", "router"):
        if role in deployment.servers:
            yield deployment.servers[role]
