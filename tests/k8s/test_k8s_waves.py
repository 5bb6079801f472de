"""Waves against kmock (a real HTTP Kubernetes API emulator) with the real vllm-pd chart (helm
template): the controller never holds more GPUs than target.kubernetes.gpu_budget (summed from
the objects in the emulated cluster after every create), tears every wave down (also after an
exception or Ctrl-C mid-wave), and the next run resumes the rotation. Plus the helm/canary side:
the CronJob's deadline comes from the config, and the waves Role grants what the controller
creates."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from k8s_helpers import CANARY_READER, CHARTS, by_kind, helm_bin, load_crd_schemas, render, validate
from kmock_cluster import KmockCluster, kmock_cluster

from canary.checks.estimate import checks_by_cell
from canary.config import CanaryConfig, KubernetesTargetConfig
from canary.config.load import validate_config
from canary.plan.kube_names import LABEL_MANAGED, MANAGED_VALUE
from canary.plan.matrix import Plan, plan
from canary.plan.rotation import load_state
from canary.plan.waves import select_night
from canary.run.wave_run import execute_waves
from canary.targets.kubernetes.target import KubernetesTarget
from canary.targets.kubernetes.waves import RESOURCES, WaveDeployer, gpu_requests

NAMESPACE = "gpu"
RELEASE = "vllm-pd"
BUDGET = 16
GPU = "nvidia.com/gpu"
TS = "2026-11-30T02:00:00Z"

# A slice of configs/h200-mrv2-pd.yaml (same model, backend, block sizes and runners; fewer values
# per axis for test time; two upstream images, so render-values' image check passes):
# 8 aggregated (1 GPU) + 8 P/D (2 GPUs) = 24 GPUs: two waves of 16.
CONFIG: dict[str, Any] = {
    "version": 1,
    "name": "waves-kmock",
    "platform": "sm90",
    "models": [{"name": "qwen3-0-6b", "source": "Qwen/Qwen3-0.6B", "max_model_len": 4096}],
    "images": {
        "baseline": {"ref": "vllm/vllm-openai:v0.33.0"},
        "previous": {"ref": "vllm/vllm-openai:v0.22.1"},
    },
    "matrix": {
        "attention_backends": ["FLASHINFER"],
        "prefill_block_sizes": [128],
        "decode_block_sizes": [64, 128],
        "runners": ["v1", "v2"],
        "topologies": ["aggregated", "pd-nixl"],
    },
    # The orchestration is under test, not the checks (tests/k8s/test_k8s_target.py and the
    # engine tests cover those): every check off, so a started cell passes.
    "checks": {
        name: {"enabled": name == "startup"} for name in ("startup", "parity", "accuracy", "throughput", "kv_transfer")
    },
    "target": {
        "kind": "kubernetes",
        "kubernetes": {
            "namespace": NAMESPACE,
            "release": RELEASE,
            "in_cluster": False,
            "gpu_budget": BUDGET,
            "ready_timeout_s": 60,
            "teardown_timeout_s": 60,
            # 1 wave a night: each is 15 + 600 + 0 + 90 s, the window 85% of 1000 s
            "job_deadline_s": 1000,
            "rotation": {"every_night": [{"prefill_block_size": 128, "decode_block_size": 128, "runner": "v2"}]},
        },
    },
}


def _config(tmp_path: Path, **kubernetes: Any) -> CanaryConfig:
    data = yaml.safe_load(yaml.safe_dump(CONFIG))
    data["target"]["kubernetes"].update(kubernetes)
    data["target"]["kubernetes"]["rotation"]["state_file"] = str(tmp_path / "state" / "rotation.json")
    return validate_config(data, "kmock waves config")


# --------------------------------------------------------------------------- the emulated cluster


class Cluster:
    """kmock plus what a cluster's controllers would do: the Deployment controller and kubelet
    create a Ready pod per replica (GPU requests copied from the template), the garbage collector
    removes the pods of deleted Deployments. Also samples the GPUs held after every change."""

    def __init__(self, kmock: KmockCluster) -> None:
        from kubernetes import client

        self.kmock = kmock
        configuration = client.Configuration()
        configuration.host = kmock.url
        self.api_client = client.ApiClient(configuration)
        self.core = client.CoreV1Api(self.api_client)
        self.apps = client.AppsV1Api(self.api_client)
        self.samples: list[int] = []
        self.created: list[str] = []

    def _items(self, data: Any) -> list[dict[str, Any]]:
        return [item for item in json.loads(data.data)["items"] if isinstance(item, dict)]

    def deployments(self) -> list[dict[str, Any]]:
        return self._items(self.apps.list_namespaced_deployment(NAMESPACE, _preload_content=False))

    def pods(self) -> list[dict[str, Any]]:
        return self._items(self.core.list_namespaced_pod(NAMESPACE, _preload_content=False))

    def services(self) -> list[dict[str, Any]]:
        return self._items(self.core.list_namespaced_service(NAMESPACE, _preload_content=False))

    def gpus_held(self) -> int:
        """GPUs of live Deployments plus those of pods whose Deployment is gone (terminating)."""
        deployments = self.deployments()
        owners = {d["metadata"]["name"] for d in deployments}
        held = sum(gpu_requests(d) for d in deployments)
        held += sum(gpu_requests(p) for p in self.pods() if p["metadata"]["labels"].get("owner") not in owners)
        return held

    def sample(self) -> None:
        self.samples.append(self.gpus_held())

    def tick(self, _seconds: float = 0.0) -> None:
        """One round of the controllers (called whenever the canary waits)."""
        deployments = {d["metadata"]["name"]: d for d in self.deployments()}
        pods = {p["metadata"]["name"]: p for p in self.pods()}
        for pod_name, pod in pods.items():
            if pod["metadata"]["labels"].get("owner") not in deployments:
                self.core.delete_namespaced_pod(pod_name, NAMESPACE, _preload_content=False)
        for name, deployment in deployments.items():
            pod_name = f"{name}-0"
            if pod_name in pods:
                continue
            template = deployment["spec"]["template"]
            labels = {**template["metadata"]["labels"], "owner": name}
            container = template["spec"]["containers"][0]
            resources = {  # quantities as the API server returns them: strings
                kind: {name: str(value) for name, value in amounts.items()}
                for kind, amounts in container.get("resources", {}).items()
            }
            pod = {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": pod_name,
                    "namespace": NAMESPACE,
                    "labels": labels,
                    "annotations": template["metadata"].get("annotations", {}),
                    "creationTimestamp": TS,
                },
                "spec": {
                    "containers": [{"name": container["name"], "image": container["image"], "resources": resources}]
                },
                "status": {
                    "phase": "Running",
                    "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": TS}],
                    "containerStatuses": [
                        {
                            "name": container["name"],
                            "ready": True,
                            "restartCount": 0,
                            "state": {"running": {}},
                            "image": container["image"],
                            "imageID": "",
                        }
                    ],
                },
            }
            self.core.create_namespaced_pod(NAMESPACE, pod, _preload_content=False)
            self.created.append(f"Pod/{pod_name}")
            self.sample()


class SamplingDeployer(WaveDeployer):
    """The real deployer; the test samples the cluster after each object it creates."""

    cluster: Cluster

    def _create(self, obj: dict[str, Any]) -> int:
        status = super()._create(obj)
        self.cluster.created.append(f"{obj['kind']}/{obj['metadata']['name']}")
        self.cluster.sample()
        return status


@pytest.fixture(autouse=True)
def startup_stand_in(monkeypatch: pytest.MonkeyPatch) -> None:
    """The one enabled check (a config must judge something) is stood in: the cells' Services do not
    resolve outside a cluster, and the orchestration is under test, not the startup check."""
    import canary.run.cells
    from canary.judge.results import CheckResult

    def startup(ctx: Any) -> CheckResult:
        return CheckResult(name="startup", verdict="pass", summary="stand-in: the pods are Ready in kmock")

    monkeypatch.setattr(canary.run.cells, "registered", lambda: {"startup": startup})


@pytest.fixture()
def cluster() -> Iterator[Cluster]:
    with kmock_cluster() as running:
        for resource, kind in (
            ("v1/pods", "Pod"),
            ("v1/services", "Service"),
            ("v1/serviceaccounts", "ServiceAccount"),
            ("apps/v1/deployments", "Deployment"),
            ("networking.k8s.io/v1/networkpolicies", "NetworkPolicy"),
            ("coordination.k8s.io/v1/leases", "Lease"),  # the run lease
        ):
            running.declare(resource, kind)
        yield Cluster(running)


def run_night(
    cluster: Cluster, config: CanaryConfig, the_plan: Plan, run_dir: Path, progress: Any = None
) -> tuple[Any, SamplingDeployer]:
    run_dir.mkdir(parents=True)
    target = KubernetesTarget(
        config, api=cluster.core, run=run_dir.name, sleep=cluster.tick, poll_interval_s=0.0, missing_grace_s=30
    )
    deployer = SamplingDeployer(
        config, cluster.api_client, run=run_dir.name, helm=str(helm_bin()), sleep=cluster.tick, poll_interval_s=0.0
    )
    deployer.cluster = cluster
    run = execute_waves(
        config, the_plan, run_dir, target=target, deployer=deployer, progress=progress or (lambda line: None)
    )
    return run, deployer


def assert_empty(cluster: Cluster) -> None:
    assert cluster.deployments() == []
    assert cluster.pods() == []
    assert cluster.services() == []


# --------------------------------------------------------------------------- tests


def test_waves_stay_inside_the_gpu_budget_tear_down_and_resume_the_rotation(cluster: Cluster, tmp_path: Path) -> None:
    config = _config(tmp_path)
    the_plan = plan(config)
    planned = the_plan.planned()
    assert sum(2 if c.topology == "pd-nixl" else 1 for c in planned) == 24  # more than one wave's worth

    first, deployer = run_night(cluster, config, the_plan, tmp_path / "results" / "run-1")
    assert not first.interrupted
    night1 = [r.cell.id for r in first.cells]
    assert len(night1) < len(planned), "the deadline holds 1 wave: the rest rotates"
    assert all(r.verdict == "pass" for r in first.cells), [(r.cell.id, r.reason) for r in first.cells]

    # never more than the budget, sampled after every object created, and the budget was used
    assert cluster.samples and max(cluster.samples) <= BUDGET
    assert max(cluster.samples) > BUDGET // 2
    print(f"\nnight 1: {len(night1)} cells, {len(cluster.samples)} GPU samples, peak {max(cluster.samples)}/{BUDGET}")
    assert any(name.startswith("Deployment/") for name in cluster.created)
    assert any(name.startswith("Pod/") for name in cluster.created)
    # every GPU of the cells was really requested through the chart's objects
    docs = deployer.render(planned[:1])
    assert [gpu_requests(d) for d in by_kind(docs, "Deployment")] == [1]
    assert all(d["metadata"]["labels"][LABEL_MANAGED] == MANAGED_VALUE for d in docs)
    assert_empty(cluster)

    # the rotation state: tonight's cells, the coverage in the results (and the metric)
    state = load_state(config)
    assert set(state.cells) == set(night1)
    covered = {c.cell.id: c for c in first.coverage}
    assert set(covered) == {c.id for c in planned}
    assert {i for i, c in covered.items() if c.this_run} == set(night1)
    from canary.export.prometheus.schema import CELL_LAST_CHECKED, samples

    ages = [s for s in samples(first) if s.name == CELL_LAST_CHECKED.name]
    assert {s.labels["cell"] for s in ages} == set(night1)

    # next night: the nightly cells again, then cells not checked yet
    cluster.samples.clear()
    second, _ = run_night(cluster, config, the_plan, tmp_path / "results" / "run-2")
    night2 = [r.cell.id for r in second.cells]
    every_night = config.target.kubernetes.rotation.every_night
    nightly = {
        c.id
        for c in planned
        if any(
            m.prefill_block_size == c.prefill_block_size == c.decode_block_size and m.runner == c.runner
            for m in every_night or []
        )
    }
    assert nightly <= set(night1) & set(night2)
    new = set(night2) - set(night1)
    assert new, "the second night must move the rotation on"
    expected = select_night(
        planned, config, {cell: datetime(2026, 1, 1, tzinfo=UTC) for cell in night1}, checks_by_cell
    )
    assert set(night2) == {c.id for c in expected.cells}
    assert max(cluster.samples) <= BUDGET
    assert_empty(cluster)
    assert set(load_state(config).cells) == set(night1) | set(night2)


def test_an_exception_mid_wave_still_tears_the_wave_down(cluster: Cluster, tmp_path: Path) -> None:
    config = _config(tmp_path)

    def progress(line: str) -> None:
        if " => " in line and line.startswith("wave 1:"):
            assert cluster.deployments(), "the wave is deployed while its cells are checked"
            raise RuntimeError("the controller crashed mid-wave")

    with pytest.raises(RuntimeError, match="crashed mid-wave"):
        run_night(cluster, config, plan(config), tmp_path / "results" / "crash", progress)
    assert_empty(cluster)
    assert max(cluster.samples) <= BUDGET
    assert len(load_state(config).cells) == 1, "the cell finished before the crash is recorded"


def test_ctrl_c_mid_wave_tears_down_and_marks_the_run_interrupted(cluster: Cluster, tmp_path: Path) -> None:
    config = _config(tmp_path)
    seen: list[str] = []

    def progress(line: str) -> None:
        if " => " in line:
            seen.append(line)
            if len(seen) == 2:
                raise KeyboardInterrupt

    run, _ = run_night(cluster, config, plan(config), tmp_path / "results" / "int", progress)
    assert run.interrupted
    assert next(r.reason for r in run.cells if r.verdict == "error").startswith("interrupted")
    assert_empty(cluster)


def test_leftovers_of_a_killed_run_are_swept_first(cluster: Cluster, tmp_path: Path) -> None:
    config = _config(tmp_path)
    the_plan = plan(config)
    killed = SamplingDeployer(
        config, cluster.api_client, run="killed", helm=str(helm_bin()), sleep=cluster.tick, poll_interval_s=0.0
    )
    killed.cluster = cluster
    stranger = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "not-ours", "namespace": NAMESPACE, "labels": {"app.kubernetes.io/instance": RELEASE}},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "not-ours"}},
            "template": {
                "metadata": {"labels": {"app": "not-ours"}},
                "spec": {"containers": [{"name": "c", "image": "busybox"}]},
            },
        },
    }
    cluster.apps.create_namespaced_deployment(NAMESPACE, stranger, _preload_content=False)
    wave = killed.wave(the_plan.planned()[:2])
    wave.__enter__()  # a controller SIGKILLed inside a wave never runs its teardown
    assert len(cluster.deployments()) == 3
    run, _ = run_night(cluster, config, the_plan, tmp_path / "results" / "next")
    assert not run.interrupted
    assert [d["metadata"]["name"] for d in cluster.deployments()] == ["not-ours"]


def test_kinds_the_chart_renders_are_kinds_the_controller_may_create(tmp_path: Path) -> None:
    """vllm-pd's kinds (with the CI values: multi-node, model cache, network policies) are all in
    RESOURCES, and helm/canary's waves Role grants exactly RESOURCES."""
    home = tmp_path / "helm"
    rendered: set[tuple[str, str]] = set()
    for values in ("pd-and-aggregated-values.yaml", "multinode-rdma-values.yaml"):
        docs = render("vllm-pd", home, [CHARTS / "vllm-pd" / "ci" / values])
        rendered |= {(d["apiVersion"], d["kind"]) for d in docs}
    assert rendered <= set(RESOURCES), rendered - set(RESOURCES)

    config_file = Path(__file__).resolve().parents[2] / "configs" / "deepseek-v4.yaml"
    docs = render("canary", home, extra=["--set-file", f"config={config_file}"])
    assert validate(docs, load_crd_schemas()) == []  # the waves Role, binding and PVC, strictly
    role = next(r for r in by_kind(docs, "Role") if r["metadata"]["name"].endswith("-waves"))
    lease_rules = [r for r in role["rules"] if r["apiGroups"] == ["coordination.k8s.io"]]
    assert lease_rules == [  # the run lease: read, take, renew, release
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["get", "create", "patch", "delete"]}
    ]
    rules = [r for r in role["rules"] if r not in lease_rules]
    granted = {(group, resource) for rule in rules for group in rule["apiGroups"] for resource in rule["resources"]}
    wanted = {(v.rsplit("/", 1)[0] if "/" in v else "", plural) for (v, _kind), plural in RESOURCES.items()}
    assert granted == wanted
    assert all(set(rule["verbs"]) == {"get", "list", "create", "delete"} for rule in rules)
    assert [b["roleRef"]["name"] for b in by_kind(docs, "RoleBinding")].count(role["metadata"]["name"]) == 1
    claims = {p["metadata"]["name"].rsplit("-", 1)[-1] for p in by_kind(docs, "PersistentVolumeClaim")}
    assert claims == {"state", "results", "cache"}  # rotation, results + history, model cache: all kept
    args = by_kind(docs, "CronJob")[0]["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "target.kubernetes.rotation.state_file=/var/lib/canary/rotation.json" in args


def test_the_cronjob_deadline_is_the_config_key(tmp_path: Path) -> None:
    home = tmp_path / "helm"
    default = render("canary", home, [CANARY_READER])
    spec = by_kind(default, "CronJob")[0]["spec"]["jobTemplate"]["spec"]
    assert spec["activeDeadlineSeconds"] == KubernetesTargetConfig.model_fields["job_deadline_s"].default
    assert not [r for r in by_kind(default, "Role") if r["metadata"]["name"].endswith("-waves")], "no waves: read only"
    config = yaml.safe_load(CANARY_READER.read_text())["config"]
    data = yaml.safe_load(config)
    data["target"]["kubernetes"]["job_deadline_s"] = 7200
    config_file = tmp_path / "config.yaml"
    config_file.write_text(yaml.safe_dump(data))
    extra = ["--set-file", f"config={config_file}", "--set", "job.enabled=true"]
    docs = render("canary", home, [CANARY_READER], extra=extra)
    assert by_kind(docs, "CronJob")[0]["spec"]["jobTemplate"]["spec"]["activeDeadlineSeconds"] == 7200
    assert by_kind(docs, "Job")[0]["spec"]["activeDeadlineSeconds"] == 7200


def test_the_run_loop_never_starts_a_wave_past_the_deadline(cluster: Cluster, tmp_path: Path) -> None:
    config = _config(tmp_path, job_deadline_s=1700)  # the estimate fits 2 waves, the clock says no
    clock = iter([0.0, 0.0, 1000.0, 1000.0, 1000.0, 1000.0])
    lines: list[str] = []
    run_dir = tmp_path / "results" / "late"
    run_dir.mkdir(parents=True)
    target = KubernetesTarget(config, api=cluster.core, run=run_dir.name, sleep=cluster.tick, poll_interval_s=0.0)
    deployer = SamplingDeployer(
        config, cluster.api_client, run=run_dir.name, helm=str(helm_bin()), sleep=cluster.tick, poll_interval_s=0.0
    )
    deployer.cluster = cluster
    run = execute_waves(
        config,
        plan(config),
        run_dir,
        target=target,
        deployer=deployer,
        progress=lines.append,
        clock=lambda: next(clock, 1000.0),
    )
    assert any("not started" in line for line in lines), lines
    first_wave = select_night(plan(config).planned(), config, {}, checks_by_cell).waves[0]
    assert [r.cell.id for r in run.cells] == [c.id for c in first_wave.cells]
    assert_empty(cluster)


def test_the_chart_ci_waves_config_is_a_valid_plan_inside_its_deadline(tmp_path: Path) -> None:
    values = yaml.safe_load((CHARTS / "canary" / "ci" / "waves-values.yaml").read_text())
    config = validate_config(yaml.safe_load(values["config"]), "helm/canary/ci/waves-values.yaml config")
    night = select_night(plan(config).planned(), config, {}, checks_by_cell)
    assert night.typical_s <= config.target.kubernetes.job_deadline_s
    docs = render("canary", tmp_path / "helm", [CHARTS / "canary" / "ci" / "waves-values.yaml"])
    spec = by_kind(docs, "CronJob")[0]["spec"]["jobTemplate"]["spec"]
    assert spec["activeDeadlineSeconds"] == config.target.kubernetes.job_deadline_s == 10800
    configmap = next(c for c in by_kind(docs, "ConfigMap") if "vllm-pd-values.yaml" in c.get("data", {}))
    cells_values = yaml.safe_load(configmap["data"]["vllm-pd-values.yaml"])
    # the cells' NetworkPolicies admit the controller from its namespace (tests/k8s/test_k8s_netpol.py)
    assert cells_values.pop("networkPolicy") == {"controller": {"namespace": "vllm-canary"}}
    assert cells_values.pop("modelCache") == {"enabled": True, "existingClaim": "t-canary-model-cache"}  # kept claim
    assert cells_values == values["vllmPdValues"]


def test_a_night_applies_holm_and_its_last_lines_and_rotation_say_the_recorded_verdicts(
    cluster: Cluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Wave runs never applied family control: a lone p = 0.02 stayed a fail in results and the rotation
    state. Now the night is re-judged as `execute` re-judges a run, and the re-judged cell is printed again."""
    import canary.run.cells
    from tests.support.crafted import crafted_throughput

    config = _config(tmp_path, job_deadline_s=3000)  # room for the load test's estimate in each wave
    config.checks.throughput.enabled = True
    first = select_night(plan(config).planned(), config, {}, checks_by_cell).cells[0].id

    def throughput(ctx: Any) -> Any:
        return crafted_throughput([0.02, 0.6, 0.7] if ctx.cell.id == first else [0.5, 0.6, 0.7])

    monkeypatch.setattr(canary.run.cells, "registered", lambda: {"throughput": throughput})
    lines: list[str] = []
    run, _ = run_night(cluster, config, plan(config), tmp_path / "results" / "run-1", progress=lines.append)
    assert {r.verdict for r in run.cells} == {"pass"}, [(r.cell.id, r.reason) for r in run.cells]
    announced = [line for line in lines if f"{first} => " in line]
    assert "=> FAIL" in announced[0] and "provisional" in announced[0]
    assert announced[-1].startswith(f"re-judged: {first} => PASS")
    assert load_state(config).cells[first].verdict == "pass"
    assert {c.cell.id: c.last_verdict for c in run.coverage if c.this_run}[first] == "pass"
    assert_empty(cluster)
