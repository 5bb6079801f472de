"""Run ownership on the Kubernetes target, against kmock (the in-memory Kubernetes API emulator that
stands in for a cluster here, tests/k8s/kmock_cluster.py) with the real vllm-pd chart (helm template).

Each run labels what it creates with its run id and deploys only while it holds the release's
run Lease (coordination.k8s.io/v1): a second, overlapping run of the release refuses (or waits)
without touching the first run's cells, a sweep never deletes a live run's cells, and a Lease whose
holder stopped renewing it is taken over, the dead run's leftovers swept.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from k8s_helpers import helm_bin
from kmock_cluster import kmock_cluster
from test_k8s_waves import CONFIG, NAMESPACE, RELEASE, Cluster

from canary.config import CanaryConfig
from canary.config.load import validate_config
from canary.plan.kube_names import LABEL_RUN
from canary.plan.matrix import plan
from canary.run.wave_run import execute_waves
from canary.targets.kubernetes.lease import LeaseHeld, format_time, lease_name
from canary.targets.kubernetes.target import KubernetesTarget
from canary.targets.kubernetes.waves import WaveDeployer

LEASES = "coordination.k8s.io/v1/leases"


@pytest.fixture()
def cluster() -> Iterator[Cluster]:
    with kmock_cluster() as running:
        for resource, kind in (
            ("v1/pods", "Pod"),
            ("v1/services", "Service"),
            ("v1/serviceaccounts", "ServiceAccount"),
            ("apps/v1/deployments", "Deployment"),
            ("networking.k8s.io/v1/networkpolicies", "NetworkPolicy"),
            (LEASES, "Lease"),
        ):
            running.declare(resource, kind)
        yield Cluster(running)


def config_for(tmp_path: Path, **kubernetes: Any) -> CanaryConfig:
    data = yaml.safe_load(yaml.safe_dump(CONFIG))
    data["checks"]["startup"]["enabled"] = True  # a config must judge something; no check runs here
    data["target"]["kubernetes"].update(kubernetes)
    data["target"]["kubernetes"]["rotation"]["state_file"] = str(tmp_path / "state" / "rotation.json")
    return validate_config(data, "kmock lease config")


def deployer(cluster: Cluster, config: CanaryConfig, run: str, **kwargs: Any) -> WaveDeployer:
    kwargs.setdefault("sleep", cluster.tick)
    return WaveDeployer(config, cluster.api_client, run=run, helm=str(helm_bin()), poll_interval_s=0.0, **kwargs)


def runs_of(cluster: Cluster) -> dict[str, str]:
    """Deployment name -> the run label it carries."""
    return {d["metadata"]["name"]: d["metadata"]["labels"][LABEL_RUN] for d in cluster.deployments()}


def lease_of(cluster: Cluster) -> dict[str, Any] | None:
    """The release's run Lease as the API serves it (None: there is none)."""
    from kubernetes import client

    api = client.CoordinationV1Api(cluster.api_client)
    try:
        response = api.read_namespaced_lease(lease_name(RELEASE), NAMESPACE, _preload_content=False)
    except client.ApiException as exc:
        if exc.status == 404:
            return None
        raise
    data: dict[str, Any] = json.loads(response.data)
    return data


def test_a_second_run_of_the_release_refuses_and_leaves_the_first_runs_cells(cluster: Cluster, tmp_path: Path) -> None:
    config = config_for(tmp_path, lease_wait_s=0)
    cells = plan(config).planned()
    first = deployer(cluster, config, "run-a")
    with first.lease.held(), first.session(), first.wave(cells[:2]):
        mine = runs_of(cluster)
        assert mine and set(mine.values()) == {"run-a"}, "every object carries its run id"
        lease = lease_of(cluster)
        assert lease is not None and lease["spec"]["holderIdentity"].startswith("run-a@")

        # the one-shot Job of a helm upgrade, beside the CronJob's run: refused, touching nothing
        run_dir = tmp_path / "results" / "run-b"
        run_dir.mkdir(parents=True)
        second_target = KubernetesTarget(config, api=cluster.core, run="run-b", sleep=cluster.tick, poll_interval_s=0)
        with pytest.raises(LeaseHeld, match=r"held by run-a@.*lease_wait_s=0"):
            execute_waves(
                config, plan(config), run_dir, target=second_target, deployer=deployer(cluster, config, "run-b")
            )
        assert runs_of(cluster) == mine
        assert not (tmp_path / "state" / "rotation.json").exists(), "no rotation state written without the lease"

        # even a sweep called outside the lease (the old path) leaves a live run's cells alone
        assert deployer(cluster, config, "run-c").sweep() == []
        assert runs_of(cluster) == mine
    assert cluster.deployments() == [], "the first run tore its own wave down"
    assert lease_of(cluster) is None, "the holder deletes its lease at the end"


def test_a_waiting_run_starts_once_the_first_is_done(cluster: Cluster, tmp_path: Path) -> None:
    config = config_for(tmp_path, lease_wait_s=600)
    cells = plan(config).planned()
    first = deployer(cluster, config, "run-a")
    held = first.lease.held()
    held.__enter__()
    session = first.session()
    session.__enter__()
    wave = first.wave(cells[:1])
    wave.__enter__()
    waits: list[float] = []

    def first_finishes(seconds: float) -> None:  # while the second run waits, the first ends
        waits.append(seconds)
        if len(waits) == 2:
            assert set(runs_of(cluster).values()) == {"run-a"}, "the waiting run deleted nothing"
            wave.__exit__(None, None, None)
            session.__exit__(None, None, None)
            held.__exit__(None, None, None)
        cluster.tick()

    second = deployer(cluster, config, "run-b", sleep=first_finishes)
    with second.lease.held(renew_in_background=False) as lease:
        assert len(waits) >= 2 and lease.taken_over is None
        assert lease_of(cluster)["spec"]["holderIdentity"].startswith("run-b@")  # type: ignore[index]


def test_a_stale_lease_is_taken_over_and_the_dead_runs_cells_swept(cluster: Cluster, tmp_path: Path) -> None:
    config = config_for(tmp_path, lease_wait_s=0, lease_duration_s=120)
    cells = plan(config).planned()
    killed = deployer(cluster, config, "run-dead")
    left = killed.wave(cells[:2])
    left.__enter__()  # SIGKILLed inside a wave: no teardown, no lease release
    renewed = datetime.now(UTC) - timedelta(hours=1)
    cluster.kmock.put(
        LEASES,
        NAMESPACE,
        {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": lease_name(RELEASE), "namespace": NAMESPACE, "labels": {LABEL_RUN: "run-dead"}},
            "spec": {
                "holderIdentity": "run-dead@controller-0",
                "leaseDurationSeconds": 120,
                "acquireTime": format_time(renewed),
                "renewTime": format_time(renewed),
                "leaseTransitions": 0,
            },
        },
    )
    assert set(runs_of(cluster).values()) == {"run-dead"}
    lines: list[str] = []
    run_dir = tmp_path / "results" / "run-new"
    run_dir.mkdir(parents=True)
    new = deployer(cluster, config, "run-new")
    target = KubernetesTarget(config, api=cluster.core, run="run-new", sleep=cluster.tick, poll_interval_s=0)

    def stop_at_first_wave(line: str) -> None:
        lines.append(line)
        if line.startswith("wave 1/"):
            # the lease is ours, the dead run's cells are gone before our first wave
            assert lease_of(cluster)["spec"]["holderIdentity"].startswith("run-new@")  # type: ignore[index]
            assert lease_of(cluster)["spec"]["leaseTransitions"] == 1  # type: ignore[index]
            assert "run-dead" not in runs_of(cluster).values()
            raise KeyboardInterrupt

    run = execute_waves(config, plan(config), run_dir, target=target, deployer=new, progress=stop_at_first_wave)
    assert run.interrupted
    assert any("taken over from run-dead@controller-0" in line for line in lines), lines
    assert cluster.deployments() == []
    assert lease_of(cluster) is None


def test_a_live_lease_is_not_stale_while_renewed(cluster: Cluster, tmp_path: Path) -> None:
    """The holder's renewals keep a second run out past the first lease duration."""
    config = config_for(tmp_path, lease_wait_s=0, lease_duration_s=2)
    first = deployer(cluster, config, "run-a")
    with first.lease.held():  # renews every second (the floor) in its thread
        expires = datetime.now(UTC) + timedelta(seconds=5)
        while datetime.now(UTC) < expires:
            with pytest.raises(LeaseHeld):
                deployer(cluster, config, "run-b").lease.acquire()
    assert first.lease.lost is None


def test_a_run_that_lost_its_lease_starts_no_wave_and_leaves_the_new_holders_lease(
    cluster: Cluster, tmp_path: Path
) -> None:
    """A holder paused past its lease (its renewals stopped) finds another run holding it: its renewal
    thread records the loss, it creates no further wave, and it does not delete the new holder's lease."""
    import time

    from canary.targets.kubernetes.waves import WaveError

    config = config_for(tmp_path, lease_wait_s=0, lease_duration_s=3)
    cells = plan(config).planned()
    first = deployer(cluster, config, "run-a")
    with first.lease.held():  # renews every second
        now = datetime.now(UTC)
        taker = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": lease_name(RELEASE), "namespace": NAMESPACE, "labels": {LABEL_RUN: "run-b"}},
            "spec": {
                "holderIdentity": "run-b@controller-1",
                "leaseDurationSeconds": 3,
                "acquireTime": format_time(now),
                "renewTime": format_time(now + timedelta(hours=1)),
                "leaseTransitions": 1,
            },
        }
        cluster.kmock.put(LEASES, NAMESPACE, taker)
        deadline = time.monotonic() + 10
        while first.lease.lost is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert first.lease.lost is not None and "run-b@controller-1" in first.lease.lost
        with pytest.raises(WaveError, match="run lease lost"):
            first.wave(cells[:1]).__enter__()
        assert cluster.deployments() == []
    assert lease_of(cluster)["spec"]["holderIdentity"] == "run-b@controller-1"  # type: ignore[index]
