"""The requests of the named workloads (canary.config.workloads.WorkloadShape), seeded.

`shape_requests(spec, rng)` gives every request of a run its prompt, lengths and, for some kinds,
its arrival offset, its predecessor or its group; `workload.build_plan` turns them into bodies.
Everything is drawn from `rng` (seeded by spec.seed) or from generators seeded by spec.seed and a
name, so the master and every worker of a distributed run build the same requests.

Prompts are token ids from spec.token_pool for /v1/completions (exact lengths), else words
(about words_per_token words per token; the server's usage count is the truth):

- shared_prefix: group g's prefix is drawn once; request i belongs to group i % prefix_groups and is
  that prefix followed by a fresh suffix of a sampled length (prompt_tokens, length_distribution).
- multi_turn: request i is turn i // C of conversation i % C (C = ceil(total / turns)), so turns of
  different conversations interleave. A turn's prompt is the previous turn's prompt, then as many
  tokens as the previous turn's output (`max_tokens`, exact under ignore_eos) and new user tokens.
  The "previous output" tokens are STAND-IN ids drawn from the pool, not the text the server
  generated: the prompt has the right length and the right shared prefix with the previous turn
  (what the prefix cache sees), without waiting for the answer's token ids. Each turn names its
  predecessor (`after`); the closed loop sends it only once that one finished (user.RequestSource).
- block_residues: prompt lengths k*B-1, k*B and k*B+1 (>= 1) for every B and k, sorted, in turn (the
  B are given here: canary/checks/throughput/workload.py fills in the cell's own when the config has none).
- trace: request i is line i of a Mooncake JSONL trace; its arrival offset is its timestamp minus
  the first one (ms to s, times trace_time_scale). Hash id h stands for one block of
  trace_block_tokens tokens drawn from a generator seeded by (seed, h): requests that share hash
  ids share those blocks token for token, so prefix-cache hits happen where the trace has them.
  The prompt is its blocks in order cut to input_length, padded with fresh tokens if they are short.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from canary.config.trace import TraceError, TraceRequest, load_trace
from canary.config.workloads import WorkloadShape
from canary.load.material import WORDS, LengthDistribution, sample_lengths


@dataclass(frozen=True)
class ShapeInputs:
    """What a named workload reads of the load spec (canary.load.workload.shape_inputs)."""

    shape: WorkloadShape
    total: int
    prompt_tokens: int
    output_tokens: int
    distribution: LengthDistribution
    spread: float
    seed: int
    token_pool: list[int] | None  # None: text prompts (chat, or no pool)
    words_per_token: float


@dataclass(frozen=True)
class ShapedRequest:
    """One request of a named workload, before it has an id and a body."""

    prompt: list[int] | str
    prompt_tokens: int
    max_tokens: int
    offset_s: float | None = None
    after: int | None = None
    group: int | None = None


class _Draw:
    """Prompt material: token ids from the pool, or words for text prompts."""

    def __init__(self, spec: ShapeInputs) -> None:
        self.pool = spec.token_pool
        self.words_per_token = spec.words_per_token

    def count(self, tokens: int) -> int:
        """How many units make `tokens` tokens."""
        return tokens if self.pool is not None else max(1, round(tokens * self.words_per_token))

    def units(self, tokens: int, rng: random.Random) -> list[Any]:
        """Fresh material for `tokens` tokens."""
        return self.raw(self.count(tokens), rng)

    def raw(self, count: int, rng: random.Random) -> list[Any]:
        """`count` fresh units."""
        source: tuple[Any, ...] | list[int] = self.pool if self.pool is not None else WORDS
        return [rng.choice(source) for _ in range(count)]

    def prompt(self, units: list[Any]) -> list[int] | str:
        """The request's prompt from its units."""
        return list(units) if self.pool is not None else " ".join(units)


def shape_requests(spec: ShapeInputs, rng: random.Random) -> list[ShapedRequest]:
    """Every request of a named workload (not synthetic), in plan order."""
    kind = spec.shape.kind
    if kind == "shared_prefix":
        return _shared_prefix(spec, rng)
    if kind == "multi_turn":
        return _multi_turn(spec, rng)
    if kind == "block_residues":
        return _block_residues(spec, rng)
    if kind == "trace":
        return _trace(spec, rng)
    raise ValueError(f"no named workload {kind!r}")


def _lengths(spec: ShapeInputs, rng: random.Random) -> tuple[list[int], list[int]]:
    total = spec.total
    prompts = sample_lengths(spec.prompt_tokens, spec.distribution, spec.spread, total, rng)
    outputs = sample_lengths(spec.output_tokens, spec.distribution, spec.spread, total, rng)
    return prompts, outputs


def _shared_prefix(spec: ShapeInputs, rng: random.Random) -> list[ShapedRequest]:
    shape, draw = spec.shape, _Draw(spec)
    suffixes, outputs = _lengths(spec, rng)
    prefixes = [draw.units(shape.prefix_tokens, rng) for _ in range(shape.prefix_groups)]
    requests = []
    for i, (suffix, output) in enumerate(zip(suffixes, outputs, strict=True)):
        group = i % shape.prefix_groups
        prompt = draw.prompt(prefixes[group] + draw.units(suffix, rng))
        requests.append(ShapedRequest(prompt, shape.prefix_tokens + suffix, output, group=group))
    return requests


def _multi_turn(spec: ShapeInputs, rng: random.Random) -> list[ShapedRequest]:
    draw = _Draw(spec)
    total = spec.total
    conversations = math.ceil(total / spec.shape.turns)
    news, outputs = _lengths(spec, rng)
    history: list[list[Any]] = [[] for _ in range(conversations)]
    history_tokens = [0] * conversations
    requests = []
    for i in range(total):
        conv, turn = i % conversations, i // conversations
        units = history[conv] + draw.units(news[i], rng)
        tokens = history_tokens[conv] + news[i]
        requests.append(
            ShapedRequest(draw.prompt(units), tokens, outputs[i], after=i - conversations if turn else None, group=conv)
        )
        history[conv] = units + draw.units(outputs[i], rng)  # stand-in for the answer: its length, not its ids
        history_tokens[conv] = tokens + outputs[i]
    return requests


def residue_lengths(block_sizes: list[int], multiples: list[int]) -> list[int]:
    """k*B-1, k*B and k*B+1 for every block size B and multiple k: sorted, distinct, at least 1."""
    return sorted({k * b + d for b in block_sizes for k in multiples for d in (-1, 0, 1) if k * b + d >= 1})


def _block_residues(spec: ShapeInputs, rng: random.Random) -> list[ShapedRequest]:
    draw = _Draw(spec)
    if spec.shape.block_sizes is None:  # WorkloadSpec refuses this: the throughput check fills in the cell's
        raise ValueError("block_residues has no block_sizes")
    lengths = residue_lengths(spec.shape.block_sizes, spec.shape.block_multiples)
    _, outputs = _lengths(spec, rng)
    requests = []
    for i, output in enumerate(outputs):
        length = lengths[i % len(lengths)]
        requests.append(ShapedRequest(draw.prompt(draw.units(length, rng)), length, output))
    return requests


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


def _trace(spec: ShapeInputs, rng: random.Random) -> list[ShapedRequest]:
    shape, draw = spec.shape, _Draw(spec)
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
