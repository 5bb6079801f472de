"""The root model of a config file (CanaryConfig), tying models, images, matrix, checks, target, export."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, ValidationError, model_validator

from canary.config.base import Platform, Strict
from canary.config.bisect import BisectConfig
from canary.config.checks import ChecksConfig
from canary.config.export import ExportConfig
from canary.config.matrix import PREFIX_CACHING_FLAGS, CellMatch, MatrixSpec
from canary.config.models import ImageSpec, ModelSpec
from canary.config.targets import TARGET_SECTIONS, TargetConfig
from canary.core.words import listing


class CanaryConfig(Strict):
    """The root of a canary config file."""

    version: Literal[1] = Field(1, description="Config schema version.")
    name: str = Field(min_length=1, pattern=r"^[a-z0-9][a-z0-9-]*$", description="Config name (lowercase-dash).")
    platform: Platform = Field(description="Where it runs: cpu, sm80, sm90 (H100/H200) or sm100.")
    models: list[ModelSpec] = Field(min_length=1, description="Models under test.")
    images: dict[str, ImageSpec] = Field(min_length=1, description="Images by key, e.g. baseline, candidate.")
    baseline_image: str | None = Field(None, description="Image the others are compared with (default: first).")
    matrix: MatrixSpec = Field(description="Matrix axes.")
    checks: ChecksConfig = Field(default_factory=ChecksConfig, description="Per-check settings.")
    export: ExportConfig = Field(default_factory=ExportConfig, description="Result export.")
    target: TargetConfig = Field(default_factory=TargetConfig, description="Where cells run.")
    bisect: BisectConfig = Field(
        default_factory=BisectConfig,
        description="Bisecting red cells: after each run (`enabled`); the budget and confirmation of each bisection.",
    )

    @model_validator(mode="after")
    def _cross_references(self) -> CanaryConfig:
        image_keys = set(self.images)
        for index, image in enumerate(self.matrix.images or []):
            if image not in image_keys:
                raise RefError(
                    f"matrix.images.{index}", f"unknown image {image!r}; defined: {listing(sorted(image_keys))}"
                )
        if self.baseline_image is not None and self.baseline_image not in image_keys:
            raise RefError(
                "baseline_image", f"unknown image {self.baseline_image!r}; defined: {listing(sorted(image_keys))}"
            )
        model_names = [m.name for m in self.models]
        if len(set(model_names)) != len(model_names):
            raise RefError("models", f"duplicate model names {listing(model_names)}")
        for index, extra in enumerate(self.matrix.include):
            if extra.image is not None and extra.image not in image_keys:
                raise RefError(f"matrix.include.{index}.image", f"unknown image {extra.image!r}")
            if extra.decode_image is not None and extra.decode_image not in image_keys:
                raise RefError(f"matrix.include.{index}.decode_image", f"unknown image {extra.decode_image!r}")
            if extra.model is not None and extra.model not in model_names:
                raise RefError(f"matrix.include.{index}.model", f"unknown model {extra.model!r}")
            if extra.topology == "aggregated" and extra.decode_block_size != extra.prefill_block_size:
                raise RefError(
                    f"matrix.include.{index}.decode_block_size",
                    f"an aggregated cell runs one block size, but decode_block_size {extra.decode_block_size} != "
                    f"prefill_block_size {extra.prefill_block_size}: make them equal, or use topology: pd-nixl",
                )
        return self

    @model_validator(mode="after")
    def _prefix_caching_asked_once(self) -> CanaryConfig:
        """A matrix that plans prefix caching passes the flag itself: the same flag in a model's or the target's
        extra_args would say the opposite on some cells (the last flag on vLLM's command line wins)."""
        planned = self.matrix.prefix_caching is not None or any(
            extra.prefix_caching is not None for extra in self.matrix.include
        )
        if not planned:
            return self
        places = [(f"models.{i}.extra_args", m.extra_args) for i, m in enumerate(self.models)]
        for kind in TARGET_SECTIONS:
            section = getattr(self.target, kind, None)
            args = getattr(section, "extra_args", None)
            if isinstance(args, list):
                places.append((f"target.{kind}.extra_args", args))
        for key, args in places:
            flags = [a for a in args if str(a).split("=")[0] in PREFIX_CACHING_FLAGS]
            if flags:
                raise RefError(
                    key,
                    f"{flags[0]} here and prefix caching planned by the matrix (matrix.prefix_caching or an "
                    "include's prefix_caching): the cell asks for it; drop the flag from extra_args",
                )
        return self

    @model_validator(mode="after")
    def _check_cells_are_cell_matches(self) -> CanaryConfig:
        """A check's `cells` (e.g. checks.lifecycle.cells) is a list of cell matches: a check's settings cannot
        import CellMatch (the checks section is built before the matrix), so each entry is checked here."""
        for name in type(self.checks).model_fields:
            cells = getattr(getattr(self.checks, name), "cells", None)
            for index, entry in enumerate(cells if isinstance(cells, list) else []):
                try:
                    CellMatch.model_validate(entry)
                except ValidationError as exc:
                    why = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors())
                    raise RefError(f"checks.{name}.cells.{index}", f"not a cell match ({why})") from None
        return self

    @model_validator(mode="after")
    def _dataset_fits_its_source(self) -> CanaryConfig:
        dataset, where = self.checks.accuracy.dataset, "checks.accuracy.dataset"
        for key in ("path", "train_path", "test_path"):
            if getattr(dataset, key) is not None and dataset.source != "local":
                raise RefError(
                    f"{where}.{key}",
                    f"{key} is read only with source: local, but source is {dataset.source} (it would be "
                    f"ignored): set {where}.source: local, or drop {key}",
                )
        if dataset.source == "local" and dataset.path is None and None in (dataset.train_path, dataset.test_path):
            raise RefError(f"{where}.path", "source local needs path (a directory) or both train_path and test_path")
        return self

    @model_validator(mode="after")
    def _targets_can_work_with_it(self) -> CanaryConfig:
        for section in TARGET_SECTIONS.values():  # each kind's own cross-checks (canary/targets/<kind>/settings.py)
            problem = section.problem(self) if section.problem is not None else None
            if problem is not None:
                raise RefError(*problem)
        return self

    @model_validator(mode="after")
    def _some_check_can_judge(self) -> CanaryConfig:
        enabled = [
            name for name in type(self.checks).model_fields if getattr(getattr(self.checks, name), "enabled", False)
        ]
        if not enabled:
            raise RefError(
                "checks",
                "every check is disabled: each cell would be judged by nothing and say nothing; enable at least "
                "one (checks.<name>.enabled: true)",
            )
        if enabled == ["startup"] and not self.checks.startup.verify_live_config:
            raise RefError(
                "checks.startup.verify_live_config",
                "startup is the only check and does not verify the live config: no gate could fail on a cell "
                "that serves; set verify_live_config: true or enable another check",
            )
        return self

    @property
    def baseline(self) -> str:
        """The baseline image key."""
        return self.baseline_image or next(iter(self.images))

    def image_keys(self) -> list[str]:
        """Image keys the matrix runs."""
        return list(self.matrix.images or self.images)


class RefError(ValueError):
    """A cross-reference error that knows its key path."""

    def __init__(self, key_path: str, message: str) -> None:
        super().__init__(message)
        self.key_path = key_path
