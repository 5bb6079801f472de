"""The vllm-pd chart carries the KV layout probe, and deploys mixed pairs side by side.

- Every vLLM container mounts the probe (a ConfigMap holding the same module the local target
  loads) and has it on PYTHONPATH; `vllm.layoutProbe.enabled=false` removes all of it.
- The controller reads the probe's records from the pod log (`canary-layout-probe: {json}`).
- A mixed pair (prefill on one image/runner, decode on another: a rolling upgrade) renders each
  side with its own image, runner env, labels and annotations.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from k8s_helpers import CHARTS, REPO, by_kind, env_of, load_crd_schemas, named, render, validate
from test_k8s_charts import SMALL_MATRIX

from canary.config.load import validate_config
from canary.plan.matrix import plan
from canary.targets.base import ServerInfo
from canary.targets.kubernetes.values import render_values

MIXED = copy.deepcopy(SMALL_MATRIX)
MIXED["matrix"]["include"] = [
    {
        "backend": "FLASHINFER",
        "prefill_block_size": 128,
        "decode_block_size": 128,
        "topology": "pd-nixl",
        "image": "baseline",
        "runner": "v1",
        "decode_image": "patched",
        "decode_runner": "v2",
    }
]
MIXED_ID = "pd.flashinfer.p128-d128.auto.v1-v2.baseline-patched"


@pytest.fixture(scope="module")
def helm_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("helm-home")


@pytest.fixture(scope="module")
def mixed_values(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    config = validate_config(MIXED, "MIXED")
    values = render_values(config, list(plan(config).planned()))
    path = tmp_path_factory.mktemp("values") / "mixed-values.yaml"
    path.write_text(yaml.safe_dump(values, sort_keys=False), encoding="utf-8")
    return path, values


def _vllm_containers(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        c
        for d in by_kind(docs, "Deployment")
        if d["metadata"]["labels"].get("canary.vllm.dev/role") != "router"
        for c in d["spec"]["template"]["spec"]["containers"]
    ]


def test_every_vllm_container_runs_the_layout_probe(mixed_values: tuple[Path, dict[str, Any]], helm_home: Path) -> None:
    path, _ = mixed_values
    docs = render("vllm-pd", helm_home, [path])
    assert validate(docs, load_crd_schemas()) == []
    (config_map,) = [d for d in by_kind(docs, "ConfigMap") if d["metadata"]["name"] == "t-layout-probe"]
    probe = (REPO / "canary" / "targets" / "engine_site" / "layout_probe.py").read_text()
    assert config_map["data"]["layout_probe.py"].strip() == probe.strip()
    site = (REPO / "canary" / "targets" / "engine_site" / "sitecustomize.py").read_text()
    assert config_map["data"]["sitecustomize.py"].strip() == site.strip()
    hook = (REPO / "canary" / "targets" / "engine_site" / "after_import.py").read_text()
    assert config_map["data"]["after_import.py"].strip() == hook.strip()
    containers = _vllm_containers(docs)
    assert containers
    for container in containers:
        env = env_of(container)
        assert env["PYTHONPATH"] == "/opt/vllm-canary/probe" and env["CANARY_LAYOUT_DIR"] == "/tmp/canary-layout"
        mount = next(m for m in container["volumeMounts"] if m["name"] == "layout-probe")
        assert mount == {"name": "layout-probe", "mountPath": "/opt/vllm-canary/probe", "readOnly": True}
        assert "CANARY_NIXL_PROGRESS_DELAY_US" not in env  # a GPU matrix keeps NIXL as shipped
        # TorchInductor's kernels go to the sized, writable home (a cache a pod may share), not /tmp
        home = next(m["mountPath"] for m in container["volumeMounts"] if m["name"] == "home")
        assert env["TORCHINDUCTOR_CACHE_DIR"].startswith(home + "/"), env
    off = render("vllm-pd", helm_home, [path], extra=["--set", "vllm.layoutProbe.enabled=false"])
    assert by_kind(off, "ConfigMap") == []
    assert all("PYTHONPATH" not in env_of(c) for c in _vllm_containers(off))


def test_a_nixl_progress_floor_reaches_the_pd_servers_through_the_engine_site(
    mixed_values: tuple[Path, dict[str, Any]], helm_home: Path
) -> None:
    # nixl.progressDelayUs: the P/D servers get CANARY_NIXL_PROGRESS_DELAY_US, read by the engine
    # site's sitecustomize.py, which stays mounted (and on PYTHONPATH) with the layout probe off; an
    # aggregated server has no NIXL agent and gets nothing; a cell's own value wins.
    path, values = mixed_values
    pd_names = {c["name"] for c in values["cells"] if c["topology"] == "pd-nixl"}
    first = next(c for c in values["cells"] if c["topology"] == "pd-nixl")
    cells = copy.deepcopy(values["cells"])
    for cell in cells:
        if cell["id"] == first["id"]:
            cell["nixl"] = {**cell["nixl"], "progressDelayUs": 250}
    cells_file = path.parent / "floor-cells.yaml"
    cells_file.write_text(yaml.safe_dump({"cells": cells}), encoding="utf-8")
    docs = render(
        "vllm-pd", helm_home, [path, cells_file],
        extra=["--set", "vllm.layoutProbe.enabled=false", "--set", "nixl.progressDelayUs=1000"],
    )  # fmt: skip
    assert validate(docs, load_crd_schemas()) == []
    (config_map,) = by_kind(docs, "ConfigMap")
    assert "sitecustomize.py" in config_map["data"] and "PROGRESS_DELAY_ENV" in config_map["data"]["sitecustomize.py"]
    seen = {}
    for deployment in by_kind(docs, "Deployment"):
        labels = deployment["metadata"]["labels"]
        if labels.get("canary.vllm.dev/role") == "router":
            continue
        env = env_of(deployment["spec"]["template"]["spec"]["containers"][0])
        seen[deployment["metadata"]["name"]] = env.get("CANARY_NIXL_PROGRESS_DELAY_US")
        assert env["PYTHONPATH"] == "/opt/vllm-canary/probe" and "CANARY_LAYOUT_DIR" not in env
    for name, floor in seen.items():
        cell_name = name.rsplit("-", 1)[0]
        if cell_name not in pd_names:
            assert floor is None, (name, floor)
        elif cell_name == first["name"]:
            assert floor == "250", (name, floor)
        else:
            assert floor == "1000", (name, floor)
    assert sorted(set(seen.values()) - {None}) == ["1000", "250"] or len(pd_names) == 1, seen


def test_mixed_pair_renders_each_side_with_its_own_image_and_runner(
    mixed_values: tuple[Path, dict[str, Any]], helm_home: Path
) -> None:
    path, values = mixed_values
    cell = next(c for c in values["cells"] if c["id"] == MIXED_ID)
    assert (cell["imageKey"], cell["decodeImageKey"], cell["runner"], cell["decodeRunner"]) == (
        "baseline",
        "patched",
        "v1",
        "v2",
    )
    assert "mixed-pair" in cell["risks"] and cell["decodePatchSeriesSha256"]
    docs = render("vllm-pd", helm_home, [path])
    sides = {}
    for role in ("prefill", "decode"):
        deployment = named(docs, "Deployment", f"{cell['name']}-{role}")
        template = deployment["spec"]["template"]
        container = template["spec"]["containers"][0]
        sides[role] = (
            container["image"],
            env_of(container)["VLLM_USE_V2_MODEL_RUNNER"],
            template["metadata"]["labels"]["canary.vllm.dev/image"],
            template["metadata"]["annotations"]["canary.vllm.dev/runner"],
            template["metadata"]["annotations"].get("canary.vllm.dev/patch-series-sha256"),
        )
    assert sides["prefill"] == ("vllm/vllm-openai:v0.33.0", "0", "baseline", "v1", None)
    assert sides["decode"] == (cell["decodeImage"], "1", "patched", "v2", cell["decodePatchSeriesSha256"])
    assert cell["decodeImage"] != cell["image"]


def test_controller_reads_the_probe_record_from_the_pod_log(tmp_path: Path) -> None:
    """Kubernetes has no layout directory to read: the record comes from the log lines the probe prints."""
    first = {"pid": 7, "kv_cache_groups": [{"logical_block_size": 128, "kernel_block_sizes": [64]}], "num_blocks": 1}
    later = {**first, "nixl": {"block_size": 64, "num_blocks": 2}}
    other_worker = {"pid": 9, "kv_cache_groups": [{"logical_block_size": 128, "kernel_block_sizes": [64]}]}
    log = tmp_path / "decode.log"
    log.write_text(
        "INFO startup\n"
        + f"canary-layout-probe: {json.dumps(first)}\n"
        + '(APIServer pid=1) INFO:     127.0.0.1:1 - "POST /v1/completions HTTP/1.1" 200 OK\n'
        + f"(EngineCore pid=7) canary-layout-probe: {json.dumps(later)}\n"
        + f"canary-layout-probe: {json.dumps(other_worker)}\n"
        + "canary-layout-probe: {not json\n"
    )
    record = ServerInfo(role="decode", base_url="http://x", log_path=log).layout()
    assert record is not None
    assert record["nixl"] == {"block_size": 64, "num_blocks": 2} and record["workers"] == 2
    assert ServerInfo(role="decode", base_url="http://x").layout() is None
    assert (CHARTS / "vllm-pd" / "files" / "layout_probe.py").is_file()
