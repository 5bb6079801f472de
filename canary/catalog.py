"""The attention backend capability catalog (configs/backends.yaml) and what follows from it."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from canary.errors import ConfigError
from canary.paths import BACKENDS_CATALOG

if TYPE_CHECKING:
    from canary.config import CanaryConfig


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class KernelBlockSizes(_Strict):
    """Block sizes an attention kernel accepts: a list, or any multiple of a number."""

    allowed: list[int] | None = Field(None, description="Exactly these sizes.")
    multiple_of: int | None = Field(None, gt=0, description="Any multiple of this size.")

    @model_validator(mode="after")
    def _one_of(self) -> KernelBlockSizes:
        if (self.allowed is None) == (self.multiple_of is None):
            raise ValueError("set exactly one of allowed / multiple_of")
        return self

    def accepts(self, block_size: int) -> bool:
        """Whether the kernel runs this block size as is."""
        if self.allowed is not None:
            return block_size in self.allowed
        assert self.multiple_of is not None
        return block_size % self.multiple_of == 0

    def kernel_block_for(self, logical: int) -> int | None:
        """The kernel block size vLLM uses for a logical block size, or None if none divides it."""
        if self.accepts(logical):
            return logical
        if self.allowed is not None:
            dividing = [size for size in self.allowed if logical % size == 0]
            return max(dividing) if dividing else None
        return None

    def describe(self) -> str:
        """Human-readable form for reasons."""
        if self.allowed is not None:
            return f"kernel block sizes {self.allowed}"
        return f"kernel block sizes that are multiples of {self.multiple_of}"


class PlatformInfo(_Strict):
    """What a platform can run."""

    description: str = Field(description="Human-readable name.")
    runners: list[str] = Field(description="Model runners that really run here.")
    runner_notes: dict[str, str] = Field(default_factory=dict, description="Why a runner does not run.")
    kv_buffer_device: str = Field(description="NixlConnector kv_buffer_device on this platform.")


class BackendInfo(_Strict):
    """One attention backend."""

    description: str = Field(description="Human-readable name.")
    mla: bool = Field(description="An MLA backend (needs an MLA model).")
    kernel_block_sizes: KernelBlockSizes = Field(description="Accepted kernel block sizes.")
    kernel_block_sizes_conditions: list[str] = Field(
        default_factory=list,
        description="Generated (canary.vllm_source.catalog_check): every return of the backend's "
        "get_supported_kernel_block_sizes with its guard, when vLLM decides at runtime; empty: unconditional.",
    )
    kv_cache_dtypes: list[str] = Field(description="Supported --kv-cache-dtype values.")
    kv_cache_dtype_platforms: dict[str, list[str]] = Field(
        default_factory=dict, description="Dtypes limited to some platforms."
    )
    platforms: list[str] = Field(description="Platforms where the backend runs.")


class Catalog(_Strict):
    """The whole catalog."""

    schema_version: int = Field(description="Catalog schema version.")
    platforms: dict[str, PlatformInfo] = Field(description="Platforms by id.")
    backends: dict[str, BackendInfo] = Field(description="Backends by vLLM enum name.")

    def backend(self, name: str) -> BackendInfo:
        """Look a backend up by name (case-insensitive)."""
        return self.backends[name.upper()]


@lru_cache(maxsize=8)
def _load_catalog_cached(path: str) -> Catalog:
    source = str(path)
    try:
        data = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(source, "", f"cannot read the backend catalog: {exc}") from None
    try:
        return Catalog.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        raise ConfigError(source, ".".join(str(p) for p in first["loc"]), str(first["msg"])) from None


def load_catalog(path: Path | None = None) -> Catalog:
    """Load (once) and validate the capability catalog."""
    return _load_catalog_cached(str(path or BACKENDS_CATALOG))


def validate_against_catalog(config: CanaryConfig, catalog: Catalog, source: str) -> None:
    """Names in the config must exist in the catalog: unknown backends and dtypes are config errors."""
    known_backends = sorted(catalog.backends)
    known_dtypes = sorted({d for b in catalog.backends.values() for d in b.kv_cache_dtypes})
    for index, backend in enumerate(config.matrix.attention_backends):
        if backend not in catalog.backends:
            raise ConfigError(
                source,
                f"matrix.attention_backends.{index}",
                f"unknown backend {backend!r}; expected one of {known_backends}",
            )
    for index, extra in enumerate(config.matrix.include):
        if extra.backend.upper() not in catalog.backends:
            raise ConfigError(
                source,
                f"matrix.include.{index}.backend",
                f"unknown backend {extra.backend!r}; expected one of {known_backends}",
            )
    for index, dtype in enumerate(config.matrix.kv_cache_dtypes):
        if dtype not in known_dtypes:
            raise ConfigError(
                source,
                f"matrix.kv_cache_dtypes.{index}",
                f"unknown KV cache dtype {dtype!r}; expected one of {known_dtypes}",
            )
    if config.platform not in catalog.platforms:
        raise ConfigError(source, "platform", f"platform {config.platform!r} is not in the catalog")
