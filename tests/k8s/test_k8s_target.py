"""The Kubernetes target against kmock (a real HTTP Kubernetes API emulator, the only stand-in):
ready cells, a crash-looping decode whose previous log holds the KV-view overrun signature,
missing cells, image pull failures, waiting with deadlines, RBAC errors, kubeconfig loading."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from kmock_cluster import KmockCluster, kmock_cluster

from canary.checks.base import CheckContext
from canary.checks.startup.check import startup_check
from canary.config import CanaryConfig
from canary.config.load import validate_config
from canary.plan.cell import Cell
from canary.plan.matrix import plan
from canary.targets.kubernetes.target import KubernetesTarget, KubernetesTargetError
from canary.targets.signatures import classify

NAMESPACE = "gpu"
RELEASE = "vllm-pd"
T0 = datetime(2026, 11, 29, 10, 0, 0, tzinfo=UTC)
OVERRUN = (
    "RuntimeError: setStorage: sizes [512, 2, 256, 1, 128], strides [65536, 32768, 128, 128, 1], "
    "storage offset 0, and itemsize 1 requiring a storage size of 33554432 are out of bounds for "
    "storage of size 262144"
)
STARTUP_OK = (
    "INFO Using FLASHINFER attention backend out of potential backends: ['FLASHINFER']\n"
    "INFO GPU KV cache size: 1048576 tokens\n"
    "INFO Application startup complete.\n"
)

CONFIG: dict[str, Any] = {
    "version": 1,
    "name": "kmock",
    "platform": "sm90",
    "models": [{"name": "qwen3-0-6b", "source": "Qwen/Qwen3-0.6B"}],
    "images": {"baseline": {"ref": "vllm/vllm-openai:v0.33.0"}},
    "matrix": {
        "attention_backends": ["FLASHINFER"],
        "prefill_block_sizes": [128],
        "decode_block_sizes": [64],
        "runners": ["v2"],
        "topologies": ["aggregated", "pd-nixl"],
    },
    "target": {"kind": "kubernetes", "kubernetes": {"namespace": NAMESPACE, "release": RELEASE, "ready_timeout_s": 30}},
}


def _config(**kubernetes: Any) -> CanaryConfig:
    data = yaml.safe_load(yaml.safe_dump(CONFIG))
    data["target"]["kubernetes"].update(kubernetes)
    return validate_config(data, "kmock test config")


@pytest.fixture()
def cluster() -> Iterator[KmockCluster]:
    with kmock_cluster() as running:
        running.declare("v1/pods", "Pod")
        running.declare("v1/services", "Service")
        yield running


@pytest.fixture()
def cells() -> dict[str, Cell]:
    planned = plan(_config()).planned()
    pd = next(c for c in planned if c.topology == "pd-nixl" and c.prefill_block_size == 128)
    agg = next(c for c in planned if c.topology == "aggregated" and c.prefill_block_size == 128)
    return {"pd": pd, "agg": agg}


def target_for(cluster: KmockCluster, **kwargs: Any) -> KubernetesTarget:
    from kubernetes import client

    configuration = client.Configuration()
    configuration.host = cluster.url
    api = client.CoreV1Api(client.ApiClient(configuration))
    config = kwargs.pop("config", None) or _config()
    return KubernetesTarget(config, api=api, **kwargs)


def _ts(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def pod(
    name: str,
    cell: Cell,
    role: str,
    *,
    ready_after: float | None = 60.0,
    restarts: int = 0,
    waiting: tuple[str, str] | None = None,
    last_terminated: tuple[str, int] | None = None,
    release: str = RELEASE,
    run: str = "kmock",
    phase: str = "Running",
) -> dict[str, Any]:
    """A Pod as the kubelet reports it."""
    container = "router" if role == "router" else "vllm"
    conditions = [{"type": "PodScheduled", "status": "True", "lastTransitionTime": _ts(T0)}]
    ready = ready_after is not None and waiting is None
    conditions.append(
        {
            "type": "Ready",
            "status": "True" if ready else "False",
            "lastTransitionTime": _ts(T0 + timedelta(seconds=ready_after or 0)),
        }
    )
    state: dict[str, Any] = {"running": {"startedAt": _ts(T0)}}
    if waiting:
        state = {"waiting": {"reason": waiting[0], "message": waiting[1]}}
    status: dict[str, Any] = {
        "name": container,
        "ready": ready,
        "restartCount": restarts,
        "state": state,
        "image": cell.image_ref,
        "imageID": "",
        "started": ready,
    }
    if last_terminated:
        status["lastState"] = {"terminated": {"reason": last_terminated[0], "exitCode": last_terminated[1]}}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": NAMESPACE,
            "creationTimestamp": _ts(T0),
            "labels": {
                "app.kubernetes.io/name": "vllm-pd",
                "app.kubernetes.io/instance": release,
                "canary.vllm.dev/run": run,
                "canary.vllm.dev/cell": cell.k8s_name,
                "canary.vllm.dev/role": role,
            },
            "annotations": {"canary.vllm.dev/cell-id": cell.id},
        },
        "spec": {"containers": [{"name": container, "image": cell.image_ref}]},
        "status": {"phase": phase, "conditions": conditions, "containerStatuses": [status]},
    }


def service(cell: Cell, role: str, *, metrics: bool = False) -> dict[str, Any]:
    ports = [{"name": "http", "port": 8000, "targetPort": "http", "protocol": "TCP"}]
    if metrics:
        ports.append({"name": "metrics", "port": 29000, "targetPort": "metrics", "protocol": "TCP"})
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": f"{cell.k8s_name}-{role}",
            "namespace": NAMESPACE,
            "labels": {
                "app.kubernetes.io/name": "vllm-pd",
                "app.kubernetes.io/instance": RELEASE,
                "canary.vllm.dev/run": "kmock",
                "canary.vllm.dev/cell": cell.k8s_name,
                "canary.vllm.dev/role": role,
            },
        },
        "spec": {"ports": ports, "selector": {"canary.vllm.dev/cell": cell.k8s_name, "canary.vllm.dev/role": role}},
    }


def deploy_pd(cluster: KmockCluster, cell: Cell, *, decode: dict[str, Any] | None = None) -> None:
    """A P/D cell: prefill ready after 95 s, decode after 120 s (or as given), router after 130 s."""
    cluster.put("v1/pods", NAMESPACE, pod(f"{cell.k8s_name}-prefill-7d9f-abcde", cell, "prefill", ready_after=95))
    decode = decode or pod(f"{cell.k8s_name}-decode-5c4b-fghij", cell, "decode", ready_after=120)
    cluster.put("v1/pods", NAMESPACE, decode)
    cluster.put("v1/pods", NAMESPACE, pod(f"{cell.k8s_name}-router-6b8c-klmno", cell, "router", ready_after=130))
    for role in ("prefill", "decode", "router"):
        cluster.put("v1/services", NAMESPACE, service(cell, role, metrics=role == "router"))
    cluster.log(NAMESPACE, f"{cell.k8s_name}-prefill-7d9f-abcde", "vllm", STARTUP_OK)
    cluster.log(NAMESPACE, f"{cell.k8s_name}-router-6b8c-klmno", "router", "router listening on 0.0.0.0:8000\n")


def test_ready_pd_cell(cluster: KmockCluster, cells: dict[str, Cell], tmp_path: Path) -> None:
    cell = cells["pd"]
    deploy_pd(cluster, cell)
    cluster.log(NAMESPACE, f"{cell.k8s_name}-decode-5c4b-fghij", "vllm", STARTUP_OK)
    target = target_for(cluster)
    found = target.discover([cell])[cell.id]
    assert found.status == "ready", found.detail
    assert found.ready_seconds == 120.0  # the slower engine role; the router is not an engine
    assert found.role_ready_seconds("prefill") == 95.0
    assert found.restarts == 0 and found.termination_reason is None
    assert found.base_url == f"http://{cell.k8s_name}-router.{NAMESPACE}.svc:8000"
    assert found.metrics_urls == {
        "prefill": f"http://{cell.k8s_name}-prefill.{NAMESPACE}.svc:8000/metrics",
        "decode": f"http://{cell.k8s_name}-decode.{NAMESPACE}.svc:8000/metrics",
        "router": f"http://{cell.k8s_name}-router.{NAMESPACE}.svc:29000/metrics",
    }
    assert "Application startup complete." in found.logs["decode"]
    assert "router listening" in found.logs["router"]

    with target.deploy(cell, tmp_path / "logs") as deployment:
        assert deployment.started and deployment.failure is None
        assert deployment.base_url == found.base_url
        assert deployment.served_model == "qwen3-0-6b"
        assert set(deployment.servers) == {"prefill", "decode", "router"}
        decode = deployment.servers["decode"]
        assert decode.ready_seconds == 120.0
        assert decode.metrics_url == found.metrics_urls["decode"]
        assert "GPU KV cache size" in decode.log_text()
    assert (tmp_path / "logs" / "prefill.log").read_text().count("Application startup complete.") == 1


def test_crash_looping_decode_keeps_the_failure_signature(
    cluster: KmockCluster, cells: dict[str, Cell], tmp_path: Path
) -> None:
    cell = cells["pd"]
    decode_pod = f"{cell.k8s_name}-decode-5c4b-fghij"
    crashing = pod(
        decode_pod,
        cell,
        "decode",
        restarts=4,
        waiting=("CrashLoopBackOff", "back-off 2m40s restarting"),
        last_terminated=("Error", 1),
    )
    deploy_pd(cluster, cell, decode=crashing)
    cluster.log(NAMESPACE, decode_pod, "vllm", "INFO Starting vLLM API server\n")
    cluster.log(
        NAMESPACE,
        decode_pod,
        "vllm",
        f"INFO Using FLASHINFER attention backend\nERROR Engine core initialization failed.\n{OVERRUN}\n",
        previous=True,
    )
    target = target_for(cluster)
    found = target.discover([cell])[cell.id]
    assert found.status == "crash-looping"
    assert "CrashLoopBackOff" in found.detail and "4 restart(s)" in found.detail
    assert found.restarts == 4
    assert found.termination_reason == "Error"
    assert OVERRUN in found.logs["decode"], "the classifier needs the previous instance's log"
    assert "previous instance (Error, exit 1)" in found.logs["decode"]
    assert found.ready_seconds is None

    with target.deploy(cell, tmp_path / "logs") as deployment:  # terminal: no waiting for the deadline
        assert not deployment.started
        assert deployment.failure is not None and deployment.failure.startswith("decode crash-looping: ")
        assert deployment.servers["decode"].exit_code == 1
        assert "out of bounds for storage of size 262144" in deployment.servers["decode"].log_text()


def test_missing_cell(cluster: KmockCluster, cells: dict[str, Cell], tmp_path: Path) -> None:
    deploy_pd(cluster, cells["pd"])
    target = target_for(cluster, missing_grace_s=0)
    found = target.discover([cells["pd"], cells["agg"]])
    assert found[cells["pd"].id].status == "ready"
    assert found[cells["agg"].id].status == "missing"
    assert "aggregated" in found[cells["agg"].id].detail
    with target.deploy(cells["agg"], tmp_path / "logs") as deployment:
        assert not deployment.started
        assert deployment.failure == "aggregated missing: no pods for role(s) aggregated"


def test_partly_missing_pd_cell(cluster: KmockCluster, cells: dict[str, Cell]) -> None:
    cell = cells["pd"]
    cluster.put("v1/pods", NAMESPACE, pod(f"{cell.k8s_name}-prefill-1", cell, "prefill"))
    found = target_for(cluster).discover([cell])[cell.id]
    assert found.status == "missing"
    assert found.detail == "no pods for role(s) decode, router"
    assert found.failure_text() == "decode missing: no pods for role(s) decode, router"


def test_pods_of_other_releases_and_runs_are_ignored(cluster: KmockCluster, cells: dict[str, Cell]) -> None:
    cell = cells["agg"]
    cluster.put("v1/pods", NAMESPACE, pod("other-release-pod", cell, "aggregated", release="vllm-pd-staging"))
    cluster.put("v1/pods", NAMESPACE, pod("old-run-pod", cell, "aggregated", run="last-week"))
    assert target_for(cluster).discover([cell])[cell.id].status == "missing"
    found = target_for(cluster, run="last-week").discover([cell], with_logs=False)[cell.id]
    assert [p.name for p in found.pods["aggregated"]] == ["old-run-pod"]


def test_image_pull_failure_is_reported_at_once(cluster: KmockCluster, cells: dict[str, Cell]) -> None:
    cell = cells["agg"]
    cluster.put(
        "v1/pods",
        NAMESPACE,
        pod(
            "agg-pod",
            cell,
            "aggregated",
            waiting=("ImagePullBackOff", 'Back-off pulling image "vllm/vllm-openai:v0.33.0"'),
        ),
    )
    cluster.put("v1/services", NAMESPACE, service(cell, "aggregated"))
    found = target_for(cluster).discover([cell], with_logs=False)[cell.id]
    assert found.status == "failed"
    assert "ImagePullBackOff" in found.detail and "Back-off pulling image" in found.detail


def test_wait_polls_until_the_cell_is_ready(cluster: KmockCluster, cells: dict[str, Cell]) -> None:
    cell = cells["pd"]
    decode_name = f"{cell.k8s_name}-decode-5c4b-fghij"
    deploy_pd(cluster, cell, decode=pod(decode_name, cell, "decode", ready_after=None))
    sleeps: list[float] = []

    def sleep(seconds: float) -> None:  # the kubelet marks decode Ready while we wait
        sleeps.append(seconds)
        if len(sleeps) == 2:
            cluster.put("v1/pods", NAMESPACE, pod(decode_name, cell, "decode", ready_after=300))

    target = target_for(cluster, sleep=sleep, poll_interval_s=7.0)
    found = target.wait_for(cell)
    assert found.status == "ready"
    assert sleeps == [7.0, 7.0]
    assert found.ready_seconds == 300.0


def test_wait_gives_up_at_the_deadline(cluster: KmockCluster, cells: dict[str, Cell]) -> None:
    cell = cells["agg"]
    cluster.put("v1/pods", NAMESPACE, pod("agg-pod", cell, "aggregated", ready_after=None))
    cluster.put("v1/services", NAMESPACE, service(cell, "aggregated"))
    cluster.log(NAMESPACE, "agg-pod", "vllm", "INFO Loading weights took 812.5 seconds\n")
    now = [0.0]

    def sleep(seconds: float) -> None:
        now[0] += seconds

    target = target_for(
        cluster, config=_config(ready_timeout_s=20), clock=lambda: now[0], sleep=sleep, poll_interval_s=5.0
    )
    found = target.wait_for(cell)
    assert found.status == "starting"
    assert found.detail.startswith("not ready after 20s")
    assert now[0] == 20.0
    assert "Loading weights" in found.logs["aggregated"], "a timed-out cell still hands over its logs"


def test_a_missing_previous_log_is_not_an_error(cluster: KmockCluster, cells: dict[str, Cell]) -> None:
    cell = cells["agg"]
    restarted = pod("agg-pod", cell, "aggregated", restarts=1, last_terminated=("OOMKilled", 137))
    cluster.put("v1/pods", NAMESPACE, restarted)
    cluster.put("v1/services", NAMESPACE, service(cell, "aggregated"))
    cluster.no_previous_log(NAMESPACE, "agg-pod", "vllm")
    cluster.log(NAMESPACE, "agg-pod", "vllm", STARTUP_OK)
    found = target_for(cluster).discover([cell])[cell.id]
    assert found.status == "ready"
    assert found.restarts == 1 and found.termination_reason == "OOMKilled"
    assert "previous instance" not in found.logs["aggregated"]
    assert "Application startup complete." in found.logs["aggregated"]


def test_forbidden_api_reads_fail_clearly(cluster: KmockCluster, cells: dict[str, Cell]) -> None:
    cluster.fail_lists(f"/api/v1/namespaces/{NAMESPACE}/pods", 403, "Forbidden")
    with pytest.raises(KubernetesTargetError, match=rf"reading pods in namespace {NAMESPACE} failed: HTTP 403"):
        target_for(cluster).discover([cells["agg"]])


def test_connects_through_a_kubeconfig(cluster: KmockCluster, cells: dict[str, Cell], tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "kmock",
                "clusters": [{"name": "kmock", "cluster": {"server": cluster.url}}],
                "users": [{"name": "canary", "user": {"token": "not-checked-by-kmock"}}],
                "contexts": [
                    {"name": "kmock", "context": {"cluster": "kmock", "user": "canary", "namespace": NAMESPACE}}
                ],
            }
        )
    )
    deploy_pd(cluster, cells["pd"])
    config = _config(in_cluster=False, kubeconfig=str(kubeconfig))
    target = KubernetesTarget(config)
    assert target.discover([cells["pd"]], with_logs=False)[cells["pd"].id].status == "ready"
    requests = [str(r.url) for r in list(cluster.emulator)]  # kmock records every request it served
    assert any("/api/v1/namespaces/gpu/pods" in url and "labelSelector" in url for url in requests)


def test_unusable_kubeconfig_is_a_clear_error(cells: dict[str, Cell], tmp_path: Path) -> None:
    missing = tmp_path / "nope.yaml"
    target = KubernetesTarget(_config(in_cluster=False, kubeconfig=str(missing)))
    with pytest.raises(KubernetesTargetError, match="cannot configure the Kubernetes client"):
        target.discover([cells["agg"]])


def test_the_startup_classifier_names_the_failure_from_kubernetes_logs(
    cluster: KmockCluster, cells: dict[str, Cell]
) -> None:
    """End to end with the signature catalog: the previous log of the crash-looping decode is
    classified as the KV-view overrun, not as the generic engine-init wrapper."""
    cell = cells["pd"]
    decode_pod = f"{cell.k8s_name}-decode-5c4b-fghij"
    deploy_pd(
        cluster,
        cell,
        decode=pod(
            decode_pod,
            cell,
            "decode",
            restarts=2,
            waiting=("CrashLoopBackOff", "back-off"),
            last_terminated=("Error", 1),
        ),
    )
    cluster.log(NAMESPACE, decode_pod, "vllm", "INFO Starting vLLM API server\n")
    cluster.log(
        NAMESPACE,
        decode_pod,
        "vllm",
        f"ERROR Engine core initialization failed. See root cause above.\n{OVERRUN}\n",
        previous=True,
    )
    found = target_for(cluster).discover([cell])[cell.id]
    verdict = classify(found.logs)
    assert verdict.failure_class == "kv-view-overrun"
    assert verdict.best.source == "decode"


def test_the_startup_check_fails_a_crash_looping_kubernetes_cell_with_its_signature(
    cluster: KmockCluster, cells: dict[str, Cell], tmp_path: Path
) -> None:
    """The runner's path: KubernetesTarget.deploy -> the startup check -> verdict and failure class."""

    cell = cells["pd"]
    decode_pod = f"{cell.k8s_name}-decode-5c4b-fghij"
    deploy_pd(
        cluster,
        cell,
        decode=pod(
            decode_pod,
            cell,
            "decode",
            restarts=3,
            waiting=("CrashLoopBackOff", "back-off"),
            last_terminated=("Error", 1),
        ),
    )
    cluster.log(NAMESPACE, decode_pod, "vllm", "INFO Starting vLLM API server\n")
    cluster.log(NAMESPACE, decode_pod, "vllm", f"{OVERRUN}\nERROR Engine core initialization failed.\n", previous=True)
    target = target_for(cluster)
    with target.deploy(cell, tmp_path / "logs") as deployment:
        ctx = CheckContext(cell=cell, deployment=deployment, config=target.config, cell_dir=tmp_path)
        result = startup_check(ctx)
    assert result.verdict == "fail"
    assert result.evidence["failure_class"] == "kv-view-overrun"
    assert "decode" in result.summary


def test_a_pod_that_restarts_while_its_cell_is_checked_is_a_named_death(
    cluster: KmockCluster, cells: dict[str, Cell], tmp_path: Path
) -> None:
    """Issue 41 on the Kubernetes emulator (kmock, a stand-in for a cluster): decode's container restarts
    during the checks; the deployment's watch names it with the pod's exit code and its previous log."""
    from canary.run.cells import engines_died

    cell = cells["pd"]
    deploy_pd(cluster, cell)
    decode_pod = f"{cell.k8s_name}-decode-5c4b-fghij"
    cluster.log(NAMESPACE, decode_pod, "vllm", STARTUP_OK)
    target = target_for(cluster)
    with target.deploy(cell, tmp_path / "logs") as deployment:
        assert engines_died(deployment, during="parity") is None, "a ready cell has no death"
        restarted = pod(decode_pod, cell, "decode", ready_after=None, restarts=1, last_terminated=("Error", 139))
        cluster.put("v1/pods", NAMESPACE, restarted)
        cluster.log(NAMESPACE, decode_pod, "vllm", "ERROR EngineCore encountered an issue\n", previous=True)
        died = engines_died(deployment, during="parity")
    assert died is not None and died.verdict == "fail"
    assert "decode server died (restarted 1 time(s) since it was ready" in died.summary
    assert "exit code 139" in died.summary
    (death,) = died.evidence["deaths"]
    assert death["role"] == "decode" and "EngineCore encountered an issue" in (death["cause"] or "")
