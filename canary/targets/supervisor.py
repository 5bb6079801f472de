"""Supervising a cell's server processes, whatever runs them: start, wait until ready, watch, freeze, stop.

A target hands the supervisor `Launch`es: each planned server (canary.targets.engine_plan) with the host
command that runs it, the plan's own command for a local process or a container CLI's attached `run`
(canary.targets.container.target). Every launch becomes one process group on this machine
(canary.targets.processes) with its log in the cell's log directory. Engines start together; the first
death, a fatal log line (canary.targets.signatures) or the startup deadline ends the wait; the router starts
once both engines of a P/D pair are ready. Once ready, the deployment's `exit_status` reports a server that
exited (canary.targets.liveness), and its helper threads can be moved to their cores (canary.targets.affinity).
Stopping stops the router first, then the engines, and records their exit codes.
"""

from __future__ import annotations

import shlex
import time
from dataclasses import dataclass
from pathlib import Path

from canary.config import CanaryConfig
from canary.paths import REPO_ROOT
from canary.targets import affinity, processes
from canary.targets.base import Deployment, ServerInfo
from canary.targets.engine_env import LAYOUT_DIR_ENV
from canary.targets.engine_plan import ServerPlan
from canary.targets.readiness import probe, wait_ready
from canary.targets.signatures import LogWatch

ROUTER_READY_MIN_S = 60.0
"""The router gets at least this long to come up, even when the engines used most of the deadline."""

Started = dict[str, processes.ManagedProcess]
"""role -> the process the supervisor started for it (emptied once stopped)."""


@dataclass(frozen=True)
class Launch:
    """One planned server as this machine starts it."""

    plan: ServerPlan
    argv: list[str]
    """The host command: the plan's own (a local process) or a container CLI's `run`."""
    env: dict[str, str]
    name: str | None = None
    """The container's name (None: a local process)."""


class Supervisor:
    """Starts, watches, freezes and stops the launches of a cell as process groups."""

    def __init__(self, config: CanaryConfig) -> None:
        self.host = config.target.local.host
        self.nice = config.target.local.nice
        self.startup = config.checks.startup

    def _url(self, port: str) -> str:
        return f"http://{self.host}:{port}"

    def start(
        self, launch: Launch, deployment: Deployment, started: Started, log_dir: Path
    ) -> processes.ManagedProcess:
        """Start one launch, logging to <role>.log, and record it as the deployment's server."""
        plan = launch.plan
        log_path = log_dir / f"{plan.role}.log"
        log_path.write_text(f"# canary: {shlex.join(launch.argv)}\n", encoding="utf-8")
        launched_at = time.time()
        ports = [int(p) for p in [plan.port, plan.metrics_port, *plan.side_ports] if p is not None]
        proc = processes.start(plan.role, launch.argv, launch.env, log_path, cwd=REPO_ROOT, ports=ports, nice=self.nice)
        started[plan.role] = proc
        deployment.servers[plan.role] = ServerInfo(
            role=plan.role,
            base_url=self._url(plan.port),
            metrics_url=f"{self._url(plan.metrics_port or plan.port)}/metrics",
            log_path=log_path,
            pid=proc.pid,
            launched_at=launched_at,
            layout_dir=Path(plan.env[LAYOUT_DIR_ENV]) if LAYOUT_DIR_ENV in plan.env else None,
        )
        return proc

    def bring_up(self, deployment: Deployment, launches: list[Launch], started: Started, log_dir: Path) -> None:
        """Start the engines, wait for them, then the router; the deployment says whether all came up."""
        t0 = time.monotonic()
        deadline = t0 + self.startup.timeout_s
        for launch in launches:  # prefill and decode start together
            if launch.plan.is_engine:
                self.start(launch, deployment, started, log_dir)
        failure = self._wait_engines(deployment, started, deadline)
        router = next((launch for launch in launches if not launch.plan.is_engine), None)
        if failure is None and router is not None:
            failure = self._bring_up_router(router, deployment, started, log_dir, deadline)
        front = "router" if router is not None else "aggregated"
        deployment.base_url = deployment.servers[front].base_url if front in deployment.servers else ""
        if failure is None:
            deployment.started = True
            deployment.ready_seconds = round(time.monotonic() - t0, 3)
        else:
            deployment.failure = failure

    def _bring_up_router(
        self, router: Launch, deployment: Deployment, started: Started, log_dir: Path, deadline: float
    ) -> str | None:
        proc = self.start(router, deployment, started, log_dir)
        router_deadline = max(deadline, time.monotonic() + ROUTER_READY_MIN_S)
        result = wait_ready(
            self._url(router.plan.port),
            deployment.served_model,
            router_deadline,
            interval_s=self.startup.poll_interval_s,
            gone=lambda: not proc.alive(),
        )
        if result.ready:
            deployment.servers["router"].ready_seconds = round(proc.elapsed(), 3)
            return None
        return self._not_ready("router", proc, result.detail, router_deadline - proc.started_at)

    def _wait_engines(self, deployment: Deployment, started: Started, deadline: float) -> str | None:
        """Poll every engine until all are ready; the first death or the deadline ends the wait."""
        pending = dict(started)
        watches = {role: LogWatch(proc.log_path) for role, proc in started.items()}
        while pending:
            for role, proc in list(pending.items()):
                if not proc.alive():
                    return self._not_ready(role, proc, "process exited", 0.0)
                fatal = watches[role].poll()
                if fatal is not None:
                    signature, line = fatal
                    return (
                        f"{role} cannot become ready after {proc.elapsed():.1f} s: {signature.title} "
                        f"(its process lives on; log: {line.strip()})"
                    )
                result = probe(deployment.servers[role].base_url, deployment.served_model)
                if result.ready:
                    deployment.servers[role].ready_seconds = round(proc.elapsed(), 3)
                    proc.remember_descendants()
                    del pending[role]
                elif time.monotonic() >= deadline:
                    return self._not_ready(role, proc, result.detail, deadline - proc.started_at)
            if pending:
                time.sleep(self.startup.poll_interval_s)
        return None

    @staticmethod
    def _not_ready(role: str, proc: processes.ManagedProcess, detail: str, timeout_s: float) -> str:
        code = proc.exit_code()
        if code is not None:
            return f"{role} exited with code {code} after {proc.elapsed():.1f} s before it was ready"
        return f"{role} not ready after {timeout_s:.0f} s (startup timeout; last probe: {detail})"

    @staticmethod
    def watch(deployment: Deployment, started: Started) -> None:
        """Let the deployment report a server that exited (canary.targets.liveness): a role's exit status
        once its process has exited; None while it runs, and once the supervisor stopped it."""
        deployment.exit_status = lambda role: started[role].exit_code() if role in started else None

    @staticmethod
    def place_helpers(deployment: Deployment, cpus: tuple[int, ...]) -> None:
        """Move the ready cell's helper threads to their cores; the evidence says what moved or why not."""
        problem = affinity.check_cpus(cpus)
        if problem is not None:
            deployment.evidence["helper_cpus"] = {"cpus": list(cpus), "skipped": problem}
            return
        report = affinity.pin_helpers([s.pid for s in deployment.servers.values() if s.pid is not None], cpus)
        deployment.helper_cpus = cpus
        deployment.evidence["helper_cpus"] = report.to_json()

    @staticmethod
    def freeze(deployment: Deployment) -> bool:
        """SIGSTOP every server of a started deployment (its process group and the descendants that left
        it); False when none of its servers is ours and alive."""
        procs = _processes_of(deployment)
        if not deployment.started or not procs:
            return False
        processes.pause(procs)
        return True

    @staticmethod
    def thaw(deployment: Deployment) -> None:
        """SIGCONT what `freeze` stopped."""
        processes.resume(_processes_of(deployment))

    @staticmethod
    def stop(deployment: Deployment, started: Started) -> None:
        """Stop the router first, then the engines; record exit codes. Stopping twice is a no-op."""
        router = [p for role, p in started.items() if role == "router"]
        engines = [p for role, p in started.items() if role != "router"]
        try:
            processes.stop(router, grace_s=5.0)
        finally:
            processes.stop(engines)
            for role, proc in started.items():
                if role in deployment.servers:
                    deployment.servers[role].exit_code = proc.exit_code()
            started.clear()


def _processes_of(deployment: Deployment) -> list[processes.ManagedProcess]:
    pids = {s.pid for s in deployment.servers.values() if s.pid is not None}
    return [p for p in processes.live_processes() if p.pid in pids and p.alive()]
