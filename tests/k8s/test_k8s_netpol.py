"""The charts' doors: real `helm template` output of helm/vllm-pd and helm/canary, judged by a
NetworkPolicy ingress evaluator (tests/support/netpol.py; no CNI runs here, so the evaluator is the
stand-in for one, written from the API's documented semantics).

Engines admit the canary controller (in their namespace, or in another one named by
networkPolicy.controller.namespace) and the router and NIXL peer of their own cell; an engine of
another cell (the candidate image's pair), of another release, a pod that only says it is part of
vllm-canary, and an arbitrary pod are refused. The controller itself admits nothing.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from k8s_helpers import CANARY_READER, CHARTS, by_kind, pod_specs, render

from tests.support.netpol import Pod, admitted, selector_matches

NS = "gpu"
CI_VALUES = CHARTS / "vllm-pd" / "ci" / "pd-and-aggregated-values.yaml"
PD_PATCHED = "pd-flashinfer-p128-d64-fp8-v2-patched"
PD_BASELINE = "pd-flashinfer-p128-d64-fp8-v2-baseline"
AGG = "agg-flashinfer-b128-auto-v2-baseline"


@pytest.fixture(scope="module")
def helm_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("helm-home")


@pytest.fixture(scope="module")
def two_pairs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The CI values plus the baseline image's P/D pair beside the patched (candidate) one."""
    values = yaml.safe_load(CI_VALUES.read_text())
    patched = next(c for c in values["cells"] if c["name"] == PD_PATCHED)
    baseline = copy.deepcopy(patched)
    baseline.update(id="pd.flashinfer.p128-d64.fp8.v2.baseline", name=PD_BASELINE, image="vllm/vllm-openai:v0.33.0")
    baseline["imageKey"] = "baseline"
    values["cells"].append(baseline)
    path = tmp_path_factory.mktemp("values") / "two-pairs.yaml"
    path.write_text(yaml.safe_dump(values))
    return path


def pods_of(docs: list[dict[str, Any]], namespace: str) -> dict[tuple[str, str], Pod]:
    """(cell, role) -> the pod a workload's template makes (its labels and named ports)."""
    out: dict[tuple[str, str], Pod] = {}
    for name, meta, spec in pod_specs(docs):
        labels = {k: str(v) for k, v in (meta.get("labels") or {}).items()}
        ports = {p["name"]: int(p["containerPort"]) for c in spec["containers"] for p in c.get("ports") or []}
        key = (labels.get("canary.vllm.dev/cell", ""), labels.get("canary.vllm.dev/role", ""))
        out[key] = Pod(name, namespace, labels, ports)
    return out


def controller_pod(helm_home: Path, namespace: str) -> tuple[Pod, list[dict[str, Any]]]:
    """helm/canary's controller pod (the CronJob's template) in a namespace, and the rendered docs."""
    docs = render("canary", helm_home, [CANARY_READER], namespace=namespace, extra=["--set", f"targetNamespace={NS}"])
    _, meta, _ = next(s for s in pod_specs(docs) if s[0].startswith("CronJob/"))
    return Pod("controller", namespace, {k: str(v) for k, v in meta["labels"].items()}), docs


def engines(pods: dict[tuple[str, str], Pod], cell: str) -> Iterator[Pod]:
    return (pods[cell, role] for role in ("prefill", "decode", "aggregated") if (cell, role) in pods)


def test_the_engines_admit_their_controller_and_their_own_pair_only(helm_home: Path, two_pairs: Path) -> None:
    docs = render("vllm-pd", helm_home, [two_pairs], release="t", namespace=NS)
    policies = by_kind(docs, "NetworkPolicy")
    pods = pods_of(docs, NS)
    controller, _ = controller_pod(helm_home, NS)
    for cell in (PD_PATCHED, PD_BASELINE):
        router, prefill, decode = pods[cell, "router"], pods[cell, "prefill"], pods[cell, "decode"]
        for engine in (prefill, decode):
            assert admitted(policies, controller, engine, "http"), engine.name
            assert admitted(policies, router, engine, "http"), f"{router.name} -> {engine.name}"
        for port in ("http", "metrics"):
            assert admitted(policies, controller, router, port), router.name
        # NIXL: decode reads prefill's side channel and UCX ports (any port), and back
        assert admitted(policies, decode, prefill, "nixl") and admitted(policies, decode, prefill, 40123)
        assert admitted(policies, prefill, decode, "nixl")
    assert admitted(policies, controller, pods[AGG, "aggregated"], "http")

    # the candidate image's pair never reaches the baseline's, nor the other way round
    for source_cell, target_cell in ((PD_PATCHED, PD_BASELINE), (PD_BASELINE, PD_PATCHED), (AGG, PD_BASELINE)):
        for source in [pods[k] for k in pods if k[0] == source_cell]:
            for engine in engines(pods, target_cell):
                for port in ("http", "nixl"):
                    assert not admitted(policies, source, engine, port), f"{source.name} -> {engine.name}:{port}"
    # an engine of another release (same chart, same namespace), with the same cell names
    other = pods_of(render("vllm-pd", helm_home, [two_pairs], release="cand", namespace=NS), NS)
    for source in other.values():
        for engine in engines(pods, PD_BASELINE):
            assert not admitted(policies, source, engine, "http"), f"{source.name} -> {engine.name}"
        assert not admitted(policies, source, pods[PD_BASELINE, "router"], "http")
    # any other pod: one that merely claims part-of vllm-canary (the old door), an arbitrary one
    for labels in ({"app.kubernetes.io/part-of": "vllm-canary"}, {"app": "debug-shell"}, {}):
        stranger = Pod("stranger", NS, labels)
        for engine in [*engines(pods, PD_BASELINE), pods[PD_BASELINE, "router"]]:
            assert not admitted(policies, stranger, engine, "http"), f"{labels} -> {engine.name}"


def test_a_controller_in_another_namespace_is_admitted_when_named(helm_home: Path, two_pairs: Path) -> None:
    controller, _ = controller_pod(helm_home, "canary-system")
    same_labels_elsewhere = Pod("impostor", "scratch", controller.labels)
    pods_default = pods_of(render("vllm-pd", helm_home, [two_pairs], namespace=NS), NS)
    default = by_kind(render("vllm-pd", helm_home, [two_pairs], namespace=NS), "NetworkPolicy")
    named = by_kind(
        render(
            "vllm-pd",
            helm_home,
            [two_pairs],
            namespace=NS,
            extra=["--set", "networkPolicy.controller.namespace=canary-system"],
        ),
        "NetworkPolicy",
    )
    prefill, router = pods_default[PD_BASELINE, "prefill"], pods_default[PD_BASELINE, "router"]
    assert not admitted(default, controller, prefill, "http"), "unnamed: the controller's namespace is the release's"
    for destination in (prefill, router):
        assert admitted(named, controller, destination, "http")
        assert not admitted(named, same_labels_elsewhere, destination, "http")
    # Prometheus (the PodMonitor) scrapes from `monitoring`; another pod there does not get in
    prometheus = Pod("prometheus-0", "monitoring", {"app.kubernetes.io/name": "prometheus"})
    assert admitted(named, prometheus, prefill, "http") and admitted(named, prometheus, router, "metrics")
    assert not admitted(named, Pod("x", "monitoring", {"app": "x"}), prefill, "http")
    assert not admitted(named, prometheus, prefill, "nixl")


def test_the_waves_controller_passes_its_namespace_to_the_cells(
    helm_home: Path, two_pairs: Path, tmp_path: Path
) -> None:
    """helm/canary's waves: the vllm-pd values file it hands the controller names the controller's
    namespace, so cells deployed into targetNamespace admit it (and vllmPdValues may override)."""
    config = Path(__file__).resolve().parents[2] / "configs" / "deepseek-v4.yaml"
    docs = render(
        "canary",
        helm_home,
        namespace="canary-system",
        extra=["--set-file", f"config={config}", "--set", f"targetNamespace={NS}"],
    )
    configmap = next(c for c in by_kind(docs, "ConfigMap") if "vllm-pd-values.yaml" in c["data"])
    values = tmp_path / "vllm-pd-values.yaml"
    values.write_text(configmap["data"]["vllm-pd-values.yaml"])
    cells = render("vllm-pd", helm_home, [two_pairs, values], namespace=NS)
    controller = Pod(
        "controller", "canary-system", next(s[1] for s in pod_specs(docs) if s[0].startswith("CronJob/"))["labels"]
    )
    pods = pods_of(cells, NS)
    assert admitted(by_kind(cells, "NetworkPolicy"), controller, pods[PD_BASELINE, "decode"], "http")


def test_the_controller_admits_nothing(helm_home: Path) -> None:
    controller, docs = controller_pod(helm_home, "canary-system")
    policies = by_kind(docs, "NetworkPolicy")
    assert any(selector_matches(p["spec"]["podSelector"], controller.labels) for p in policies)
    for source in (Pod("same-ns", "canary-system", {"app": "x"}), controller, Pod("p", "monitoring", {})):
        assert not admitted(policies, source, controller, 8080)


def test_the_evaluator_follows_the_api_semantics() -> None:
    """AND within a peer, OR across peers and policies, empty `from` admits all, `ingress: []` none."""
    dest = Pod("d", "a", {"app": "db"}, {"pg": 5432})

    def policy(ingress: list[dict[str, Any]], namespace: str = "a") -> dict[str, Any]:
        return {
            "kind": "NetworkPolicy",
            "metadata": {"name": "p", "namespace": namespace},
            "spec": {"podSelector": {"matchLabels": {"app": "db"}}, "ingress": ingress},
        }

    both = {"podSelector": {"matchLabels": {"r": "x"}}, "namespaceSelector": {"matchLabels": {"team": "t"}}}
    ns_labels = {"b": {"team": "t"}}
    assert admitted([policy([{"from": [both]}])], Pod("s", "b", {"r": "x"}), dest, 1, namespaces=ns_labels)
    assert not admitted([policy([{"from": [both]}])], Pod("s", "b", {"r": "y"}), dest, 1, namespaces=ns_labels)
    assert not admitted([policy([{"from": [both]}])], Pod("s", "c", {"r": "x"}), dest, 1, namespaces=ns_labels)
    split = [{"podSelector": {"matchLabels": {"r": "x"}}}, {"namespaceSelector": {"matchLabels": {"team": "t"}}}]
    assert admitted([policy([{"from": split}])], Pod("s", "a", {"r": "x"}), dest, 1)
    assert admitted([policy([{"from": split}])], Pod("s", "b", {}), dest, 1, namespaces=ns_labels)
    assert not admitted([policy([{"from": split}])], Pod("s", "c", {"r": "x"}), dest, 1), "podSelector alone: own ns"
    assert admitted([policy([{}])], Pod("s", "z", {}), dest, 1)
    assert not admitted([policy([])], Pod("s", "a", {"app": "db"}), dest, 1)
    assert admitted([policy([], namespace="other")], Pod("s", "z", {}), dest, 1), "a policy of another namespace"
    ports = [{"from": [], "ports": [{"port": "pg"}, {"port": 9000, "endPort": 9010, "protocol": "TCP"}]}]
    assert admitted([policy(ports)], Pod("s", "a", {}), dest, 5432)
    assert admitted([policy(ports)], Pod("s", "a", {}), dest, 9005)
    assert not admitted([policy(ports)], Pod("s", "a", {}), dest, 9011)
    assert not admitted([policy(ports)], Pod("s", "a", {}), dest, 5432, protocol="UDP")
    expr = {
        "matchExpressions": [{"key": "r", "operator": "NotIn", "values": ["x"]}, {"key": "k", "operator": "Exists"}]
    }
    assert selector_matches(expr, {"k": "1"}) and not selector_matches(expr, {"k": "1", "r": "x"})
    assert not selector_matches(expr, {"r": "y"})


def test_a_multi_node_group_reaches_its_own_members_only(helm_home: Path) -> None:
    """LeaderWorkerSet cells (Ray across nodes): leader and workers of one cell reach each other on
    any port; a member of the other cell does not."""
    docs = render("vllm-pd", helm_home, [CHARTS / "vllm-pd" / "ci" / "multinode-rdma-values.yaml"], namespace=NS)
    policies = by_kind(docs, "NetworkPolicy")
    members: dict[str, list[Pod]] = {}
    for name, meta, spec in pod_specs(docs):
        labels = {k: str(v) for k, v in (meta.get("labels") or {}).items()}
        if labels.get("canary.vllm.dev/role") in ("prefill", "decode", "aggregated"):
            ports = {p["name"]: int(p["containerPort"]) for c in spec["containers"] for p in c.get("ports") or []}
            members.setdefault(labels["canary.vllm.dev/cell"], []).append(Pod(name, NS, labels, ports))
    assert len(members) == 2 and all(len(group) >= 2 for group in members.values()), members
    (cell_a, group_a), (_, group_b) = sorted(members.items())
    for source in group_a:
        for destination in group_a:
            assert admitted(policies, source, destination, 6379), f"{source.name} -> {destination.name}"
        for destination in group_b:
            assert not admitted(policies, source, destination, 6379), f"{cell_a}: {source.name} -> {destination.name}"
