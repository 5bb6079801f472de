"""Expand a config's matrix axes into cells, judge each against the capability catalog.

A cell is one deployment: a model, an image, an attention backend, prefill and decode block sizes,
a KV cache dtype, a model runner and a topology. The planner marks impossible cells `skipped`,
cells this platform cannot honour `unsupported` (vLLM would silently run something else), and
flags the high-risk cells: kernel block smaller than the logical block, P/D block sizes that
differ, compressed caches. Those are the cells that broke vLLM's Model Runner V2.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable, Iterator

from pydantic import BaseModel, ConfigDict, Field

from canary.config import CanaryConfig, CellMatch, ExtraCell, ModelSpec, Runner, Topology
from canary.config.catalog import Catalog, KernelBlockSizes, load_catalog
from canary.core.words import listing
from canary.plan.cell import (
    RISK_BLOCK_REWRITE,
    RISK_COMPRESSED_CACHE,
    RISK_KERNEL_SPLIT,
    RISK_MIXED_PAIR,
    RISK_MRV2_PD,
    RISK_PD_BLOCK_MISMATCH,
    RISK_PD_TP_RATIO,
    Cell,
    CellStatus,
    prefix_caching_label,
)


class Plan(BaseModel):
    """The planner's output."""

    model_config = ConfigDict(frozen=True)

    config_name: str = Field(description="Config name.")
    platform: str = Field(description="Platform id.")
    reduction: str = Field(description="full or pairwise.")
    cells: tuple[Cell, ...] = Field(description="Every cell, planned or not, in a stable order.")
    full_cell_count: int = Field(description="Cells of the full matrix (before pairwise).")
    full_planned_count: int = Field(description="Planned cells of the full matrix (before pairwise).")

    def planned(self) -> list[Cell]:
        """Cells that will run."""
        return [c for c in self.cells if c.status == "planned"]


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", text.lower()).strip("_")


def cell_id(
    model: str,
    multi_model: bool,
    topology: str,
    backend: str,
    prefill: int,
    decode: int,
    dtype: str,
    runner: str,
    image: str,
    decode_runner: str | None = None,
    decode_image: str | None = None,
    tp_shape: str | None = None,
    prefix_caching: bool | None = None,
) -> str:
    """The readable, stable id of a cell (a mixed pair shows both sides: v1-v2, baseline-patched; a
    tensor-parallel shape other than the model's own follows the blocks: p128-d128.tp2p1d; prefix caching
    asked on or off follows them: p256-d256.pc-off)."""
    topo = "agg" if topology == "aggregated" else "pd"
    blocks = f"b{prefill}" if topology == "aggregated" else f"p{prefill}-d{decode}"
    runners = runner if decode_runner in (None, runner) else f"{runner}-{decode_runner}"
    images = _slug(image) if decode_image in (None, image) else f"{_slug(image)}-{_slug(decode_image or '')}"
    caching = [prefix_caching_label(prefix_caching)] if prefix_caching is not None else []
    parts = [topo, _slug(backend), blocks, *([tp_shape] if tp_shape else []), *caching, _slug(dtype), runners, images]
    if multi_model:
        parts.insert(0, _slug(model))
    return ".".join(parts)


def matches(match: CellMatch, cell: Cell) -> bool:
    """Whether a CellMatch selects a cell."""
    return _matches_values(
        match,
        cell.model,
        cell.family,
        cell.backend,
        cell.prefill_block_size,
        cell.decode_block_size,
        cell.kv_cache_dtype,
        cell.runner,
        cell.topology,
        cell.image,
        cell.runner_for("decode"),
        cell.image_for("decode"),
        cell.prefill_tp,
        cell.decode_tp,
        cell.prefix_caching,
    )


def _matches_values(
    match: CellMatch,
    model: str,
    family: str,
    backend: str,
    prefill: int,
    decode: int,
    dtype: str,
    runner: str,
    topology: str,
    image: str,
    decode_runner: str,
    decode_image: str,
    prefill_tp: int,
    decode_tp: int,
    prefix_caching: bool | None,
) -> bool:
    checks: list[tuple[object | None, object]] = [
        (match.model, model),
        (match.family, family),
        (match.backend.upper() if match.backend else None, backend),
        (match.prefill_block_size, prefill),
        (match.decode_block_size, decode),
        (match.kv_cache_dtype, dtype),
        (match.runner, runner),
        (match.topology, topology),
        (match.image, image),
        (match.decode_runner, decode_runner),
        (match.decode_image, decode_image),
        (match.prefill_tp, prefill_tp),
        (match.decode_tp, decode_tp),
        (match.prefix_caching, prefix_caching),
    ]
    if any(want is not None and want != have for want, have in checks):
        return False
    return match.block_size is None or match.block_size in (prefill, decode)


class _Coordinates(BaseModel):
    model_config = ConfigDict(frozen=True)

    model: str
    family: str
    backend: str
    prefill: int
    decode: int
    dtype: str
    runner: Runner
    topology: Topology
    image: str
    decode_runner: Runner | None = None
    decode_image: str | None = None
    prefill_tp: int = 1
    decode_tp: int = 1
    prefix_caching: bool | None = None


def crossed_models(config: CanaryConfig) -> list[ModelSpec]:
    """The models of the cross product (and of an include that names none): all but the include-only ones."""
    return [m for m in config.models if not m.include_only]


def _cross_product(config: CanaryConfig) -> Iterator[_Coordinates]:
    axes = config.matrix
    decode_sizes = axes.decode_block_sizes
    for model, image, backend, dtype, runner, topology in itertools.product(
        crossed_models(config),
        config.image_keys(),
        axes.attention_backends,
        axes.kv_cache_dtypes,
        axes.runners,
        axes.topologies,
    ):
        if topology == "aggregated" or decode_sizes is None:
            sizes = list(axes.prefill_block_sizes)
            if topology == "aggregated" and decode_sizes is not None:
                sizes += [s for s in decode_sizes if s not in sizes]
            pairs = [(size, size) for size in sizes]
        else:
            pairs = list(itertools.product(axes.prefill_block_sizes, decode_sizes))
        own = model.tensor_parallel_size
        shapes = (
            [(own, own)]
            if topology == "aggregated"
            else list(itertools.product(axes.prefill_tp_sizes or [own], axes.decode_tp_sizes or [own]))
        )
        caching: list[bool | None] = list(axes.prefix_caching) if axes.prefix_caching is not None else [None]
        for (prefill, decode), (prefill_tp, decode_tp), prefix_caching in itertools.product(pairs, shapes, caching):
            yield _Coordinates(
                model=model.name,
                family=model.family,
                backend=backend,
                prefill=prefill,
                decode=decode,
                dtype=dtype,
                runner=runner,
                topology=topology,
                image=image,
                prefill_tp=prefill_tp,
                decode_tp=decode_tp,
                prefix_caching=prefix_caching,
            )


def _extra_cells(config: CanaryConfig, extra: ExtraCell) -> Iterator[_Coordinates]:
    models = [extra.model] if extra.model else [m.name for m in crossed_models(config)]
    images = [extra.image] if extra.image else config.image_keys()
    for model, image in itertools.product(models, images):
        decode = extra.decode_block_size if extra.topology == "pd-nixl" else extra.prefill_block_size
        spec = next(m for m in config.models if m.name == model)
        prefill_tp = extra.prefill_tp or spec.tensor_parallel_size
        decode_tp = (extra.decode_tp or spec.tensor_parallel_size) if extra.topology == "pd-nixl" else prefill_tp
        yield _Coordinates(
            model=model,
            family=spec.family,
            backend=extra.backend.upper(),
            prefill=extra.prefill_block_size,
            decode=decode,
            dtype=extra.kv_cache_dtype,
            runner=extra.runner,
            topology=extra.topology,
            image=image,
            decode_runner=extra.decode_runner if extra.decode_runner != extra.runner else None,
            decode_image=extra.decode_image if extra.decode_image != image else None,
            prefill_tp=prefill_tp,
            decode_tp=decode_tp,
            prefix_caching=extra.prefix_caching,
        )


def kernel_block_sizes_for(
    config: CanaryConfig, image: str, backend: str, catalog: Catalog | None = None
) -> KernelBlockSizes:
    """The kernel block sizes a backend accepts in an image: the image's override, else the catalog's."""
    override = config.images[image].kernel_block_sizes.get(backend.upper()) if image in config.images else None
    if override:
        return KernelBlockSizes(allowed=list(override))
    return (catalog or load_catalog()).backend(backend).kernel_block_sizes


def _judge(config: CanaryConfig, catalog: Catalog, at: _Coordinates) -> Cell:
    model = next(m for m in config.models if m.name == at.model)
    platform = catalog.platforms[config.platform]
    kernel_prefill = kernel_block_sizes_for(config, at.image, at.backend, catalog).kernel_block_for(at.prefill)
    decode_image = at.decode_image or at.image
    kernel_decode = kernel_block_sizes_for(config, decode_image, at.backend, catalog).kernel_block_for(at.decode)

    risks: list[str] = []
    if (kernel_prefill is not None and kernel_prefill < at.prefill) or (
        kernel_decode is not None and kernel_decode < at.decode
    ):
        risks.append(RISK_KERNEL_SPLIT)
    if at.topology == "pd-nixl" and at.prefill != at.decode:
        risks.append(RISK_PD_BLOCK_MISMATCH)
    compressed = model.compressed_cache
    storage_prefill = compressed.storage_block_size(at.prefill) if compressed else None
    storage_decode = compressed.storage_block_size(at.decode) if compressed else None
    if compressed is not None and compressed.compress_ratio > 1:
        # The seed: a storage block smaller than the logical block, where a kernel-block count
        # computed from block_size instead of the storage block overran the cache by compress_ratio.
        risks.append(RISK_COMPRESSED_CACHE)
    if at.topology == "pd-nixl" and "v2" in (at.runner, at.decode_runner):
        risks.append(RISK_MRV2_PD)
    if at.decode_runner is not None or at.decode_image is not None:
        risks.append(RISK_MIXED_PAIR)
    if block_rewrites(catalog, config.platform, at.family, (at.prefill, at.decode), model.state_block_size):
        risks.append(RISK_BLOCK_REWRITE)
    if at.topology == "pd-nixl" and at.prefill_tp != at.decode_tp:
        risks.append(RISK_PD_TP_RATIO)

    status: CellStatus = "planned"
    reason: str | None = None
    skipped = _impossible_reason(config, catalog, at, kernel_prefill, kernel_decode)
    unsupported = _unsupported_reason(config, catalog, at)
    if skipped:
        status, reason = "skipped", skipped
    elif unsupported:
        status, reason = "unsupported", unsupported
        if config.matrix.run_unsupported:
            status = "planned"
            reason = f"run anyway (run_unsupported): {unsupported}"

    expect = next((e for e in config.matrix.expectations if _matches_coordinates(e.match, at)), None)
    if status == "skipped" and expect is not None and expect.expect == "startup-fail":
        # The config asks to prove that vLLM rejects this cell cleanly: run it.
        status, reason = "planned", f"expected startup failure: {skipped}"
    del platform

    identifier = cell_id(
        at.model,
        model.include_only or len(crossed_models(config)) > 1,
        at.topology,
        at.backend,
        at.prefill,
        at.decode,
        at.dtype,
        at.runner,
        at.image,
        at.decode_runner,
        at.decode_image,
        tp_label(at, model.tensor_parallel_size),
        at.prefix_caching,
    )
    return Cell(
        id=identifier,
        model=at.model,
        model_source=model.source,
        family=at.family,
        backend=at.backend,
        prefill_block_size=at.prefill,
        decode_block_size=at.decode,
        kernel_block_prefill=kernel_prefill,
        kernel_block_decode=kernel_decode,
        kv_cache_dtype=at.dtype,
        runner=at.runner,
        topology=at.topology,
        image=at.image,
        image_ref=config.images[at.image].ref,
        status=status,
        reason=reason,
        risks=tuple(risks),
        expect=expect,
        storage_block_prefill=storage_prefill,
        storage_block_decode=storage_decode,
        decode_runner=at.decode_runner,
        decode_image=at.decode_image,
        decode_image_ref=config.images[at.decode_image].ref if at.decode_image else None,
        prefill_tp=at.prefill_tp,
        decode_tp=at.decode_tp,
        prefix_caching=at.prefix_caching,
    )


def tp_label(at: _Coordinates, model_tp: int) -> str | None:
    """The cell id's tensor-parallel part (tp2 aggregated, tp2p1d P/D), only where a role runs another size
    than the model's tensor_parallel_size: cells of the model's own shape keep their ids."""
    if at.prefill_tp == model_tp and at.decode_tp == model_tp:
        return None
    return f"tp{at.prefill_tp}" if at.topology == "aggregated" else f"tp{at.prefill_tp}p{at.decode_tp}d"


def _impossible_reason(
    config: CanaryConfig, catalog: Catalog, at: _Coordinates, kernel_prefill: int | None, kernel_decode: int | None
) -> str | None:
    """Why a cell cannot work on any platform (None if it can)."""
    model = next(m for m in config.models if m.name == at.model)
    backend = catalog.backend(at.backend)
    if backend.mla != (model.attention == "mla"):
        want = "an MLA" if model.attention == "mla" else "a non-MLA"
        return f"{at.backend} is {'an MLA' if backend.mla else 'a non-MLA'} backend; {at.model} needs {want} backend"
    if at.dtype not in backend.kv_cache_dtypes:
        return f"{at.backend} does not support kv_cache_dtype {at.dtype} (supports {listing(backend.kv_cache_dtypes)})"
    if model.compressed_cache is not None:
        ratio = model.compressed_cache.compress_ratio
        for role, logical in (("prefill", at.prefill), ("decode", at.decode)):
            if model.compressed_cache.storage_block_size(logical) is None:
                return f"block size {logical} ({role}) is not a multiple of {at.model}'s compress_ratio {ratio}"
    for role, logical, kernel in (("prefill", at.prefill, kernel_prefill), ("decode", at.decode, kernel_decode)):
        if kernel is None:
            return (
                f"no common block size for {logical} ({role}): {at.backend} needs "
                f"{kernel_block_sizes_for(config, at.image, at.backend, catalog).describe()}"
            )
    return None


def block_rewrites(
    catalog: Catalog, platform: str, family: str, blocks: Iterable[int], model_to: int | None = None
) -> list[str]:
    """What vLLM does to the asked block sizes of a family's cell on a platform (the catalog's block_rewrites;
    model_to: the model's state_block_size where the rule depends on the model), one line per rewritten size;
    empty: it keeps them."""
    info = catalog.family(family)
    lines: list[str] = []
    for block in dict.fromkeys(blocks):
        rewrite = info.rewrite(platform, block, model_to) if info is not None else None
        if rewrite is not None:
            target = rewrite.to if rewrite.to is not None else model_to
            to = "a block that holds the state page" if target is None else f"block {target}"
            lines.append(f"{family} on {platform}: vLLM runs {to} instead of {block} ({rewrite.fact.path})")
    return lines


def _unsupported_reason(config: CanaryConfig, catalog: Catalog, at: _Coordinates) -> str | None:
    """Why this platform cannot honour a possible cell (vLLM would fall back silently)."""
    backend = catalog.backend(at.backend)
    platform = catalog.platforms[config.platform]
    if config.platform not in backend.platforms:
        return f"{at.backend} does not run on {config.platform} (runs on {listing(backend.platforms)})"
    family = catalog.family(at.family)
    if family is not None and family.serves(config.platform, at.backend) is False:
        serving = listing(family.backends[config.platform])
        return f"{at.backend} does not serve the {at.family} family on {config.platform} (served by {serving})"
    limited = backend.kv_cache_dtype_platforms.get(at.dtype)
    if limited is not None and config.platform not in limited:
        return f"kv_cache_dtype {at.dtype} with {at.backend} needs {listing(limited)}"
    for runner in (at.runner, at.decode_runner):
        if runner is not None and runner not in platform.runners:
            note = platform.runner_notes.get(runner, "")
            return f"model runner {runner} does not run on {config.platform}" + (f": {note}" if note else "")
    return None


def _matches_coordinates(match: CellMatch, at: _Coordinates) -> bool:
    return _matches_values(
        match,
        at.model,
        at.family,
        at.backend,
        at.prefill,
        at.decode,
        at.dtype,
        at.runner,
        at.topology,
        at.image,
        at.decode_runner or at.runner,
        at.decode_image or at.image,
        at.prefill_tp,
        at.decode_tp,
        at.prefix_caching,
    )


def expand(config: CanaryConfig, catalog: Catalog | None = None) -> list[Cell]:
    """Every cell of the full matrix (cross product + includes - excludes), judged, in stable order."""
    catalog = catalog or load_catalog()
    seen: dict[_Coordinates, None] = {}
    for coordinates in itertools.chain(
        _cross_product(config), *(_extra_cells(config, extra) for extra in config.matrix.include)
    ):
        seen.setdefault(coordinates, None)
    cells = [_judge(config, catalog, at) for at in seen]
    cells = [c for c in cells if not any(matches(m, c) for m in config.matrix.exclude)]
    # Aggregated first (they are the controls of the P/D cells), then by id: stable across runs.
    return sorted(cells, key=lambda c: _sort_key(c, config.baseline))


def _sort_key(cell: Cell, baseline: str) -> tuple[object, ...]:
    return (
        cell.image != baseline,
        cell.image,
        cell.topology != "aggregated",
        cell.model,
        cell.backend,
        cell.prefill_block_size,
        cell.decode_block_size,
        cell.kv_cache_dtype,
        cell.runner,
        cell.prefill_tp,
        cell.decode_tp,
        # on before off before the engine's default
        {True: 0, False: 1, None: 2}[cell.prefix_caching],
    )


def plan(config: CanaryConfig, catalog: Catalog | None = None) -> Plan:
    """Expand and, if configured, reduce the matrix pairwise."""
    cells = expand(config, catalog)
    full_count = len(cells)
    full_planned = sum(1 for c in cells if c.status == "planned")
    if config.matrix.reduction == "pairwise":
        from canary.plan.pairwise import reduce_pairwise

        cells = reduce_pairwise(cells)
    return Plan(
        config_name=config.name,
        platform=config.platform,
        reduction=config.matrix.reduction,
        cells=tuple(cells),
        full_cell_count=full_count,
        full_planned_count=full_planned,
    )


def find(cells: Iterable[Cell], identifier: str) -> Cell | None:
    """A cell by id."""
    return next((c for c in cells if c.id == identifier), None)
