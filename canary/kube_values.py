"""Turn the planned cells of a matrix config into values of the helm/vllm-pd chart.

`canary render-values CONFIG -o values.yaml` calls `render_values`. The output sets only what the
matrix decides (the run id, the cells, the router image); cluster settings (GPUs, node selectors,
RDMA, the model cache) stay in the chart's values or another `-f` file.

Also here: the patch-series hash, the same definition as `docker/apply-series.sh --hash`, so a
cell's annotation and the image label built from the same series agree.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Any

from canary.config import CanaryConfig
from canary.errors import CanaryError
from canary.matrix import K8S_NAME_MAX, Cell
from canary.paths import REPO_ROOT

DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
LABEL_VALUE_MAX = 63
BUILTIN_MODEL_PREFIX = "builtin:"


class KubeValuesError(CanaryError):
    """A matrix that cannot be deployed by the vllm-pd chart."""

    exit_code = 2


def series_entries(series_file: Path) -> list[str]:
    """Patch file names listed in a series file, in order (comments and blank lines dropped)."""
    try:
        text = series_file.read_text(encoding="utf-8")
    except OSError as exc:
        raise KubeValuesError(f"{series_file}: cannot read the patch series: {exc.strerror}") from None
    entries = ["".join(line.split("#", 1)[0].split()) for line in text.splitlines()]
    names = [entry for entry in entries if entry]
    if not names:
        raise KubeValuesError(f"{series_file}: the patch series lists no patches")
    return names


def patch_series_hash(series_file: Path) -> str:
    """sha256 over "<sha256 of patch>  <name>\\n" for each patch in series order.

    Identical to `docker/apply-series.sh --hash` (tests/images keeps them equal), which is what the
    patched image carries as the label dev.vllm.canary.patch-series-sha256.
    """
    manifest = hashlib.sha256()
    for name in series_entries(series_file):
        patch = series_file.parent / name
        try:
            digest = hashlib.sha256(patch.read_bytes()).hexdigest()
        except OSError as exc:
            raise KubeValuesError(f"{series_file}: patch {name!r} cannot be read: {exc.strerror}") from None
        manifest.update(f"{digest}  {name}\n".encode())
    return manifest.hexdigest()


def resolve_series(path_text: str, base_dir: Path | None = None) -> Path:
    """A series path from a config: absolute, relative to base_dir, or relative to the repository."""
    path = Path(path_text)
    candidates = [path] if path.is_absolute() else [(base_dir or Path.cwd()) / path, REPO_ROOT / path]
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    tried = ", ".join(str(c) for c in candidates)
    raise KubeValuesError(f"patch series {path_text!r} not found (tried {tried})")


def _check_cell(cell: Cell) -> None:
    if not DNS_LABEL.match(cell.k8s_name) or len(cell.k8s_name) > K8S_NAME_MAX:
        raise KubeValuesError(
            f"cell {cell.id}: k8s_name {cell.k8s_name!r} is not a DNS-1123 label of at most {K8S_NAME_MAX} characters"
        )
    if cell.model_source.startswith(BUILTIN_MODEL_PREFIX):
        raise KubeValuesError(
            f"cell {cell.id}: model source {cell.model_source!r} exists only on the local target; "
            "give the model a Hugging Face id or a path inside the image for Kubernetes"
        )
    if not LABEL_VALUE.match(cell.image) or len(cell.image) > LABEL_VALUE_MAX:
        raise KubeValuesError(f"cell {cell.id}: image key {cell.image!r} cannot be a Kubernetes label value")


def _cell_values(config: CanaryConfig, cell: Cell, series_hashes: dict[str, str]) -> dict[str, Any]:
    model = next((m for m in config.models if m.name == cell.model), None)
    if model is None:
        raise KubeValuesError(f"cell {cell.id}: model {cell.model!r} is not in the config")
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
        "tensorParallelSize": model.tensor_parallel_size,
        "gpus": model.tensor_parallel_size,
    }
    if model.extra_args:
        values["extraArgs"] = list(model.extra_args)
    if cell.risks:
        values["risks"] = list(cell.risks)
    if cell.image in series_hashes:
        values["patchSeriesSha256"] = series_hashes[cell.image]
    return values


def router_image(config: CanaryConfig) -> str | None:
    """The image for vllm-router: the first image built with a patch series.

    Such an image comes from docker/vllm-patched/Dockerfile, which installs vllm-router; the
    upstream vLLM image does not carry it. None: keep the chart's router.image.
    """
    return next((spec.ref for spec in config.images.values() if spec.patches), None)


def render_values(
    config: CanaryConfig, cells: list[Cell], *, run: str | None = None, config_dir: Path | None = None
) -> dict[str, Any]:
    """vllm-pd values for the planned cells (cells of any other status are left out).

    `run` (default: the config name) becomes the label canary.vllm.dev/run; `config_dir` is where
    relative patch-series paths are looked up first (then the repository root).
    """
    run_id = run or config.name
    if not LABEL_VALUE.match(run_id) or len(run_id) > LABEL_VALUE_MAX:
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
    series_hashes = {
        key: patch_series_hash(resolve_series(spec.patches, config_dir))
        for key, spec in config.images.items()
        if spec.patches and any(cell.image == key for cell in planned)
    }
    values: dict[str, Any] = {
        "run": run_id,
        "cells": [_cell_values(config, cell, series_hashes) for cell in planned],
    }
    image = router_image(config)
    if image is not None and any(cell.topology == "pd-nixl" for cell in planned):
        values["router"] = {"image": image}
    return values
