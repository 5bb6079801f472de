"""Every KV cache group of an engine as its layout probe recorded it, in the few words a report shows.

A hybrid model (sliding window, Mamba or GDN state beside attention) has several groups, each with its own
spec, block and NIXL regions; the layout gates judge the full-attention group, and this summary keeps the
others in sight (canary/targets/engine_site/layout_probe.py records them).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any

SHARED_REGION_GROUP = -1
"""A NIXL region every KV cache group uses (vLLM's _SHARED_REGION_GROUP_ID in nixl/base_worker.py: the hybrid
manager packs every group's layers into one tensor), pinned by tests/source/test_source_layout_probe.py."""


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


STATE_KINDS = frozenset({"mamba"})
"""Group kinds that hold a recurrent state (Mamba, GDN: vLLM's MambaSpec), not attention KV pages."""


def attention_groups(record: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The groups with a logical and a kernel block that page attention (a record without kinds, an older
    probe: every such group)."""
    groups = [g for g in record.get("kv_cache_groups") or [] if isinstance(g, Mapping)]
    sized = [g for g in groups if g.get("logical_block_size") and g.get("kernel_block_sizes")]
    return [g for g in sized if g.get("kind") not in STATE_KINDS]


def attention_views(record: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The kernel views of attention layers: a view the probe tagged with a state kind (a Mamba / GDN layer's
    state, not paged by an attention kernel) is left out; an untagged view (an older probe) stays."""
    views = [v for v in record.get("kernel_views") or [] if isinstance(v, Mapping)]
    return [v for v in views if v.get("kind") not in STATE_KINDS]


def group_summaries(record: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One entry per KV cache group: id, kind, window, logical and kernel block, storage block, page bytes,
    layers, how many NIXL regions belong to it alone and how many it shares with every group (None: the
    probe recorded no regions)."""
    groups = record.get("kv_cache_groups") or []
    nixl = record.get("nixl") or {}
    regions = nixl.get("regions") if isinstance(nixl, Mapping) else None
    per_group = (
        Counter(r.get("group_id") for r in regions if isinstance(r, Mapping)) if isinstance(regions, list) else None
    )
    out = []
    for index, group in enumerate(groups):
        if not isinstance(group, Mapping):
            continue
        group_id = _int(group.get("group_id"))
        group_id = index if group_id is None else group_id
        kernels = [k for k in group.get("kernel_block_sizes") or [] if _int(k) is not None]
        out.append(
            {
                "group_id": group_id,
                "kind": group.get("kind") or str(group.get("spec") or "?"),
                "sliding_window": _int(group.get("sliding_window")),
                "logical_block_size": _int(group.get("logical_block_size")),
                "kernel_block_size": kernels[0] if kernels else None,
                "storage_block_size": _int(group.get("storage_block_size")),
                "page_size_bytes": _int(group.get("page_size_bytes")),
                "num_layers": _int(group.get("num_layers")),
                "nixl_regions": None if per_group is None else per_group.get(group_id, 0),
                "nixl_shared_regions": None if per_group is None else per_group.get(SHARED_REGION_GROUP, 0),
            }
        )
    return out


def group_text(group: Mapping[str, Any]) -> str:
    """'sliding64 128/128 x1' (kind, window, logical/kernel block, NIXL regions of its own; '+1 shared' the
    regions every group shares): one group in a report."""
    kind = str(group.get("kind") or "?")
    if group.get("sliding_window"):
        kind += str(group["sliding_window"])
    logical = group.get("logical_block_size") or "?"
    kernel = group.get("kernel_block_size") or "?"
    text = f"{kind} {logical}/{kernel}"
    if group.get("storage_block_size") and group["storage_block_size"] != logical:
        text += f" store {group['storage_block_size']}"
    if group.get("nixl_regions") is not None:
        text += f" x{group['nixl_regions']}"
    if group.get("nixl_shared_regions"):
        text += f"+{group['nixl_shared_regions']} shared"
    return text


def kernel_step_problems(record: Mapping[str, Any]) -> list[str] | None:
    """Why the runner's kernel block list is out of step with the KV cache groups (the seeds' hazard: vLLM
    indexes kernel_block_sizes by group id and skips some groups when it builds the list), [] when it is in
    step, None when the probe did not record the list (an older probe). In step: one entry per group, each
    dividing its group's logical block (a state group keeps its own block)."""
    sizes = record.get("runner_kernel_block_sizes")
    if not isinstance(sizes, list):
        return None
    groups = [g for g in record.get("kv_cache_groups") or [] if isinstance(g, Mapping)]
    if len(sizes) != len(groups):
        return [
            f"{len(sizes)} kernel block sizes {sizes} for {len(groups)} KV cache groups: indexed by group id, "
            "they are out of step from the first group skipped"
        ]
    problems = []
    for group, size in zip(groups, sizes, strict=True):
        logical = _int(group.get("logical_block_size"))
        kernel = _int(size)
        if logical is None or kernel is None:
            continue
        state = group.get("kind") in STATE_KINDS
        if (state and kernel != logical) or logical % kernel:
            problems.append(
                f"group {group.get('group_id')} ({group.get('kind') or group.get('spec')}): kernel block {kernel} "
                f"for logical {logical}" + (" (a state group keeps its block)" if state else " (does not divide it)")
            )
    return problems
