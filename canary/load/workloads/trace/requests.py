"""The trace workload's requests: request i is line i of a Mooncake JSONL trace; its arrival offset is its
timestamp minus the first one (ms to s, times trace_time_scale). Hash id h stands for one block of
trace_block_tokens tokens drawn from a generator seeded by (seed, h): requests that share hash ids share
those blocks token for token, so prefix-cache hits happen where the trace has them. The prompt is its
blocks in order cut to input_length, padded with fresh tokens if they are short."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

from canary.config.trace import TraceError, TraceRequest, load_trace
from canary.config.workloads import WorkloadShape
from canary.load.shapes import Draw, ShapedRequest, ShapeInputs, generator


def check_trace(shape: WorkloadShape, total: int) -> list[TraceRequest]:
    """The trace of a trace workload, long enough for `total` requests; TraceError (file:line) otherwise."""
    path = Path(str(shape.trace_path))
    trace = load_trace(path)
    if len(trace) < total:
        raise TraceError(
            f"{path}: {len(trace)} requests, the run sends {total} (warmup_requests + num_requests): "
            "lower num_requests or use a longer trace"
        )
    return trace


@generator("trace")
def generate(spec: ShapeInputs, rng: random.Random) -> list[ShapedRequest]:
    shape, draw = spec.shape, Draw(spec)
    total = spec.total
    trace = check_trace(shape, total)
    blocks: dict[int, list[Any]] = {}

    def block(hash_id: int) -> list[Any]:
        if hash_id not in blocks:  # its own generator: the same id gives the same block in every request
            blocks[hash_id] = draw.units(shape.trace_block_tokens, random.Random(f"canary-trace-{spec.seed}-{hash_id}"))
        return blocks[hash_id]

    start = trace[0].timestamp_ms
    requests = []
    for entry in trace[:total]:
        want = draw.count(entry.input_length)
        units = [u for h in entry.hash_ids for u in block(h)][:want]
        units += draw.raw(want - len(units), rng)  # the trace's blocks are short of input_length: fresh tokens
        offset = (entry.timestamp_ms - start) / 1e3 * shape.trace_time_scale
        requests.append(ShapedRequest(draw.prompt(units), entry.input_length, entry.output_length, offset_s=offset))
    return requests
