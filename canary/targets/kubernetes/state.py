"""What a cell's pods say about it, read from plain Pod JSON: pure logic, no API access.

`pod_state` summarises one Pod object (phase, readiness and its time, restarts, the last
termination, waiting reasons, scheduling, node and env); `judge_cell` decides a cell's status
from its pods (missing, crash-looping, failed, starting or ready) and the role to blame;
`ContainerLog` joins a container's startup record and its tail. canary.targets.kubernetes.target polls
the API and streams the logs, then hands the JSON to these.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from canary.plan.kube_names import LABEL_LWS_ROLE, LABEL_ROLE

ENGINE_ROLES_PD = ("prefill", "decode")
ROLES_PD = ("prefill", "decode", "router")
ROLES_AGGREGATED = ("aggregated",)
ROLE_CONTAINER = {"router": "router"}
DEFAULT_CONTAINER = "vllm"

# Waiting reasons that do not resolve by themselves: report the cell failed at once.
FATAL_WAITING_REASONS = frozenset(
    {"ErrImagePull", "ImagePullBackOff", "InvalidImageName", "CreateContainerConfigError", "CreateContainerError"}
)
CRASH_WAITING_REASON = "CrashLoopBackOff"

CellStatus = Literal["ready", "starting", "crash-looping", "failed", "missing"]
TERMINAL_STATUSES: frozenset[str] = frozenset({"crash-looping", "failed"})


@dataclass
class PodState:
    """What one pod of a role says about itself."""

    name: str
    role: str
    phase: str
    ready: bool
    created: datetime | None
    ready_since: datetime | None
    restarts: int
    waiting_reason: str | None
    waiting_message: str | None
    last_termination_reason: str | None
    last_exit_code: int | None
    unschedulable: str | None
    container: str
    leader: bool = True
    node: str | None = None
    env: dict[str, str] = field(default_factory=dict)

    @property
    def ready_seconds(self) -> float | None:
        """Seconds from creation to the current Ready condition (None while not ready)."""
        if not self.ready or self.created is None or self.ready_since is None:
            return None
        return max(0.0, (self.ready_since - self.created).total_seconds())

    @property
    def crash_looping(self) -> bool:
        """Restarting after crashes (CrashLoopBackOff, or restarted and not ready)."""
        if self.waiting_reason == CRASH_WAITING_REASON:
            return True
        return self.restarts > 0 and not self.ready and self.last_termination_reason is not None

    def describe(self) -> str:
        """One line for reports."""
        parts = [f"{self.name}: {self.phase}", "ready" if self.ready else "not ready"]
        if self.restarts:
            parts.append(f"{self.restarts} restart(s)")
        if self.last_termination_reason:
            code = f" (exit {self.last_exit_code})" if self.last_exit_code is not None else ""
            parts.append(f"last terminated: {self.last_termination_reason}{code}")
        if self.waiting_reason:
            parts.append(f"waiting: {self.waiting_reason}")
        if self.unschedulable:
            parts.append(f"unschedulable: {self.unschedulable}")
        return ", ".join(parts)


@dataclass
class CellDeployment:
    """A cell as found in the cluster."""

    cell_id: str
    k8s_name: str
    topology: str
    status: CellStatus
    detail: str
    failed_role: str | None = None
    pods: dict[str, list[PodState]] = field(default_factory=dict)
    ready_seconds: float | None = None
    restarts: int = 0
    termination_reason: str | None = None
    logs: dict[str, str] = field(default_factory=dict)
    startup_logs: dict[str, str] = field(default_factory=dict)
    base_url: str | None = None
    role_urls: dict[str, str] = field(default_factory=dict)
    metrics_urls: dict[str, str] = field(default_factory=dict)

    @property
    def ready(self) -> bool:
        """Every role has a Ready pod."""
        return self.status == "ready"

    def failure_text(self) -> str | None:
        """None when ready; else "<role> <status>: <detail>" (the role first, as the startup
        check expects, so it reads that role's log first)."""
        if self.ready:
            return None
        prefix = f"{self.failed_role} " if self.failed_role else ""
        return f"{prefix}{self.status}: {self.detail}"

    def role_created_at(self, role: str) -> float | None:
        """Creation time (epoch seconds) of a role's leader pod: the launch its start is measured from."""
        leaders = [p for p in self.pods.get(role, []) if p.leader] or self.pods.get(role, [])
        created = [p.created.timestamp() for p in leaders if p.created is not None]
        return min(created) if created else None

    def role_ready_seconds(self, role: str) -> float | None:
        """Creation-to-Ready seconds of a role's leader pod."""
        leaders = [p for p in self.pods.get(role, []) if p.leader] or self.pods.get(role, [])
        seconds = [s for s in (p.ready_seconds for p in leaders) if s is not None]
        return max(seconds) if seconds else None


@dataclass
class ContainerLog:
    """One container instance's log: its startup record (from the start of the log) and its tail."""

    startup: str
    tail: str = ""
    complete: bool = False
    startup_complete: bool = False

    def text(self) -> str:
        """The startup record, then the tail lines it does not already hold."""
        if self.complete or not self.tail:
            return self.startup
        head = self.startup.splitlines()
        tail = self.tail.splitlines()
        overlap = _overlap(head, tail)
        rest = tail[overlap:]
        if not rest:
            return self.startup
        gap = "" if overlap else f"===== ... last {len(tail)} lines of the log (the lines between are not kept) =====\n"
        return _ended(self.startup) + gap + "\n".join(rest) + "\n"


def _ended(text: str) -> str:
    return text if not text or text.endswith("\n") else text + "\n"


def _overlap(head: list[str], tail: list[str]) -> int:
    """The most leading lines of `tail` that are also the last lines of `head` (a short log's tail
    starts inside the startup record). Lines carry no sequence number, so a tail that merely begins
    with exact repeats of the record's last lines is taken as contiguous (the text is the same)."""
    if not head or not tail:
        return 0
    for length in range(min(len(head), len(tail)), 0, -1):
        start = len(head) - length
        if head[start] == tail[0] and head[start:] == tail[:length]:
            return length
    return 0


def expected_roles(topology: str) -> tuple[str, ...]:
    """Roles the chart deploys for a topology."""
    return ROLES_AGGREGATED if topology == "aggregated" else ROLES_PD


def parse_time(text: object) -> datetime | None:
    """An RFC 3339 timestamp from the API (None if absent or malformed)."""
    if not isinstance(text, str) or not text:
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None


def as_mapping(value: object) -> Mapping[str, Any]:
    """A JSON object as a mapping ({} for anything else)."""
    return value if isinstance(value, Mapping) else {}


def as_list(value: object) -> list[Any]:
    """A JSON array as a list ([] for anything else)."""
    return value if isinstance(value, list) else []


def pod_state(pod: Mapping[str, Any]) -> PodState:
    """Summarise a Pod object (plain JSON)."""
    meta = as_mapping(pod.get("metadata"))
    labels = as_mapping(meta.get("labels"))
    status = as_mapping(pod.get("status"))
    role = str(labels.get(LABEL_ROLE, ""))
    container_name = ROLE_CONTAINER.get(role, DEFAULT_CONTAINER)
    spec_containers = [as_mapping(c) for c in as_list(as_mapping(pod.get("spec")).get("containers"))]
    if spec_containers and not any(c.get("name") == container_name for c in spec_containers):
        container_name = str(spec_containers[0].get("name", container_name))
    own_spec = next((c for c in spec_containers if c.get("name") == container_name), {})
    env = {
        str(e["name"]): str(e["value"])
        for e in (as_mapping(item) for item in as_list(own_spec.get("env")))
        if "name" in e and isinstance(e.get("value"), str)
    }
    node = as_mapping(pod.get("spec")).get("nodeName")

    ready, ready_since, unschedulable = False, None, None
    for condition in (as_mapping(c) for c in as_list(status.get("conditions"))):
        if condition.get("type") == "Ready" and condition.get("status") == "True":
            ready, ready_since = True, parse_time(condition.get("lastTransitionTime"))
        if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
            unschedulable = str(condition.get("message") or condition.get("reason") or "not scheduled")

    statuses = [as_mapping(s) for s in as_list(status.get("containerStatuses"))]
    own = next((s for s in statuses if s.get("name") == container_name), statuses[0] if statuses else {})
    waiting = as_mapping(as_mapping(own.get("state")).get("waiting"))
    terminated_now = as_mapping(as_mapping(own.get("state")).get("terminated"))
    last = as_mapping(as_mapping(own.get("lastState")).get("terminated")) or terminated_now
    exit_code = last.get("exitCode")
    return PodState(
        name=str(meta.get("name", "")),
        role=role,
        phase=str(status.get("phase", "Unknown")),
        ready=ready,
        created=parse_time(meta.get("creationTimestamp")),
        ready_since=ready_since,
        restarts=sum(int(s.get("restartCount", 0) or 0) for s in statuses),
        waiting_reason=str(waiting["reason"]) if waiting.get("reason") else None,
        waiting_message=str(waiting["message"]) if waiting.get("message") else None,
        last_termination_reason=str(last["reason"]) if last.get("reason") else None,
        last_exit_code=int(exit_code) if isinstance(exit_code, int) else None,
        unschedulable=unschedulable,
        container=container_name,
        leader=labels.get(LABEL_LWS_ROLE, "leader") == "leader",
        node=str(node) if node else None,
        env=env,
    )


def judge_cell(topology: str, pods: Mapping[str, list[PodState]]) -> tuple[CellStatus, str, str | None]:
    """The cell's status from its pods, a one-line reason, and the first role to blame (if any)."""
    roles = expected_roles(topology)
    missing = [role for role in roles if not pods.get(role)]
    if missing:
        return "missing", f"no pods for role(s) {', '.join(missing)}", missing[0]
    all_pods = [pod for role in roles for pod in pods[role]]
    crashing = [p for p in all_pods if p.crash_looping]
    if crashing:
        return "crash-looping", "; ".join(p.describe() for p in crashing), crashing[0].role
    fatal = [p for p in all_pods if p.waiting_reason in FATAL_WAITING_REASONS or p.phase == "Failed"]
    if fatal:
        detail = "; ".join(p.describe() + (f" ({p.waiting_message})" if p.waiting_message else "") for p in fatal)
        return "failed", detail, fatal[0].role
    not_ready = [p for p in all_pods if not p.ready]
    if not_ready:
        return "starting", "; ".join(p.describe() for p in not_ready), not_ready[0].role
    return "ready", f"{len(all_pods)} pod(s) ready", None


def joined_logs(chunks: list[str]) -> str:
    """Log sections joined into one text, each ending with a newline."""
    return "\n".join(chunk if chunk.endswith("\n") else chunk + "\n" for chunk in chunks)
