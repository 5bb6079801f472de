"""canary.targets.kubernetes.state: a cell's status from plain Pod JSON, no API (the k8s tests use kmock)."""

from __future__ import annotations

from typing import Any

from canary.plan.kube_names import LABEL_LWS_ROLE, LABEL_ROLE
from canary.targets.kubernetes.state import ContainerLog, judge_cell, pod_state


def _pod(name: str, role: str, **status: Any) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "labels": {LABEL_ROLE: role},
            "creationTimestamp": "2026-11-30T10:00:00Z",
        },
        "spec": {"containers": [{"name": "vllm", "env": [{"name": "UCX_TLS", "value": "tcp"}]}], "nodeName": "n1"},
        "status": {"phase": "Running", **status},
    }


READY = {"conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "2026-11-30T10:01:35Z"}]}
CRASHING = {
    "containerStatuses": [
        {
            "name": "vllm",
            "restartCount": 3,
            "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 40s"}},
            "lastState": {"terminated": {"reason": "Error", "exitCode": 1}},
        }
    ]
}
PULL_FAILS = {"containerStatuses": [{"name": "vllm", "state": {"waiting": {"reason": "ImagePullBackOff"}}}]}


def test_pod_state_reads_readiness_restarts_and_the_last_termination() -> None:
    ready = pod_state(_pod("p-1", "prefill", **READY))
    assert ready.ready and ready.ready_seconds == 95.0 and ready.node == "n1" and ready.env == {"UCX_TLS": "tcp"}
    assert ready.container == "vllm" and ready.leader
    crashing = pod_state(_pod("d-1", "decode", **CRASHING))
    assert crashing.crash_looping and not crashing.ready and crashing.ready_seconds is None
    assert (crashing.restarts, crashing.last_termination_reason, crashing.last_exit_code) == (3, "Error", 1)
    worker = _pod("d-2", "decode")
    worker["metadata"]["labels"][LABEL_LWS_ROLE] = "worker"
    assert not pod_state(worker).leader
    assert pod_state({"metadata": "not a mapping"}).phase == "Unknown"  # malformed JSON reads as nothing


def test_judge_cell_blames_the_first_role_in_order_of_severity() -> None:
    def pods(**roles: dict[str, Any]) -> dict[str, list[Any]]:
        return {role: [pod_state(_pod(f"{role}-1", role, **status))] for role, status in roles.items()}

    assert judge_cell("pd-nixl", pods(prefill=READY, decode=READY))[0::2] == ("missing", "router")
    status, detail, role = judge_cell("pd-nixl", pods(prefill=READY, decode=CRASHING, router=PULL_FAILS))
    assert (status, role) == ("crash-looping", "decode") and "3 restart(s)" in detail
    assert judge_cell("pd-nixl", pods(prefill=READY, decode=READY, router=PULL_FAILS))[0::2] == ("failed", "router")
    assert judge_cell("aggregated", pods(aggregated={}))[0::2] == ("starting", "aggregated")
    assert judge_cell("aggregated", pods(aggregated=READY)) == ("ready", "1 pod(s) ready", None)


def test_a_container_log_joins_its_startup_record_and_tail_without_repeating_lines() -> None:
    overlapping = ContainerLog(startup="a\nb\nc\n", tail="b\nc\nd\n")
    assert overlapping.text() == "a\nb\nc\nd\n"
    apart = ContainerLog(startup="a\nb\n", tail="x\ny\n")
    assert apart.text().startswith("a\nb\n===== ... last 2 lines") and apart.text().endswith("x\ny\n")
    assert ContainerLog(startup="a\n", tail="zzz\n", complete=True).text() == "a\n"
