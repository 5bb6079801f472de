"""The block_residues workload's requests: prompt lengths k*B-1, k*B and k*B+1 (>= 1) for every B and k,
sorted, in turn (the B are given here: canary/checks/throughput/workload.py fills in the cell's own when
the config has none)."""

from __future__ import annotations

import random

from canary.load.shapes import Draw, ShapedRequest, ShapeInputs, generator, lengths


def residue_lengths(block_sizes: list[int], multiples: list[int]) -> list[int]:
    """k*B-1, k*B and k*B+1 for every block size B and multiple k: sorted, distinct, at least 1."""
    return sorted({k * b + d for b in block_sizes for k in multiples for d in (-1, 0, 1) if k * b + d >= 1})


@generator("block_residues")
def generate(spec: ShapeInputs, rng: random.Random) -> list[ShapedRequest]:
    draw = Draw(spec)
    if spec.shape.block_sizes is None:  # WorkloadSpec refuses this: the throughput check fills in the cell's
        raise ValueError("block_residues has no block_sizes")
    residues = residue_lengths(spec.shape.block_sizes, spec.shape.block_multiples)
    _, outputs = lengths(spec, rng)
    requests = []
    for i, output in enumerate(outputs):
        length = residues[i % len(residues)]
        requests.append(ShapedRequest(draw.prompt(draw.units(length, rng)), length, output))
    return requests
