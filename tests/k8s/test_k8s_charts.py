"""helm/vllm-pd and helm/canary: lint, render, strict validation, and what the manifests must say.

Real helm (v4.1.4), kubernetes-validate's strict Kubernetes 1.33 schemas for built-in kinds, the
vendored CRD schemas in tests/k8s/crds (made strict like the API server's field validation) for
PodMonitor, ServiceMonitor, PrometheusRule and LeaderWorkerSet.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from k8s_helpers import (
    CANARY_READER,
    CHARTS,
    REPO,
    by_kind,
    env_of,
    helm_bin,
    kinds,
    load_crd_schemas,
    named,
    pod_specs,
    render,
    render_error,
    run_helm,
    selects,
    validate,
)

from canary.config.load import validate_config
from canary.images.table import router_ref
from canary.plan.matrix import plan
from canary.targets.kubernetes.values import render_values

VLLM_PD_CI = sorted((CHARTS / "vllm-pd" / "ci").glob("*.yaml"))
CANARY_CI = sorted((CHARTS / "canary" / "ci").glob("*.yaml"))

# A small GPU matrix: FlashInfer at the block size of vLLM issue 42846 with P != D, Triton as the
# other backend, both runners, both topologies, a patched image next to the baseline.
SMALL_MATRIX: dict[str, Any] = {
    "version": 1,
    "name": "k8s-small",
    "platform": "sm90",
    "models": [{"name": "qwen3-0-6b", "source": "Qwen/Qwen3-0.6B", "max_model_len": 4096}],
    "images": {
        "baseline": {"ref": "vllm/vllm-openai:v0.33.0"},
        "patched": {
            "base": "vllm/vllm-openai:v0.33.0",
            "patches": "docker/patches/series",
        },
    },
    "matrix": {
        "attention_backends": ["FLASHINFER", "TRITON_ATTN"],
        "prefill_block_sizes": [128],
        "decode_block_sizes": [64],
        "runners": ["v1", "v2"],
        "topologies": ["aggregated", "pd-nixl"],
    },
    "target": {"kind": "kubernetes", "kubernetes": {"namespace": "vllm-canary", "release": "t"}},
}


@pytest.fixture(scope="module")
def crds() -> dict[tuple[str, str], dict[str, Any]]:
    return load_crd_schemas()


@pytest.fixture(scope="module")
def helm_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("helm-home")


@pytest.fixture(scope="module")
def small_matrix_values(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    """vllm-pd values rendered by canary.targets.kubernetes.values from SMALL_MATRIX."""
    config = validate_config(SMALL_MATRIX, "SMALL_MATRIX")
    values = render_values(config, list(plan(config).planned()))
    path = tmp_path_factory.mktemp("values") / "small-matrix-values.yaml"
    path.write_text(yaml.safe_dump(values, sort_keys=False), encoding="utf-8")
    return path, values


def test_helm_is_the_pinned_release() -> None:
    out = subprocess.run([str(helm_bin()), "version", "--short"], capture_output=True, text=True, check=True)
    assert out.stdout.startswith("v4.1.4+"), out.stdout


# --------------------------------------------------------------------------- lint


@pytest.mark.parametrize(
    ("chart", "values"),
    [("vllm-pd", None), *[("vllm-pd", f) for f in VLLM_PD_CI], *[("canary", f) for f in CANARY_CI]],
    ids=lambda v: v if isinstance(v, str) else (v.name if v else "defaults"),
)
def test_helm_lint_strict(chart: str, values: Path | None, helm_home: Path) -> None:
    args = ["lint", "--strict", str(CHARTS / chart)] + (["-f", str(values)] if values else [])
    result = run_helm(args, helm_home)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 chart(s) failed" in result.stdout


def test_helm_lint_strict_on_rendered_matrix_values(
    small_matrix_values: tuple[Path, dict[str, Any]], helm_home: Path
) -> None:
    result = run_helm(["lint", "--strict", str(CHARTS / "vllm-pd"), "-f", str(small_matrix_values[0])], helm_home)
    assert result.returncode == 0, result.stdout + result.stderr


# --------------------------------------------------------------------------- the validator itself


def test_validator_rejects_unknown_fields(crds: dict[tuple[str, str], dict[str, Any]], helm_home: Path) -> None:
    """The validation below is only worth something if it is strict: prove it on broken copies."""
    docs = render("vllm-pd", helm_home, [CHARTS / "vllm-pd" / "ci" / "pd-and-aggregated-values.yaml"])
    docs += render("canary", helm_home, [CANARY_READER])
    assert validate(docs, crds) == []
    broken_deployment = json.loads(json.dumps(by_kind(docs, "Deployment")[0]))
    broken_deployment["spec"]["template"]["spec"]["containers"][0]["imagePullPolice"] = "Always"
    broken_monitor = json.loads(json.dumps(by_kind(docs, "PodMonitor")[0]))
    broken_monitor["spec"]["podMetricsEndpoints"][0]["scrapeEvery"] = "15s"
    broken_monitor_meta = json.loads(json.dumps(by_kind(docs, "PodMonitor")[0]))
    broken_monitor_meta["metadata"]["labelz"] = {"a": "b"}
    errors = validate([broken_deployment, broken_monitor, broken_monitor_meta], crds)
    assert len(errors) == 3, errors
    assert "imagePullPolice" in errors[0]
    assert "scrapeEvery" in errors[1]
    assert "labelz" in errors[2] and "ConfigMap part" in errors[2]  # CR metadata checked as ObjectMeta


# --------------------------------------------------------------------------- vllm-pd


@pytest.mark.parametrize("values", VLLM_PD_CI, ids=lambda p: p.name)
def test_vllm_pd_renders_valid_manifests(
    values: Path, crds: dict[tuple[str, str], dict[str, Any]], helm_home: Path
) -> None:
    docs = render("vllm-pd", helm_home, [values])
    assert validate(docs, crds) == []
    cells = yaml.safe_load(values.read_text())["cells"]
    pd_cells = [c for c in cells if c["topology"] == "pd-nixl"]
    counted = kinds(docs)
    # every role of every cell has a Service; P/D cells add a router Deployment
    assert counted["Service"] == sum(3 if c["topology"] == "pd-nixl" else 1 for c in cells)
    workloads = counted.get("Deployment", 0) + counted.get("LeaderWorkerSet", 0)
    assert workloads == sum(3 if c["topology"] == "pd-nixl" else 1 for c in cells)
    routers = [d for d in by_kind(docs, "Deployment") if d["metadata"]["labels"]["canary.vllm.dev/role"] == "router"]
    assert len(routers) == len(pd_cells)


def test_vllm_pd_defaults_render_nothing_but_shared_objects(
    crds: dict[tuple[str, str], dict[str, Any]], helm_home: Path
) -> None:
    docs = render("vllm-pd", helm_home)
    # the release's shared objects; the ConfigMap carries the KV layout probe (vllm.layoutProbe)
    assert kinds(docs) == {"ServiceAccount": 1, "NetworkPolicy": 2, "ConfigMap": 1}
    assert validate(docs, crds) == []


def test_rendered_matrix_values_deploy_each_cell_as_planned(
    small_matrix_values: tuple[Path, dict[str, Any]], crds: dict[tuple[str, str], dict[str, Any]], helm_home: Path
) -> None:
    path, values = small_matrix_values
    docs = render("vllm-pd", helm_home, [path], release="t", namespace="gpu")
    assert validate(docs, crds) == []
    assert values["run"] == "k8s-small"
    planned = plan(validate_config(SMALL_MATRIX, "SMALL_MATRIX")).planned()
    assert [c["id"] for c in values["cells"]] == [c.id for c in planned]
    assert {c["topology"] for c in values["cells"]} == {"aggregated", "pd-nixl"}
    assert {c["imageKey"] for c in values["cells"]} == {"baseline", "patched"}
    series_hashes = {c.get("patchSeriesSha256") for c in values["cells"] if c["imageKey"] == "patched"}
    assert len(series_hashes) == 1 and None not in series_hashes
    for cell in values["cells"]:
        roles = ["aggregated"] if cell["topology"] == "aggregated" else ["prefill", "decode"]
        for role in roles:
            deployment = named(docs, "Deployment", f"{cell['name']}-{role}")
            labels = deployment["spec"]["template"]["metadata"]["labels"]
            assert labels["canary.vllm.dev/run"] == "k8s-small"
            assert labels["canary.vllm.dev/cell"] == cell["name"]
            assert labels["canary.vllm.dev/role"] == role
            assert labels["canary.vllm.dev/image"] == cell["imageKey"]
            annotations = deployment["spec"]["template"]["metadata"]["annotations"]
            assert annotations["canary.vllm.dev/cell-id"] == cell["id"]
            container = deployment["spec"]["template"]["spec"]["containers"][0]
            assert container["image"] == cell["image"]
            args = container["args"]
            assert args[0] == "Qwen/Qwen3-0.6B"
            assert args[args.index("--attention-backend") + 1] == cell["attentionBackend"]
            want_block = cell["decodeBlockSize"] if role == "decode" else cell["prefillBlockSize"]
            assert args[args.index("--block-size") + 1] == str(want_block)
            assert args[args.index("--kv-cache-dtype") + 1] == cell["kvCacheDtype"]
            env = env_of(container)
            assert env["VLLM_USE_V2_MODEL_RUNNER"] == ("1" if cell["runner"] == "v2" else "0")
            if role == "aggregated":
                assert "--kv-transfer-config" not in args
                assert "VLLM_NIXL_SIDE_CHANNEL_HOST" not in env
            else:
                kv = json.loads(args[args.index("--kv-transfer-config") + 1])
                assert kv == {"kv_connector": "NixlConnector", "kv_role": "kv_both", "kv_buffer_device": "cuda"}
                assert env["VLLM_NIXL_SIDE_CHANNEL_HOST"] == {"fieldRef": {"fieldPath": "status.podIP"}}
                assert env["VLLM_NIXL_SIDE_CHANNEL_PORT"] == "5600"
            # the Service of the role selects exactly this Deployment's pods
            service = named(docs, "Service", f"{cell['name']}-{role}")
            assert selects({"matchLabels": service["spec"]["selector"]}, labels)
            assert selects(deployment["spec"]["selector"], labels)
        if cell["topology"] == "pd-nixl":
            router = named(docs, "Deployment", f"{cell['name']}-router")
            container = router["spec"]["template"]["spec"]["containers"][0]
            args = container["args"]
            assert container["command"] == ["vllm-router"]
            assert container["image"] == router_ref()  # vllm-router's own image (docker/vllm-router)
            assert "--vllm-pd-disaggregation" in args
            assert args[args.index("--prefill") + 1] == f"http://{cell['name']}-prefill.gpu.svc:8000"
            assert args[args.index("--decode") + 1] == f"http://{cell['name']}-decode.gpu.svc:8000"
            assert args[args.index("--policy") + 1] == "round_robin"


def test_probes_are_sized_for_model_load(helm_home: Path) -> None:
    docs = render(
        "vllm-pd",
        helm_home,
        [CHARTS / "vllm-pd" / "ci" / "pd-and-aggregated-values.yaml"],
        extra=["--set", "vllm.startupTimeoutSeconds=2705", "--set", "vllm.probePeriodSeconds=10"],
    )
    for name, _, spec in pod_specs(docs):
        container = spec["containers"][0]
        if container["name"] != "vllm":
            continue
        startup = container["startupProbe"]
        budget = startup["periodSeconds"] * startup["failureThreshold"]
        assert 2705 <= budget < 2705 + startup["periodSeconds"], name
        assert startup["httpGet"]["path"] == "/health"
        assert container["readinessProbe"]["httpGet"]["path"] == "/health"


def test_cluster_options_reach_the_pods(helm_home: Path) -> None:
    docs = render("vllm-pd", helm_home, [CHARTS / "vllm-pd" / "ci" / "pd-and-aggregated-values.yaml"])
    claim = by_kind(docs, "PersistentVolumeClaim")[0]
    assert claim["spec"]["resources"]["requests"]["storage"] == "500Gi"
    for name, _, spec in pod_specs(docs):
        container = spec["containers"][0]
        if container["name"] == "router":
            assert "nodeSelector" not in spec and "tolerations" not in spec, "the router needs no GPU node"
            assert "nvidia.com/gpu" not in container["resources"]["limits"]
            continue
        assert spec["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-H200"}, name
        assert spec["tolerations"][0]["key"] == "nvidia.com/gpu"
        assert spec["priorityClassName"] == "gpu-canary"
        assert container["resources"]["limits"]["nvidia.com/gpu"] == 1
        env = env_of(container)
        assert env["HF_TOKEN_PATH"] == "/var/run/secrets/huggingface/token"
        assert env["HF_HOME"] == "/models/huggingface"
        volumes = {v["name"]: v for v in spec["volumes"]}
        assert volumes["hf-token"]["secret"]["secretName"] == "hf-token"
        assert volumes["model-cache"]["persistentVolumeClaim"]["claimName"] == claim["metadata"]["name"]
        assert volumes["shm"]["emptyDir"]["medium"] == "Memory"
        if "VLLM_NIXL_SIDE_CHANNEL_PORT" in env:
            assert env["UCX_TLS"] == "rc,cuda_copy,cuda_ipc"
            assert env["UCX_NET_DEVICES"] == "mlx5_0:1"
            assert env["UCX_RNDV_THRESH"] == "8192"


def test_multinode_cells_are_leaderworkersets(crds: dict[tuple[str, str], dict[str, Any]], helm_home: Path) -> None:
    docs = render("vllm-pd", helm_home, [CHARTS / "vllm-pd" / "ci" / "multinode-rdma-values.yaml"])
    assert validate(docs, crds) == []
    sets = by_kind(docs, "LeaderWorkerSet")
    assert sorted(s["metadata"]["name"] for s in sets) == [
        "dsv4-agg-flashmla-b256-fp8-v2-patched-aggregated",
        "dsv4-pd-flashmla-p256-d256-fp8-v2-patched-decode",
        "dsv4-pd-flashmla-p256-d256-fp8-v2-patched-prefill",
    ]
    prefill = named(docs, "LeaderWorkerSet", "dsv4-pd-flashmla-p256-d256-fp8-v2-patched-prefill")
    lwt = prefill["spec"]["leaderWorkerTemplate"]
    assert lwt["size"] == 2
    leader = lwt["leaderTemplate"]["spec"]["containers"][0]
    args = leader["args"]
    assert "ray start --head" in args[0]
    assert args[args.index("--tensor-parallel-size") + 1] == "8"
    assert args[args.index("--pipeline-parallel-size") + 1] == "2"
    assert args[args.index("--distributed-executor-backend") + 1] == "ray"
    assert leader["resources"]["limits"]["rdma/ib"] == 1
    assert leader["securityContext"]["capabilities"]["add"] == ["IPC_LOCK"]
    worker = lwt["workerTemplate"]["spec"]["containers"][0]
    assert "LWS_LEADER_ADDRESS" in worker["args"][0]
    service = named(docs, "Service", "dsv4-pd-flashmla-p256-d256-fp8-v2-patched-prefill")
    assert service["spec"]["selector"]["canary.vllm.dev/lws-role"] == "leader"
    assert selects({"matchLabels": service["spec"]["selector"]}, lwt["leaderTemplate"]["metadata"]["labels"])
    assert not selects({"matchLabels": service["spec"]["selector"]}, lwt["workerTemplate"]["metadata"]["labels"])


def _mutated(base: Path, tmp_path: Path, dotted: str, value: Any) -> Path:
    """A copy of a values file with one key set (list indexes as numbers: cells.1.runner)."""
    data = yaml.safe_load(base.read_text())
    node: Any = data
    parts = dotted.split(".")
    for part in parts[:-1]:
        node = node[int(part)] if isinstance(node, list) else node.setdefault(part, {})
    last = parts[-1]
    if isinstance(node, list):
        node[int(last)] = value
    else:
        node[last] = value
    out = tmp_path / "mutated-values.yaml"
    out.write_text(yaml.safe_dump(data))
    return out


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("cells.1.runner", "v3", "runner"),
        ("cells.1.name", "Not_A_Label", "name"),
        ("cells.1.prefillBlockSize", 0, "prefillBlockSize"),
        ("cells.1.topology", "pd-lmcache", "topology"),
        ("vllm.gpuMemoryUtilization", 1.5, "gpuMemoryUtilization"),
        ("nixl.kvBufferDevice", "disk", "kvBufferDevice"),
        ("colour", "blue", "colour"),
    ],
)
def test_values_schema_rejects_bad_values(key: str, value: Any, message: str, tmp_path: Path, helm_home: Path) -> None:
    values = _mutated(CHARTS / "vllm-pd" / "ci" / "pd-and-aggregated-values.yaml", tmp_path, key, value)
    stderr = render_error("vllm-pd", helm_home, [values])
    assert "values don't meet the specifications of the schema" in stderr
    assert message in stderr


def test_values_schema_requires_cell_fields(tmp_path: Path, helm_home: Path) -> None:
    values = tmp_path / "v.yaml"
    values.write_text(yaml.safe_dump({"cells": [{"id": "x", "name": "x", "topology": "aggregated"}]}))
    stderr = render_error("vllm-pd", helm_home, [values])
    assert "missing propert" in stderr and "'model'" in stderr and "'decodeBlockSize'" in stderr


def test_overlong_object_names_fail_with_the_cell_named(helm_home: Path) -> None:
    stderr = render_error(
        "vllm-pd",
        helm_home,
        [CHARTS / "vllm-pd" / "ci" / "multinode-rdma-values.yaml"],
        ["--set", "namePrefix=a-much-longer-prefix"],
    )
    assert "pd.flashmla.p256-d256.fp8.v2.patched" in stderr
    assert "shorten namePrefix" in stderr


def test_multinode_parallelism_must_match_gpus(tmp_path: Path, helm_home: Path) -> None:
    values = _mutated(
        CHARTS / "vllm-pd" / "ci" / "multinode-rdma-values.yaml", tmp_path, "cells.0.multiNode.pipelineParallelSize", 1
    )
    stderr = render_error("vllm-pd", helm_home, [values])
    assert "must equal gpus" in stderr


# --------------------------------------------------------------------------- canary chart


@pytest.mark.parametrize("values", CANARY_CI, ids=lambda p: p.name)
def test_canary_renders_valid_manifests(
    values: Path, crds: dict[tuple[str, str], dict[str, Any]], helm_home: Path
) -> None:
    docs = render("canary", helm_home, [values])
    assert validate(docs, crds) == []
    counted = kinds(docs)
    assert counted["CronJob"] == 1
    assert counted["PodMonitor"] == 1 and counted["ServiceMonitor"] == 1
    assert "ClusterRole" not in counted and "ClusterRoleBinding" not in counted


def test_canary_cronjob_settings(helm_home: Path) -> None:
    docs = render("canary", helm_home, [CHARTS / "canary" / "ci" / "full-values.yaml"])
    cronjob = by_kind(docs, "CronJob")[0]["spec"]
    assert cronjob["concurrencyPolicy"] == "Forbid"
    assert cronjob["schedule"] == "30 2 * * *"
    assert cronjob["successfulJobsHistoryLimit"] == 3 and cronjob["failedJobsHistoryLimit"] == 3
    job_spec = cronjob["jobTemplate"]["spec"]
    assert job_spec["activeDeadlineSeconds"] == 14400
    assert job_spec["backoffLimit"] == 0
    one_shot = by_kind(docs, "Job")[0]
    assert one_shot["metadata"]["name"].endswith("-once-1")
    for spec in (job_spec["template"]["spec"], one_shot["spec"]["template"]["spec"]):
        container = spec["containers"][0]
        assert container["image"].endswith("@sha256:" + "0123456789abcdef" * 4)
        env = env_of(container)
        assert env["PUSHGATEWAY_URL"] == "http://prometheus-pushgateway.monitoring:9091"
        args = container["args"]
        assert args[:2] == ["run", "/etc/canary/config.yaml"]
        assert "target.kubernetes.namespace=gpu-cells" in args
        assert "target.kubernetes.release=vllm-pd" in args
        assert args[-1] == "--pairwise"
        config_volume = next(v for v in spec["volumes"] if v["name"] == "config")
        configmap = named(docs, "ConfigMap", config_volume["configMap"]["name"])
        assert "config.yaml" in configmap["data"]
        # a dataset (or model) directory of the user's, beside the pod's own volumes
        gsm8k = next(v for v in spec["volumes"] if v["name"] == "gsm8k")
        assert gsm8k["persistentVolumeClaim"]["claimName"] == "gsm8k-mirror"
        mount = next(m for m in container["volumeMounts"] if m["name"] == "gsm8k")
        assert mount == {"name": "gsm8k", "mountPath": "/data/gsm8k", "readOnly": True}
        assert {"config", "scratch"} <= {v["name"] for v in spec["volumes"]}


def test_canary_rbac_is_read_only_and_namespaced(helm_home: Path) -> None:
    docs = render("canary", helm_home, [CHARTS / "canary" / "ci" / "full-values.yaml"], namespace="ops")
    role = by_kind(docs, "Role")[0]
    assert role["metadata"]["namespace"] == "gpu-cells"
    assert role["rules"] == [
        {"apiGroups": [""], "resources": ["pods", "pods/log", "services"], "verbs": ["get", "list", "watch"]}
    ]
    binding = by_kind(docs, "RoleBinding")[0]
    assert binding["metadata"]["namespace"] == "gpu-cells"
    account = by_kind(docs, "ServiceAccount")[0]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": account["metadata"]["name"], "namespace": "ops"}]
    cron_pod = by_kind(docs, "CronJob")[0]["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    assert cron_pod["serviceAccountName"] == account["metadata"]["name"]


def test_canary_example_config_is_a_valid_matrix(helm_home: Path) -> None:
    docs = render("canary", helm_home, [CANARY_READER])
    text = by_kind(docs, "ConfigMap")[0]["data"]["config.yaml"]
    config = validate_config(yaml.safe_load(text), "helm/canary values.yaml config")
    assert config.target.kind == "kubernetes"
    assert plan(config).planned(), "the example matrix plans no cell"


def test_canary_config_from_a_file(helm_home: Path) -> None:
    docs = render("canary", helm_home, extra=["--set-file", f"config={REPO / 'configs' / 'h200-mrv2-pd.yaml'}"])
    text = by_kind(docs, "ConfigMap")[0]["data"]["config.yaml"]
    assert yaml.safe_load(text) == yaml.safe_load((REPO / "configs" / "h200-mrv2-pd.yaml").read_text())


def test_canary_rejects_a_config_that_is_not_yaml(helm_home: Path) -> None:
    stderr = render_error("canary", helm_home, [], ["--set", "config=a: [b"])
    assert "config is not valid YAML" in stderr


def test_prometheus_rule_carries_the_alert_rules_file(helm_home: Path) -> None:
    rules = yaml.safe_load((CHARTS / "canary" / "files" / "canary-rules.yaml").read_text())
    docs = render("canary", helm_home, [CHARTS / "canary" / "ci" / "full-values.yaml"])
    assert rules.get("groups"), "helm/canary/files/canary-rules.yaml has no rule groups: run `make chart-files`"
    rule = by_kind(docs, "PrometheusRule")[0]
    assert rule["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert rule["spec"]["groups"] == rules["groups"]


def test_prometheus_rule_validates_with_sample_rules(
    tmp_path: Path, crds: dict[tuple[str, str], dict[str, Any]], helm_home: Path
) -> None:
    """Independent of the rules file's state: a copy of the chart with one rule group."""
    import shutil

    chart = tmp_path / "canary"
    shutil.copytree(CHARTS / "canary", chart)
    sample = {
        "groups": [
            {
                "name": "g",
                "rules": [
                    {
                        "alert": "A",
                        "expr": "up == 0",
                        "labels": {"severity": "x"},
                        "annotations": {"summary": "{{ $labels.cell }} down"},
                    }
                ],
            }
        ]
    }
    (chart / "files" / "canary-rules.yaml").write_text(yaml.safe_dump(sample))
    result = run_helm(["template", "c", str(chart), "--namespace", "x", "-f", str(CANARY_READER)], helm_home)
    assert result.returncode == 0, result.stderr
    docs = [d for d in yaml.safe_load_all(result.stdout) if d]
    rule = by_kind(docs, "PrometheusRule")[0]
    assert rule["spec"]["groups"] == sample["groups"]
    assert validate([rule], crds) == []


def test_dashboards_configmap_for_the_grafana_sidecar(tmp_path: Path, helm_home: Path) -> None:
    import shutil

    chart = tmp_path / "canary"
    shutil.copytree(CHARTS / "canary", chart)
    dashboard = {"title": "vLLM canary", "panels": [], "uid": "canary"}
    (chart / "files" / "dashboards" / "canary-matrix.json").write_text(json.dumps(dashboard))
    result = run_helm(["template", "c", str(chart), "--namespace", "x", "-f", str(CANARY_READER)], helm_home)
    assert result.returncode == 0, result.stderr
    docs = [d for d in yaml.safe_load_all(result.stdout) if d]
    configmap = named(docs, "ConfigMap", "c-canary-dashboards")
    assert configmap["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(configmap["data"]["canary-matrix.json"]) == dashboard


def test_monitors_select_the_vllm_pd_pods_and_routers(helm_home: Path) -> None:
    cells = render(
        "vllm-pd", helm_home, [CHARTS / "vllm-pd" / "ci" / "pd-and-aggregated-values.yaml"], release="vllm-pd"
    )
    canary = render("canary", helm_home, [CANARY_READER])
    pod_monitor = by_kind(canary, "PodMonitor")[0]["spec"]
    service_monitor = by_kind(canary, "ServiceMonitor")[0]["spec"]
    for _, meta, _ in pod_specs(cells):
        role = meta["labels"]["canary.vllm.dev/role"]
        assert selects(pod_monitor["selector"], meta["labels"]) == (role != "router"), role
    for service in by_kind(cells, "Service"):
        labels = service["metadata"]["labels"]
        assert selects(service_monitor["selector"], labels) == (labels["canary.vllm.dev/role"] == "router")
        if labels["canary.vllm.dev/role"] == "router":
            assert "metrics" in [p["name"] for p in service["spec"]["ports"]]
    targets = {r["targetLabel"]: r["sourceLabels"][0] for r in pod_monitor["podMetricsEndpoints"][0]["relabelings"]}
    assert targets["cell"] == "__meta_kubernetes_pod_annotation_canary_vllm_dev_cell_id"


def test_network_policies_let_the_controller_and_peers_in(helm_home: Path) -> None:
    cells = render("vllm-pd", helm_home, [CHARTS / "vllm-pd" / "ci" / "pd-and-aggregated-values.yaml"])
    canary = render("canary", helm_home, [CANARY_READER])
    controller_labels = by_kind(canary, "CronJob")[0]["spec"]["jobTemplate"]["spec"]["template"]["metadata"]["labels"]
    servers = next(p for p in by_kind(cells, "NetworkPolicy") if p["metadata"]["name"].endswith("-vllm-servers"))
    routers = next(p for p in by_kind(cells, "NetworkPolicy") if p["metadata"]["name"].endswith("-vllm-routers"))
    for _, meta, _ in pod_specs(cells):
        labels = meta["labels"]
        is_router = labels["canary.vllm.dev/role"] == "router"
        assert selects(servers["spec"]["podSelector"], labels) == (not is_router)
        assert selects(routers["spec"]["podSelector"], labels) == is_router
        # the router and the NIXL peer reach the servers on any port through their cell's own policy
        cell = labels["canary.vllm.dev/cell"]
        peers = next(p for p in by_kind(cells, "NetworkPolicy") if p["metadata"]["name"] == f"{cell}-peers")
        assert selects(peers["spec"]["ingress"][0]["from"][0]["podSelector"], labels)
    for policy in (servers, routers):
        peers = policy["spec"]["ingress"][-1]["from"]
        assert any("podSelector" in p and selects(p["podSelector"], controller_labels) for p in peers)


def test_every_container_is_hardened(helm_home: Path) -> None:
    docs = render("vllm-pd", helm_home, [CHARTS / "vllm-pd" / "ci" / "pd-and-aggregated-values.yaml"])
    docs += render("vllm-pd", helm_home, [CHARTS / "vllm-pd" / "ci" / "multinode-rdma-values.yaml"])
    docs += render("canary", helm_home, [CHARTS / "canary" / "ci" / "full-values.yaml"])
    seen = 0
    for name, _, spec in pod_specs(docs):
        pod_security = spec["securityContext"]
        assert pod_security["runAsNonRoot"] is True, name
        assert pod_security["runAsUser"] >= 10000, name
        assert pod_security["seccompProfile"] == {"type": "RuntimeDefault"}, name
        is_controller = name.startswith(("CronJob/", "Job/"))
        assert spec["automountServiceAccountToken"] is is_controller, name
        for container in spec["containers"]:
            security = container["securityContext"]
            assert security["allowPrivilegeEscalation"] is False, name
            assert security["readOnlyRootFilesystem"] is True, name
            assert security["capabilities"]["drop"] == ["ALL"], name
            assert set(security["capabilities"].get("add", [])) <= {"IPC_LOCK"}, name
            assert {"cpu", "memory"} <= set(container["resources"]["limits"]), name
            assert container["imagePullPolicy"] == "Always", name
            seen += 1
    assert seen >= 10


def test_kubernetes_validate_cli_agrees(tmp_path: Path, helm_home: Path) -> None:
    """The same check through the kubernetes-validate command (-k 1.33.0 --strict) on a rendered file."""
    import sys

    docs = render("vllm-pd", helm_home, [CHARTS / "vllm-pd" / "ci" / "pd-and-aggregated-values.yaml"])
    manifest = tmp_path / "vllm-pd.yaml"
    manifest.write_text(yaml.safe_dump_all(docs))
    cli = Path(sys.executable).parent / "kubernetes-validate"
    result = subprocess.run(
        [str(cli), "-k", "1.33.0", "--strict", str(manifest)], capture_output=True, text=True, timeout=300, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count(" passed for resource ") == len(docs)
    broken = yaml.safe_load_all(manifest.read_text())
    broken_docs = list(broken)
    broken_docs[-1]["spec"]["replicaz"] = 1
    manifest.write_text(yaml.safe_dump_all(broken_docs))
    result = subprocess.run(
        [str(cli), "-k", "1.33.0", "--strict", str(manifest)], capture_output=True, text=True, timeout=300, check=False
    )
    assert result.returncode != 0 and "replicaz" in result.stdout


def test_role_env_reaches_only_its_role(helm_home: Path) -> None:
    # A CPU cluster without the static CPU manager binds each role to cores of its own (values.yaml).
    extra = [
        "--set-json",
        'vllm.roleEnv.prefill=[{"name": "VLLM_CPU_OMP_THREADS_BIND", "value": "0-3"}]',
        "--set-json",
        'vllm.roleEnv.decode=[{"name": "VLLM_CPU_OMP_THREADS_BIND", "value": "4-7"}]',
    ]
    values = [CHARTS / "vllm-pd" / "ci" / "pd-and-aggregated-values.yaml"]
    docs = render("vllm-pd", helm_home, values, extra=extra)
    seen: dict[str, str | None] = {}
    for name, _, spec in pod_specs(docs):
        container = spec["containers"][0]
        if container["name"] == "router":
            continue
        role = name.rsplit("-", 1)[-1]
        seen[role] = env_of(container).get("VLLM_CPU_OMP_THREADS_BIND")
    assert seen.get("prefill") == "0-3" and seen.get("decode") == "4-7", seen
    assert any(value is None for role, value in seen.items() if role not in ("prefill", "decode")), seen
    bad = ["--set-json", 'vllm.roleEnv.router=[{"name": "X", "value": "1"}]']
    assert "roleEnv" in render_error("vllm-pd", helm_home, values, extra=bad)
