"""The throughput check's workload for one cell, and what evidence.workload records of it.

`cell_workload(ctx)` is checks.throughput.workload with what only the cell can say filled in: a
block_residues workload without `block_sizes` gets the cell's own block sizes (`cell_block_sizes`):

- the logical KV block of each engine: the cell's --block-size (prefill and decode of a P/D cell,
  the server's of an aggregated one), from "cell";
- the kernel block of each engine: what the startup check read from that engine (its layout probe,
  or the log line vLLM prints when it splits blocks: metrics kernel_block_size_<role>), from
  "engine-reported (<how>)"; where the engine said nothing, the kernel block the plan derived from
  the catalog / config, from "config"; an engine with neither has no kernel entry (said in `missing`).

`workload_evidence` is evidence.workload: the kind and every parameter that shaped the requests
(seeds, groups, turns, block sizes and where each came from, the trace file and its sha256), so a
result says what was measured; the reports print it one line per cell (canary/export/report/workload.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from canary.checks.base import CheckContext
from canary.checks.startup.check import reported_kernel_block
from canary.config import ThroughputCheckConfig
from canary.config.workloads import WorkloadShape
from canary.core.digest import file_sha256
from canary.load.workloads.block_residues.requests import residue_lengths

CELL = "cell"
CONFIG = "config"
ENGINE = "engine-reported"


@dataclass(frozen=True)
class BlockSource:
    """One block size of a cell and where it came from."""

    size: int
    block: str  # "logical" or "kernel"
    role: str  # the engine: aggregated, prefill or decode
    source: str  # CELL, CONFIG, or ENGINE + " (<how the engine said it>)"

    def to_json(self) -> dict[str, Any]:
        """As evidence."""
        return {"size": self.size, "block": self.block, "role": self.role, "from": self.source}


def _roles(ctx: CheckContext) -> tuple[str, ...]:
    return ("prefill", "decode") if ctx.cell.topology == "pd-nixl" else ("aggregated",)


def _engine_kernel(ctx: CheckContext, role: str) -> tuple[int | None, str]:
    """The kernel block the startup check read from engine `role`, and how it was read."""
    startup = ctx.checked.get("startup")
    return reported_kernel_block(startup, role) if startup is not None else (None, "")


def cell_block_sizes(ctx: CheckContext) -> tuple[list[BlockSource], list[str]]:
    """The cell's logical and kernel block sizes, each with its source, and what is missing."""
    cell = ctx.cell
    found: list[BlockSource] = []
    missing: list[str] = []
    for role in _roles(ctx):
        decode = role == "decode"
        found.append(BlockSource(cell.decode_block_size if decode else cell.prefill_block_size, "logical", role, CELL))
        kernel, how = _engine_kernel(ctx, role)
        if kernel is not None:
            found.append(BlockSource(kernel, "kernel", role, f"{ENGINE} ({how})" if how else ENGINE))
            continue
        planned = cell.kernel_block_decode if decode else cell.kernel_block_prefill
        if planned is not None:
            found.append(BlockSource(planned, "kernel", role, CONFIG))
        else:
            missing.append(f"{role}: no kernel block (the engine reported none, the catalog / config declares none)")
    return found, missing


def cell_workload(ctx: CheckContext) -> tuple[WorkloadShape, dict[str, Any]]:
    """checks.throughput.workload for this cell (block_residues: the cell's block sizes when none are
    configured) and the block-size part of its evidence."""
    shape = ctx.config.checks.throughput.workload
    if shape.kind != "block_residues":
        return shape, {}
    if shape.block_sizes is not None:
        return shape, {"block_sizes_from": f"{CONFIG} (checks.throughput.workload.block_sizes)"}
    sources, missing = cell_block_sizes(ctx)
    sizes = sorted({s.size for s in sources})
    extra: dict[str, Any] = {"block_sizes_from": CELL, "block_size_sources": [s.to_json() for s in sources]}
    if missing:
        extra["block_sizes_missing"] = missing
    return shape.model_copy(update={"block_sizes": sizes}), extra


def workload_evidence(
    cfg: ThroughputCheckConfig, shape: WorkloadShape, seeds: list[int], extra: dict[str, Any]
) -> dict[str, Any]:
    """evidence.workload: the kind, the seeds of the runs and every parameter of that kind."""
    found: dict[str, Any] = {
        "kind": shape.kind,
        "seeds": seeds,
        "prompt_tokens": cfg.prompt_tokens,
        "output_tokens": cfg.output_tokens,
        "length_distribution": cfg.length_distribution,
        "length_spread": cfg.length_spread,
        "arrivals": {
            "open_loop": cfg.open_loop,
            "request_rate": cfg.request_rate,
            "burstiness": cfg.burstiness,
            "concurrency": cfg.concurrency,
        },
    }
    if shape.kind == "shared_prefix":
        found |= {"prefix_groups": shape.prefix_groups, "prefix_tokens": shape.prefix_tokens}
    elif shape.kind == "multi_turn":
        found |= {"turns": shape.turns, "think_time_s": shape.think_time_s}
    elif shape.kind == "block_residues":
        sizes = list(shape.block_sizes or [])
        found |= {
            "block_sizes": sizes,
            "block_multiples": list(shape.block_multiples),
            "prompt_lengths": residue_lengths(sizes, shape.block_multiples),
        }
    elif shape.kind == "trace":
        path = Path(str(shape.trace_path))
        try:
            sha = file_sha256(path)
        except OSError as exc:
            sha = f"unreadable: {exc}"
        found |= {
            "trace_path": str(shape.trace_path),
            "trace_sha256": sha,
            "trace_time_scale": shape.trace_time_scale,
            "trace_block_tokens": shape.trace_block_tokens,
        }
    return found | extra
