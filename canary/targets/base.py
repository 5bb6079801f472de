"""What a target gives the checks: a deployed cell's URLs, metrics endpoints, logs and startup facts.

Targets are chosen by `target.kind` from a small registry (`canary.targets.create_target`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from canary.plan.cell import Cell
from canary.targets.engine_site.layout_probe import LOG_PREFIX as LAYOUT_LOG_PREFIX
from canary.targets.liveness import EngineDeath, ExitStatus
from canary.targets.liveness import deaths as find_deaths

RestartRole = Callable[[str, float], str | None]
"""(role, timeout_s) -> None once the role's server is back and ready, else why not (in words)."""


@dataclass
class ServerInfo:
    """One server process / pod of a cell (role: aggregated, prefill, decode, router)."""

    role: str
    base_url: str
    metrics_url: str | None = None
    log_path: Path | None = None
    ready_seconds: float | None = None
    launched_at: float | None = None
    """Wall-clock time (epoch seconds) the process or container was started, where known."""
    pid: int | None = None
    exit_code: int | None = None
    layout_dir: Path | None = None

    def log_text(self) -> str:
        """The captured log (empty if none)."""
        if self.log_path is None or not self.log_path.exists():
            return ""
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    def layout(self) -> dict[str, Any] | None:
        """The engine's layout probe record (canary/targets/engine_site/layout_probe.py), or None.

        Each engine process that allocated a KV cache writes one `layout.<pid>.json` into
        layout_dir; the record of the first (lowest pid) is returned, the others (tensor-parallel
        workers) are listed under `workers`. A file that is not valid JSON is reported in the record."""
        records: list[dict[str, Any]] = []
        if self.layout_dir is not None and self.layout_dir.is_dir():
            for path in sorted(self.layout_dir.glob("layout.*.json")):
                try:
                    loaded = json.loads(path.read_text(encoding="utf-8"))
                except (OSError, ValueError) as exc:
                    loaded = {"error": f"{path.name}: {exc}"}
                if isinstance(loaded, dict):
                    records.append(loaded)
        else:
            records = layouts_from_log(self.log_text())
        if not records:
            return None
        with_cache = [r for r in records if r.get("kv_cache_groups")] or records
        first = dict(with_cache[0])
        if len(with_cache) > 1:
            first["workers"] = len(with_cache)
        return first


def layouts_from_log(text: str) -> list[dict[str, Any]]:
    """The last layout record printed by each engine process in a log, by pid."""
    by_pid: dict[object, dict[str, Any]] = {}
    for line in text.splitlines():
        at = line.find(LAYOUT_LOG_PREFIX)
        if at < 0:
            continue
        try:
            record = json.loads(line[at + len(LAYOUT_LOG_PREFIX) :])
        except ValueError:
            continue
        if isinstance(record, dict):
            by_pid[record.get("pid")] = record
    return [by_pid[pid] for pid in sorted(by_pid, key=str)]


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
    helper_cpus: tuple[int, ...] | None = None
    """The cores the target moved the cell's helper processes to (canary.targets.affinity); a load client
    on this machine belongs there too. None: nothing was placed."""
    evidence: dict[str, object] = field(default_factory=dict)
    """What the target observed about how the cell was deployed (Kubernetes: NIXL placement and
    transport), for checks and reports; JSON-serialisable."""
    exit_status: ExitStatus | None = None
    """Set by a target that watches its servers (canary.targets.liveness): a role's exit status once it
    has exited, None while it runs. None here: this target cannot tell (an endpoint, a cluster)."""
    restart_role: RestartRole | None = None
    """Set by a target that can restart one role of a started cell while the others keep running (the
    local target): stop that role's server, start it again with the same command, ports and cores, and
    wait until it is ready. None: this target cannot (a check that needs it reports `unsupported`)."""

    def restart(self, role: str, timeout_s: float) -> str | None:
        """Restart one role's server (see restart_role): None once it is back and ready, else why not.
        A target that cannot restart a role raises NotImplementedError (check `can_restart` first)."""
        if self.restart_role is None:
            raise NotImplementedError("this target cannot restart one role of a deployment")
        if role not in self.servers or role == "router":
            return f"no {role} engine in this deployment (roles: {', '.join(self.engine_roles) or 'none'})"
        return self.restart_role(role, timeout_s)

    @property
    def can_restart(self) -> bool:
        """Whether the target can restart one role of this deployment (restart_role)."""
        return self.restart_role is not None

    def deaths(self) -> list[EngineDeath]:
        """The servers that have exited since the cell started (empty where the target cannot tell)."""
        if self.exit_status is None or not self.started:
            return []
        return find_deaths({role: s.log_path for role, s in self.servers.items()}, self.exit_status)

    def server(self, role: str) -> ServerInfo | None:
        """A server by role."""
        return self.servers.get(role)

    @property
    def engine_roles(self) -> list[str]:
        """Roles that run vLLM engines (not the router)."""
        return [r for r in self.servers if r != "router"]


class Target(Protocol):
    """Deploys cells and tears them down. A target that can tell before its first deploy that a planned
    cell cannot start also implements Preflight (canary.run.cells.preflight calls it)."""

    kind: str

    def deploy(self, cell: Cell, log_dir: Path) -> AbstractContextManager[Deployment]:
        """Start (or find) the cell. The context manager's exit stops whatever was started."""
        ...

    def describe(self, cell: Cell) -> dict[str, object]:
        """What deploy would do (commands, env, manifests), for --dry-run; starts nothing."""
        ...


@runtime_checkable
class Preflight(Protocol):
    """A target that checks the whole plan before its first cell starts (local: GPUs, weights, a built
    builtin model; container: those, the CLI and every image)."""

    def preflight(self, cells: Iterable[Cell], *, dry_run: bool = False) -> list[str]:
        """Raise a CanaryError when a planned cell cannot start here; return warnings (a dry run's only)."""
        ...


@runtime_checkable
class Freezes(Protocol):
    """A target that can freeze a started deployment and thaw it later (the local target: SIGSTOP and
    SIGCONT to its process groups; the container target: `pause` and `unpause`). The runner keeps a
    baseline cell's deployment frozen until the candidate's paired check needs it (canary.run.held),
    instead of deploying it again."""

    def freeze(self, deployment: Deployment) -> bool:
        """Freeze a started deployment's servers (they keep memory and ports, take no CPU); False when
        this target cannot freeze it (it then runs on as it was)."""
        ...

    def thaw(self, deployment: Deployment) -> None:
        """Continue a frozen deployment's servers."""
        ...
