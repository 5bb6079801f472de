"""NIXL transport and P/D placement, from the config to the pods (issue 11, point 5).

target.kubernetes.nixl (placement same-node | cross-node, UCX_TLS) is validated by the config
model, rendered per P/D cell by canary.targets.kubernetes.values, and turned by helm/vllm-pd into UCX_TLS and a
required pod (anti-)affinity of decode to its prefill pod. Every GPU config is rendered through the
real helm and validated strictly. Also: every vLLM server is launched with
--disable-access-log-for-endpoints, so probes and scrapes do not push the startup lines out of the
log tail (point 2).
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml
from k8s_helpers import (
    CHARTS,
    REPO,
    by_kind,
    env_of,
    load_crd_schemas,
    render,
    render_error,
    run_helm,
    selects,
    validate,
)

from canary.config import DEFAULT_UCX_TLS, CanaryConfig
from canary.config.load import load_config, validate_config
from canary.errors import ConfigError
from canary.plan.matrix import plan
from canary.targets.kubernetes.values import render_values

GPU_CONFIGS = {
    "h200-mrv2-pd": ("same-node", "cuda_copy,cuda_ipc,rc"),
    "deepseek-v4": ("cross-node", "rc,cuda_copy"),
}
PD_CI = CHARTS / "vllm-pd" / "ci" / "pd-and-aggregated-values.yaml"
MULTINODE_CI = CHARTS / "vllm-pd" / "ci" / "multinode-rdma-values.yaml"
REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"

BASE: dict[str, Any] = {
    "version": 1,
    "name": "nixl-test",
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
    "target": {"kind": "kubernetes", "kubernetes": {"namespace": "gpu", "release": "t"}},
}


def _config(nixl: dict[str, Any] | None = None, platform: str = "sm90") -> CanaryConfig:
    data = copy.deepcopy(BASE)
    data["platform"] = platform
    if nixl is not None:
        data["target"]["kubernetes"]["nixl"] = nixl
    return validate_config(data, "nixl.yaml")


@pytest.fixture(scope="module")
def helm_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("helm-home")


@pytest.fixture(scope="module")
def crds() -> dict[tuple[str, str], dict[str, Any]]:
    return load_crd_schemas()


# --------------------------------------------------------------------------- config model


def test_placement_defaults_to_same_node_with_an_explicit_transport() -> None:
    nixl = _config().target.kubernetes.nixl
    assert (nixl.placement, nixl.tls) == ("same-node", "cuda_copy,cuda_ipc,rc")
    assert _config({"placement": "cross-node"}).target.kubernetes.nixl.tls == DEFAULT_UCX_TLS["cross-node"]
    assert _config({"ucx_tls": " tcp , cuda_copy "}).target.kubernetes.nixl.tls == "tcp,cuda_copy"


@pytest.mark.parametrize(
    ("nixl", "platform", "where", "message"),
    [
        ({"placement": "same-rack"}, "sm90", "target.kubernetes.nixl.placement", "'same-node' or 'cross-node'"),
        ({"ucx_tls": "rc,,cuda_copy"}, "sm90", "target.kubernetes.nixl.ucx_tls", "empty transport name"),
        ({"ucx_tls": "rc,cuda_copy,nvlink"}, "sm90", "target.kubernetes.nixl.ucx_tls", "unknown UCX transport"),
        ({"ucx_tls": "^ud"}, "sm90", "target.kubernetes.nixl.ucx_tls", "no '^' exclusions"),
        ({"ucx_tls": "all"}, "sm90", "target.kubernetes.nixl.ucx_tls", "no 'all'"),
        ({"ucx_tls": "rc,rc,cuda_copy"}, "sm90", "target.kubernetes.nixl.ucx_tls", "duplicate"),
        (
            {"placement": "cross-node", "ucx_tls": "cuda_copy,cuda_ipc"},
            "sm90",
            "target.kubernetes.nixl",
            "no transport that leaves the node",
        ),
        ({"ucx_tls": "tcp"}, "sm90", "target.kubernetes.nixl.ucx_tls", "lists no cuda_copy"),
        ({"transport": "rc"}, "sm90", "target.kubernetes.nixl.transport", "unknown key"),
    ],
)
def test_bad_transport_settings_are_named(nixl: dict[str, Any], platform: str, where: str, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        _config(nixl, platform)
    text = str(info.value)
    assert text.startswith(f"nixl.yaml: {where}:"), text
    assert message in text, text


def test_a_cpu_platform_needs_no_cuda_transport() -> None:
    assert _config({"ucx_tls": "tcp"}, platform="cpu").target.kubernetes.nixl.tls == "tcp"


@pytest.mark.parametrize("name", sorted(GPU_CONFIGS))
def test_gpu_configs_name_their_placement_and_transport(name: str) -> None:
    config = load_config(REPO / "configs" / f"{name}.yaml")
    nixl = config.target.kubernetes.nixl
    assert (nixl.placement, nixl.ucx_tls) == GPU_CONFIGS[name], "set explicitly in the config, not defaulted"


# --------------------------------------------------------------------------- values and chart


def test_render_values_gives_each_pd_cell_its_transport() -> None:
    config = _config({"placement": "cross-node", "ucx_tls": "tcp,cuda_copy"})
    values = render_values(config, list(plan(config).planned()))
    for cell in values["cells"]:
        if cell["topology"] == "pd-nixl":
            assert cell["nixl"] == {"placement": "cross-node", "ucxTls": "tcp,cuda_copy"}
        else:
            assert "nixl" not in cell


def _engine_pods(docs: list[dict[str, Any]]) -> dict[tuple[str, str], tuple[dict[str, Any], dict[str, Any]]]:
    """(cell name, role) -> (pod template metadata, pod spec) of every vLLM Deployment."""
    out: dict[tuple[str, str], tuple[dict[str, Any], dict[str, Any]]] = {}
    for doc in by_kind(docs, "Deployment"):
        labels = doc["metadata"]["labels"]
        if labels["canary.vllm.dev/role"] != "router":
            template = doc["spec"]["template"]
            out[labels["canary.vllm.dev/cell"], labels["canary.vllm.dev/role"]] = (
                template["metadata"],
                template["spec"],
            )
    return out


def _assert_placed(docs: list[dict[str, Any]], placement: str, tls: str, *, pd_cells: int) -> None:
    pods = _engine_pods(docs)
    seen = 0
    for (cell, role), (meta, spec) in pods.items():
        container = spec["containers"][0]
        args, env = container["args"], env_of(container)
        assert args[args.index("--disable-access-log-for-endpoints") + 1] == "/health,/metrics", (cell, role)
        affinity = spec.get("affinity", {})
        if role == "aggregated":
            assert "UCX_TLS" not in env and "canary.vllm.dev/ucx-tls" not in meta["annotations"]
            assert REQUIRED not in affinity.get("podAffinity", {}) and REQUIRED not in affinity.get(
                "podAntiAffinity", {}
            )
            continue
        assert env["UCX_TLS"] == tls, (cell, role)
        assert meta["annotations"]["canary.vllm.dev/nixl-placement"] == placement
        assert meta["annotations"]["canary.vllm.dev/ucx-tls"] == tls
        if role == "prefill":  # prefill schedules freely; decode follows it
            assert REQUIRED not in affinity.get("podAffinity", {}) and REQUIRED not in affinity.get(
                "podAntiAffinity", {}
            )
            continue
        kind, other = (
            ("podAffinity", "podAntiAffinity") if placement == "same-node" else ("podAntiAffinity", "podAffinity")
        )
        (term,) = affinity[kind][REQUIRED]
        assert REQUIRED not in affinity.get(other, {})
        assert term["topologyKey"] == "kubernetes.io/hostname"
        prefill_meta, _ = pods[cell, "prefill"]
        assert selects(term["labelSelector"], prefill_meta["labels"]), "the rule must select this cell's prefill pod"
        assert not selects(term["labelSelector"], meta["labels"]), "... and not the decode pod itself"
        for (other_cell, _role), (other_meta, _) in pods.items():
            if other_cell != cell:
                assert not selects(term["labelSelector"], other_meta["labels"]), f"{cell} is tied to {other_cell}"
        seen += 1
    assert seen == pd_cells


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(GPU_CONFIGS))
def test_each_gpu_config_renders_valid_manifests_with_its_placement(
    name: str, tmp_path: Path, helm_home: Path, crds: dict[tuple[str, str], dict[str, Any]]
) -> None:
    """The whole matrix of each GPU config, through canary.targets.kubernetes.values and the real helm; every P/D
    cell placed and given its transport as the config says. Strict validation (Kubernetes 1.33)
    covers the shared objects and one cell of every (topology, image, backend, runner, KV dtype):
    the other cells differ from those only in block-size values (validating all of h200-mrv2-pd's
    560-cell matrix took 95 s here)."""
    config = load_config(REPO / "configs" / f"{name}.yaml")
    values = render_values(config, list(plan(config).planned()))
    path = tmp_path / "values.yaml"
    path.write_text(yaml.safe_dump(values, sort_keys=False), encoding="utf-8")
    lint = run_helm(["lint", "--strict", str(CHARTS / "vllm-pd"), "-f", str(path)], helm_home)
    assert lint.returncode == 0, lint.stdout + lint.stderr
    kube = config.target.kubernetes
    args = ["template", kube.release, str(CHARTS / "vllm-pd"), "--namespace", kube.namespace, "-f", str(path)]
    rendered = run_helm(args, helm_home)
    assert rendered.returncode == 0, rendered.stderr
    # libyaml: the pure-Python loader needs a minute for the ~1,500 objects of h200-mrv2-pd
    docs = [doc for doc in yaml.load_all(rendered.stdout, Loader=yaml.CSafeLoader) if doc]
    shapes: dict[tuple[str, ...], str] = {}
    for cell in values["cells"]:
        key = tuple(cell[k] for k in ("topology", "imageKey", "attentionBackend", "runner", "kvCacheDtype"))
        shapes.setdefault(key, cell["name"])
    sample = [
        d for d in docs if d["metadata"].get("labels", {}).get("canary.vllm.dev/cell") in (None, *shapes.values())
    ]
    assert len(sample) >= 3 * len(shapes)
    assert validate(sample, crds) == []
    placement, tls = GPU_CONFIGS[name]
    pd_cells = sum(1 for cell in values["cells"] if cell["topology"] == "pd-nixl")
    assert pd_cells > 0
    _assert_placed(docs, placement, tls, pd_cells=pd_cells)


def test_cells_without_their_own_setting_take_the_charts(tmp_path: Path, helm_home: Path) -> None:
    data = yaml.safe_load(PD_CI.read_text())
    for cell in data["cells"]:
        cell.pop("nixl", None)
    data["nixl"]["placement"] = "cross-node"
    data["nixl"]["ucx"]["tls"] = "tcp,cuda_copy"
    path = tmp_path / "values.yaml"
    path.write_text(yaml.safe_dump(data))
    _assert_placed(render("vllm-pd", helm_home, [path]), "cross-node", "tcp,cuda_copy", pd_cells=1)


def test_the_access_log_flag_can_be_dropped(helm_home: Path) -> None:
    docs = render("vllm-pd", helm_home, [PD_CI], extra=["--set-json", "vllm.disableAccessLogForEndpoints=[]"])
    for _, spec in _engine_pods(docs).values():
        assert "--disable-access-log-for-endpoints" not in spec["containers"][0]["args"]


def test_multinode_pd_cells_cannot_be_same_node(helm_home: Path) -> None:
    docs = render("vllm-pd", helm_home, [MULTINODE_CI])
    decode = next(d for d in by_kind(docs, "LeaderWorkerSet") if d["metadata"]["name"].endswith("-decode"))
    for template in ("leaderTemplate", "workerTemplate"):
        spec = decode["spec"]["leaderWorkerTemplate"][template]["spec"]
        (term,) = spec["affinity"]["podAntiAffinity"][REQUIRED]
        assert term["labelSelector"]["matchLabels"]["canary.vllm.dev/role"] == "prefill"
    stderr = render_error("vllm-pd", helm_home, [MULTINODE_CI], ["--set", "nixl.placement=same-node"])
    assert 'cell "pd.flashmla.p256-d256.fp8.v2.patched": placement same-node cannot hold multi-node' in stderr


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("nixl.placement", "same-rack", "placement"),
        ("nixl.ucx.tls", "rc;tcp", "tls"),
        ("cells.1.nixl", {"placement": "anywhere"}, "placement"),
        ("cells.1.nixl", {"ucxTls": ",rc"}, "ucxTls"),
        ("cells.1.nixl", {"transport": "rc"}, "transport"),
        ("vllm.disableAccessLogForEndpoints", ["health"], "disableAccessLogForEndpoints"),
    ],
)
def test_values_schema_rejects_bad_placement_values(
    key: str, value: Any, message: str, tmp_path: Path, helm_home: Path
) -> None:
    data = yaml.safe_load(PD_CI.read_text())
    node: Any = data
    *parents, last = key.split(".")
    for part in parents:
        node = node[int(part)] if isinstance(node, list) else node.setdefault(part, {})
    node[int(last) if isinstance(node, list) else last] = value
    path = tmp_path / "values.yaml"
    path.write_text(yaml.safe_dump(data))
    stderr = render_error("vllm-pd", helm_home, [path])
    assert "values don't meet the specifications of the schema" in stderr
    assert message in stderr
