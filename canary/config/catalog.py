"""The attention backend capability catalog (configs/backends.yaml) and what follows from it."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from pydantic import Field, model_validator

from canary.core.yaml_model import FrozenModel, load_yaml_model
from canary.paths import BACKENDS_CATALOG


class KernelBlockSizes(FrozenModel):
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


class PlatformInfo(FrozenModel):
    """What a platform can run."""

    description: str = Field(description="Human-readable name.")
    runners: list[str] = Field(description="Model runners that really run here.")
    runner_notes: dict[str, str] = Field(default_factory=dict, description="Why a runner does not run.")
    kv_buffer_device: str = Field(description="NixlConnector kv_buffer_device on this platform.")


class BackendInfo(FrozenModel):
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


class Catalog(FrozenModel):
    """The whole catalog."""

    schema_version: int = Field(description="Catalog schema version.")
    platforms: dict[str, PlatformInfo] = Field(description="Platforms by id.")
    backends: dict[str, BackendInfo] = Field(description="Backends by vLLM enum name.")

    def backend(self, name: str) -> BackendInfo:
        """Look a backend up by name (case-insensitive)."""
        return self.backends[name.upper()]


@lru_cache(maxsize=8)
def _load_catalog_cached(path: str) -> Catalog:
    return load_yaml_model(Path(path), Catalog)


def load_catalog(path: Path | None = None) -> Catalog:
    """Load (once) and validate the capability catalog."""
    return _load_catalog_cached(str(path or BACKENDS_CATALOG))
