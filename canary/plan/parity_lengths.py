"""The prompt lengths the parity check sends, per config and per cell: planning arithmetic, shared by the
check (canary.checks.parity.prompts builds the prompts) and the wall-time estimate (canary.plan.waves).

Lengths sit at block boundaries of every planned block size (logical and kernel, prefill and decode):
half a block, one short, exact, one over, two blocks, two and one over, four and one over, plus the
configured lengths and the longest the model takes.
"""

from __future__ import annotations

from collections.abc import Sequence

from canary.config import CanaryConfig
from canary.config.lengths import PARITY_MIN_PROMPT, parity_prompt_limit
from canary.plan.cell import Cell
from canary.plan.matrix import plan


def cell_block_sizes(cell: Cell) -> list[int]:
    """One cell's block sizes: logical and kernel, prefill and decode."""
    sizes = {cell.prefill_block_size, cell.decode_block_size}
    sizes |= {s for s in (cell.kernel_block_prefill, cell.kernel_block_decode) if s is not None}
    return sorted(sizes)


def block_sizes(config: CanaryConfig) -> list[int]:
    """Every block size of the planned cells: logical and kernel, prefill and decode."""
    return sorted({size for cell in plan(config).planned() for size in cell_block_sizes(cell)})


def cell_prompt_lengths(config: CanaryConfig, cell: Cell, every: Sequence[int]) -> list[int]:
    """The lengths a cell sends. An aggregated cell (the control) measures the reference at `every`
    length of the config (prompt_lengths(config)): the P/D cells it serves have different block
    sizes. A P/D cell sends only the lengths of its own block sizes (and the configured ones and
    the longest), each a prompt of the same ids as the control's at that length."""
    if cell.topology != "pd-nixl":
        return list(every)
    own = set(prompt_lengths(config, cell_block_sizes(cell)))
    return [n for n in every if n in own]


def max_prompt_length(config: CanaryConfig) -> int:
    """The longest prompt every model of the config takes with max_tokens and one re-scored token."""
    return parity_prompt_limit(config)


def prompt_lengths(config: CanaryConfig, sizes: Sequence[int] | None = None) -> list[int]:
    """The prompt lengths every cell uses (see the module doc), within the model length."""
    settings = config.checks.parity
    limit = max_prompt_length(config)
    lengths = set(settings.prompt_lengths)
    if settings.block_relative:
        for block in block_sizes(config) if sizes is None else sizes:
            lengths |= {block // 2, block - 1, block, block + 1, 2 * block, 2 * block + 1, 4 * block + 1}
        lengths.add(limit)
    return sorted(n for n in lengths if PARITY_MIN_PROMPT <= n <= limit)
