"""What an engine's attention backends declare about themselves, read from its layout probe record.

The engine under test is the truth about itself: the layout probe (schema_version 2) records, per KV
cache group, each attention backend's own `get_supported_kernel_block_sizes(spec)` (ints and
`MultipleOf(n)`, as `{"int": n}` / `{"multiple_of": n}`) and `supported_kv_cache_dtypes`. The layout
gates judge the kernel block in use against that declaration, with vLLM's own rule
(vllm/v1/worker/utils.py `_block_size_is_supported`, `select_common_block_size`): an int must match
exactly, a `MultipleOf(n)` accepts any multiple of n, and where the logical block is not accepted as
is, vLLM picks the largest declared int that divides it.

What the catalog (configs/backends.yaml) or the config (`images.<key>.kernel_block_sizes`) believes
becomes a cross-check: a disagreement is a finding about the canary's data, reported, never a gate
(see `cross_check`). A record without a declaration (schema_version 1, a hook point missing in this
vLLM, a declaration the probe could not read) leaves the gates judging against the catalog or the
config, as before, and the evidence says so.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from canary.config import CanaryConfig
from canary.config.catalog import BackendInfo, KernelBlockSizes, load_catalog
from canary.paths import BACKENDS_CATALOG, REPO_ROOT
from canary.plan.matrix import kernel_block_sizes_for


@dataclass(frozen=True)
class Declaration:
    """One backend's declared kernel block sizes (and KV cache dtypes, when the class exposes them)."""

    backend: str
    ints: tuple[int, ...]
    multiples: tuple[int, ...]
    entries: tuple[str, ...]
    """The declaration as vLLM prints it, in order: '32', 'MultipleOf(32)'."""
    kv_cache_dtypes: tuple[str, ...] | None = None

    def accepts(self, block_size: int) -> bool:
        """vLLM's `_block_size_is_supported` for this backend: exact ints, multiples of MultipleOf bases."""
        return block_size in self.ints or any(block_size % base == 0 for base in self.multiples)

    def describe(self) -> str:
        """'[32]', '[MultipleOf(32)]': as vLLM prints the list."""
        return "[" + ", ".join(self.entries) + "]"

    def same_sizes(self, other: KernelBlockSizes) -> bool:
        """Whether a catalog / config entry says the same thing as this declaration."""
        if other.allowed is not None:
            return not self.multiples and set(self.ints) == set(other.allowed)
        return not self.ints and set(self.multiples) == {other.multiple_of}


def parse(entry: Mapping[str, Any]) -> Declaration | None:
    """One recorded declaration; None when the probe could not read it (or read an unknown entry)."""
    sizes = entry.get("kernel_block_sizes")
    if not isinstance(sizes, list) or not sizes:
        return None
    ints: list[int] = []
    multiples: list[int] = []
    entries: list[str] = []
    for size in sizes:
        if isinstance(size, Mapping) and isinstance(size.get("int"), int):
            ints.append(int(size["int"]))
            entries.append(str(size["int"]))
        elif isinstance(size, Mapping) and isinstance(size.get("multiple_of"), int) and size["multiple_of"] > 0:
            multiples.append(int(size["multiple_of"]))
            entries.append(f"MultipleOf({size['multiple_of']})")
        else:
            return None
    dtypes = entry.get("kv_cache_dtypes")
    return Declaration(
        backend=str(entry.get("backend") or "unknown").upper(),
        ints=tuple(ints),
        multiples=tuple(multiples),
        entries=tuple(entries),
        kv_cache_dtypes=tuple(str(d) for d in dtypes) if isinstance(dtypes, list) else None,
    )


def declarations(group: Mapping[str, Any]) -> tuple[list[Declaration], str | None]:
    """(declarations, why none) of one recorded KV cache group; all of its backends or none."""
    raw = group.get("declared")
    if not isinstance(raw, list) or not raw:
        return [], "not recorded by the engine (layout probe record before schema_version 2, or no attention group)"
    parsed = [parse(e) if isinstance(e, Mapping) else None for e in raw]
    if any(d is None for d in parsed):
        errors = [
            str(e.get("kernel_block_sizes_error") or e.get("kernel_block_sizes")) for e in raw if isinstance(e, Mapping)
        ]
        return [], f"recorded but not readable ({'; '.join(errors)[:200]})"
    return [d for d in parsed if d is not None], None


def kernel_for(declared: Sequence[Declaration], logical: int) -> int | None:
    """The kernel block vLLM derives from these declarations for a logical block (`select_common_block_size`):
    the logical block when every backend accepts it, else the largest declared int dividing it that
    every backend accepts; None: no common block size (vLLM fails at init)."""
    if all(d.accepts(logical) for d in declared):
        return logical
    candidates = {size for d in declared for size in d.ints if logical % size == 0}
    return next((size for size in sorted(candidates, reverse=True) if all(d.accepts(size) for d in declared)), None)


def describe_all(declared: Sequence[Declaration]) -> str:
    """'CPU_ATTN declares [32]' (several backends joined by '; ')."""
    return "; ".join(f"{d.backend} declares {d.describe()}" for d in declared)


# --------------------------------------------------------------------------- cross-check


def _catalog_name() -> str:
    try:
        return str(BACKENDS_CATALOG.relative_to(REPO_ROOT))
    except ValueError:
        return str(BACKENDS_CATALOG)


def believed(config: CanaryConfig, image: str, backend: str) -> tuple[KernelBlockSizes | None, BackendInfo | None, str]:
    """(kernel block sizes, catalog entry, where the belief comes from) for one backend in one image:
    the image's `kernel_block_sizes` override, else the catalog's entry; None where neither has one."""
    name = backend.upper()
    entry = load_catalog().backends.get(name)
    spec = config.images.get(image)
    overridden = bool(spec is not None and spec.kernel_block_sizes.get(name))
    sizes = kernel_block_sizes_for(config, image, name) if overridden or entry is not None else None
    return sizes, entry, f"images.{image}.kernel_block_sizes" if overridden else _catalog_name()


def _says(sizes: KernelBlockSizes) -> str:
    return str(sizes.allowed) if sizes.allowed is not None else f"MultipleOf({sizes.multiple_of})"


def cross_check(
    config: CanaryConfig, image: str, declared: Sequence[Declaration]
) -> tuple[list[dict[str, Any]], list[str]]:
    """(one entry per backend, findings): where the config or the catalog disagrees with the engine.

    A disagreement is reported (startup evidence and summary), not a gate, so it does not fail the
    cell: the image did what it says it does (the declared-vs-in-use gate judges that); what is wrong
    is the canary's own data, and paging the image's owners for it would be paging the wrong people.
    It still matters, so it is said on every cell it touches: the planner derived the cell's expected
    kernel block and its risks (kernel-split) from that data, so the plan may have described this
    cell wrongly. Fix the data: `make catalog` regenerates configs/backends.yaml from vLLM's source;
    an image that differs from stock vLLM says so with `images.<key>.kernel_block_sizes`."""
    rows: list[dict[str, Any]] = []
    findings: list[str] = []
    for declaration in declared:
        sizes, entry, source = believed(config, image, declaration.backend)
        row: dict[str, Any] = {"backend": declaration.backend, "source": source, "declared": declaration.describe()}
        what = "config" if source.startswith("images.") else "catalog"
        if sizes is None:
            row["believed"] = None
            findings.append(
                f"catalog out of date for this image: {source} has no {declaration.backend}, the engine runs it"
            )
        else:
            row["believed"] = _says(sizes)
            row["agrees"] = declaration.same_sizes(sizes)
            if not row["agrees"]:
                findings.append(
                    f"{what} out of date for this image: {source} says {declaration.backend} {_says(sizes)}, "
                    f"the engine declares {declaration.describe()}"
                )
        if entry is not None and declaration.kv_cache_dtypes is not None:
            row["kv_cache_dtypes"] = {"catalog": entry.kv_cache_dtypes, "declared": list(declaration.kv_cache_dtypes)}
            if set(entry.kv_cache_dtypes) != set(declaration.kv_cache_dtypes):
                findings.append(
                    f"catalog out of date for this image: {_catalog_name()} says {declaration.backend} KV cache dtypes "
                    f"{entry.kv_cache_dtypes}, the engine declares {list(declaration.kv_cache_dtypes)}"
                )
        rows.append(row)
    return rows, findings
