"""Turn the planned cells of a matrix config into values of the helm/vllm-pd chart.

`canary render-values CONFIG -o values.yaml` calls `render_values`; the controller's waves
(canary.targets.kubernetes.waves) call it per wave. The output sets only what the config decides (the
run id, the cells, the router image, the pods' imagePullSecrets from target.kubernetes.image_pull_secrets,
and for P/D cells the placement of prefill and decode, NIXL's UCX_TLS and on CPU platforms its progress
floor, from target.kubernetes.nixl);
cluster settings (GPUs, node selectors, RDMA, the model cache) stay in the chart's values or another
`-f` file.

Every image a planned cell runs must be a container reference (any registry, tag or digest: the user's own
image is an image under test), and a patched one the ref `make images` builds from its series
(canary.images.table.check_image); a patched cell carries its series hash (canary.images.patchseries), the
label of the image built from the same series. The router runs its own image (router_image).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from canary.config import CanaryConfig
from canary.config.catalog import load_catalog
from canary.errors import CanaryError
from canary.images.patchseries import SeriesError, read_series, series_hash
from canary.images.table import ImageError, check_image, find_series, router_ref
from canary.model.ref import is_builtin
from canary.paths import REPO_ROOT
from canary.plan.cell import Cell
from canary.plan.kube_names import K8S_NAME_MAX, is_dns_label, is_label_value


class KubeValuesError(CanaryError):
    """A matrix that cannot be deployed by the vllm-pd chart."""

    exit_code = 2


def resolve_series(path_text: str, base_dir: Path | None = None) -> Path:
    """A series path from a config: absolute, relative to base_dir, or relative to the repository."""
    found = find_series(path_text, base_dir)
    if found is None:
        where = f"relative to {base_dir or Path.cwd()} or {REPO_ROOT}"
        raise KubeValuesError(f"patch series {path_text!r} not found ({where})")
    return found


def series_sha256(series_file: Path) -> str:
    """The series hash (canary.images.patchseries), the label dev.vllm.canary.patch-series-sha256 of its image."""
    try:
        return series_hash(read_series(series_file))
    except SeriesError as exc:
        raise KubeValuesError(str(exc)) from None


def _check_cell(cell: Cell) -> None:
    if not is_dns_label(cell.k8s_name):
        raise KubeValuesError(
            f"cell {cell.id}: k8s_name {cell.k8s_name!r} is not a DNS-1123 label of at most {K8S_NAME_MAX} characters"
        )
    if is_builtin(cell.model_source):
        raise KubeValuesError(
            f"cell {cell.id}: model source {cell.model_source!r} exists only on the local target; "
            "give the model a Hugging Face id or a path inside the image for Kubernetes"
        )
    for key in {cell.image_for("prefill"), cell.image_for("decode")}:
        if not is_label_value(key):
            raise KubeValuesError(f"cell {cell.id}: image key {key!r} cannot be a Kubernetes label value")


def kv_buffer_device(config: CanaryConfig) -> str:
    """Where the platform's NIXL connector keeps the KV buffer (catalog): `cpu` has no GPU to request."""
    return load_catalog().platforms[config.platform].kv_buffer_device


def _cell_values(config: CanaryConfig, cell: Cell, series_hashes: dict[str, str]) -> dict[str, Any]:
    model = next((m for m in config.models if m.name == cell.model), None)
    if model is None:
        raise KubeValuesError(f"cell {cell.id}: model {cell.model!r} is not in the config")
    on_host = kv_buffer_device(config) == "cpu"
    values: dict[str, Any] = {
        "id": cell.id,
        "name": cell.k8s_name,
        "topology": cell.topology,
        "model": cell.model,
        "modelSource": cell.model_source,
        "image": cell.image_ref,
        "imageKey": cell.image,
        "attentionBackend": cell.backend,
        "kvCacheDtype": cell.kv_cache_dtype,
        "runner": cell.runner,
        "prefillBlockSize": cell.prefill_block_size,
        "decodeBlockSize": cell.decode_block_size,
        "maxModelLen": model.max_model_len,
        "tensorParallelSize": cell.prefill_tp,
        # A CPU platform's pods request no GPU (its cores are the tensor-parallel ranks).
        "gpus": 0 if on_host else cell.prefill_tp,
    }
    if cell.topology == "pd-nixl" and cell.decode_tp != cell.prefill_tp:  # a P/D shape such as 2p1d
        values["decodeTensorParallelSize"] = cell.decode_tp
        values["decodeGpus"] = 0 if on_host else cell.decode_tp
    if cell.topology == "pd-nixl":
        nixl = config.target.kubernetes.nixl
        # Host memory: UCX picks its transports unless the config names them (the placement defaults
        # are CUDA transports, which a CPU engine has nothing to move with).
        values["nixl"] = {"placement": nixl.placement, "ucxTls": (nixl.ucx_tls or "") if on_host else nixl.tls}
        if on_host and nixl.progress_delay_us is not None:  # CPU engines cannot spare a polling core each
            values["nixl"]["progressDelayUs"] = nixl.progress_delay_us
    extra_args = cell.prefix_caching_args() + list(model.extra_args)
    if extra_args:
        values["extraArgs"] = extra_args
    if model.env:  # the chart sets a cell's env on each of its servers, after vllm.env and roleEnv
        values["env"] = [{"name": name, "value": value} for name, value in model.env.items()]
    if cell.risks:
        values["risks"] = list(cell.risks)
    if cell.image in series_hashes:
        values["patchSeriesSha256"] = series_hashes[cell.image]
    if cell.mixed:  # a rolling upgrade that reached one side first: decode runs its own image/runner
        values["decodeImage"] = cell.image_ref_for("decode")
        values["decodeImageKey"] = cell.image_for("decode")
        values["decodeRunner"] = cell.runner_for("decode")
        if cell.image_for("decode") in series_hashes:
            values["decodePatchSeriesSha256"] = series_hashes[cell.image_for("decode")]
    return values


def router_image() -> str:
    """The image of vllm-router: its own pinned image (docker/vllm-router, canary.images.table.router_ref)."""
    try:
        return router_ref()
    except ImageError as exc:
        raise KubeValuesError(str(exc)) from None


def _check_images(config: CanaryConfig, keys: set[str], config_dir: Path | None) -> None:
    """Every image the planned cells run is a container reference; a patched one is built by `make images`."""
    for key in sorted(keys):
        spec = config.images[key]
        try:
            problem = check_image(spec.ref, spec.patches, config_dir)
        except ImageError as exc:
            problem = str(exc)
        if problem:
            raise KubeValuesError(f"images.{key}: {problem}")


def render_values(
    config: CanaryConfig, cells: list[Cell], *, run: str | None = None, config_dir: Path | None = None
) -> dict[str, Any]:
    """vllm-pd values for the planned cells (cells of any other status are left out).

    `run` (default: the config name) becomes the label canary.vllm.dev/run; `config_dir` is where
    relative patch-series paths are looked up first (then the repository root).
    """
    run_id = run or config.name
    if not is_label_value(run_id):
        raise KubeValuesError(f"run id {run_id!r} cannot be a Kubernetes label value (<= 63 chars, [A-Za-z0-9-_.])")
    planned = [cell for cell in cells if cell.status == "planned"]
    if not planned:
        raise KubeValuesError(f"config {config.name}: no planned cells to deploy")
    seen: dict[str, str] = {}
    for cell in planned:
        _check_cell(cell)
        if cell.k8s_name in seen:
            raise KubeValuesError(
                f"cells {seen[cell.k8s_name]} and {cell.id} share the Kubernetes name {cell.k8s_name}"
            )
        seen[cell.k8s_name] = cell.id
    planned_images = {cell.image_for(role) for cell in planned for role in ("prefill", "decode")}
    series_hashes = {
        key: series_sha256(resolve_series(spec.patches, config_dir))
        for key, spec in config.images.items()
        if spec.patches and key in planned_images
    }
    _check_images(config, planned_images, config_dir)
    values: dict[str, Any] = {
        "run": run_id,
        "cells": [_cell_values(config, cell, series_hashes) for cell in planned],
    }
    if any(cell.topology == "pd-nixl" for cell in planned):
        values["router"] = {"image": router_image()}
        values["nixl"] = {"kvBufferDevice": kv_buffer_device(config)}
    secrets = config.target.kubernetes.image_pull_secrets
    if secrets:  # none given: the chart's own (or a chart_values file's) imagePullSecrets stand
        values["imagePullSecrets"] = [{"name": name} for name in secrets]
    return values
