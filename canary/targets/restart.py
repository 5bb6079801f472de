"""Restarting one role of a started cell while the others keep serving (Deployment.restart_role).

The lifecycle check (canary/checks/lifecycle) restarts a P/D pair's prefill server and judges that decode
lives through it. Here, for a target whose servers are process groups on this machine: the role's group is
stopped (SIGTERM, then SIGKILL after the grace), and the same launch (command, environment, ports, cores) is
started again, its output appended to the role's log after a marker line, and waited for like at startup
(/health and /v1/models, until `timeout_s`; a process that exits ends the wait). The new process replaces
the old one in the supervisor's records, so the deployment's liveness (exit_status), stop and freeze follow
it; helper threads are moved to the cell's helper cores again where the target had placed them.

Call it from the thread that runs the cell (the runner's, a check's own): the new server dies with the thread
that started it (canary.targets.processes sets PR_SET_PDEATHSIG, which follows the starting thread), so a
restart from a short-lived helper thread is killed as that thread ends (measured: SIGKILLed one second after
it was ready).
"""

from __future__ import annotations

import shlex
import time
from collections.abc import Sequence

from canary.errors import CanaryError
from canary.paths import REPO_ROOT
from canary.targets import affinity, processes
from canary.targets.base import Deployment, RestartRole
from canary.targets.readiness import wait_ready
from canary.targets.supervisor import Launch, Started

VLLM_BIND_ENV = "VLLM_CPU_OMP_THREADS_BIND"
RESTART_MARKER = "# canary: restarted"
"""The line a restart appends to the role's log before the new process writes to it."""


def restart_role(
    deployment: Deployment,
    launches: Sequence[Launch],
    started: Started,
    role: str,
    timeout_s: float,
    *,
    nice: int = 0,
    interval_s: float = 0.5,
) -> str | None:
    """Stop the role's server and start its launch again; None once ready, else why not."""
    launch = next((item for item in launches if item.plan.role == role), None)
    server = deployment.servers.get(role)
    if launch is None or server is None or server.log_path is None:
        return f"{role} was not launched by this deployment"
    old = started.get(role)
    if old is not None:
        try:
            processes.stop([old])
        except CanaryError as exc:
            return f"the old {role} server did not stop: {exc}"
        server.exit_code = old.exit_code()
    with server.log_path.open("a", encoding="utf-8") as log:
        log.write(f"\n{RESTART_MARKER} {role} at {time.strftime('%H:%M:%S')}: {shlex.join(launch.argv)}\n")
    plan = launch.plan
    ports = [int(p) for p in [plan.port, plan.metrics_port, *plan.side_ports] if p is not None]
    try:
        proc = processes.start(role, launch.argv, launch.env, server.log_path, cwd=REPO_ROOT, ports=ports, nice=nice)
    except CanaryError as exc:
        return str(exc)
    started[role] = proc
    server.pid, server.launched_at, server.exit_code, server.ready_seconds = proc.pid, time.time(), None, None
    result = wait_ready(
        server.base_url,
        deployment.served_model,
        time.monotonic() + timeout_s,
        interval_s=interval_s,
        gone=lambda: not proc.alive(),
    )
    if not result.ready:
        code = proc.exit_code()
        how = f"exited with code {code}" if code is not None else f"not ready after {timeout_s:.0f} s"
        return f"restarted {role} {how} ({result.detail})"
    server.ready_seconds = round(proc.elapsed(), 3)
    proc.remember_descendants()
    if deployment.helper_cpus is not None:
        affinity.pin_helpers([proc.pid], deployment.helper_cpus)
    bind_engine_core(deployment, launch)
    return None


def bind_engine_core(deployment: Deployment, launch: Launch) -> None:
    """A CPU engine of several ranks (its bind has one entry per rank, `0|0`): its engine core process goes
    to the engine's own cores (affinity.pin_engine_core); what moved is in the deployment's evidence."""
    bind = launch.env.get(VLLM_BIND_ENV, "")
    server = deployment.servers.get(launch.plan.role)
    cpus = affinity.bind_cores(bind) if "|" in bind else ()
    if not cpus or server is None or server.pid is None:
        return
    moved = affinity.pin_engine_core(server.pid, cpus)
    binds = deployment.evidence.setdefault("engine_core_binds", {})
    if isinstance(binds, dict):
        binds[launch.plan.role] = {"cpus": list(cpus), "moved": moved}


def restarter(deployment: Deployment, launches: Sequence[Launch], started: Started, *, nice: int = 0) -> RestartRole:
    """Deployment.restart_role for a deployment whose servers are the supervisor's `started` processes."""

    def restart(role: str, timeout_s: float) -> str | None:
        return restart_role(deployment, launches, started, role, timeout_s, nice=nice)

    return restart
