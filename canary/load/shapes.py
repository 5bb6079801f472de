"""The requests of the named workloads (canary.config.workloads.WorkloadShape), seeded: the kinds' registry.

`shape_requests(spec, rng)` gives every request of a run its prompt, lengths and, for some kinds,
its arrival offset, its predecessor or its group; `workload.build_plan` turns them into bodies.
Everything is drawn from `rng` (seeded by spec.seed) or from generators seeded by spec.seed and a
name, so the master and every worker of a distributed run build the same requests.

Prompts are token ids from spec.token_pool for /v1/completions (exact lengths), else words
(about words_per_token words per token; the server's usage count is the truth):

Each kind's requests live in its folder, `canary/load/workloads/<kind>/requests.py`, registered
with `@generator(kind)`; its settings beside them (`settings.py`).
"""

from __future__ import annotations

import importlib
import pkgutil
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from canary.config.workloads import WORKLOADS_PACKAGE, WorkloadShape, workload_folders
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


class Draw:
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


Generator = Callable[[ShapeInputs, random.Random], list[ShapedRequest]]
"""A workload kind's requests: every request of a run, in plan order."""

_GENERATORS: dict[str, Generator] = {}


def generator(kind: str) -> Callable[[Generator], Generator]:
    """Register the requests of a workload kind (its folder's `requests.py`)."""

    def wrap(fn: Generator) -> Generator:
        _GENERATORS[kind] = fn
        return fn

    return wrap


def discover() -> None:
    """Import every workload folder's `requests.py` (each registers its generator; synthetic has none)."""
    for name in workload_folders():
        package = importlib.import_module(f"{WORKLOADS_PACKAGE}.{name}")
        if any(info.name == "requests" for info in pkgutil.iter_modules(package.__path__)):
            importlib.import_module(f"{WORKLOADS_PACKAGE}.{name}.requests")


def shape_requests(spec: ShapeInputs, rng: random.Random) -> list[ShapedRequest]:
    """Every request of a named workload (not synthetic), in plan order."""
    discover()
    kind = spec.shape.kind
    if kind not in _GENERATORS:
        raise ValueError(f"no named workload {kind!r}")
    return _GENERATORS[kind](spec, rng)


def lengths(spec: ShapeInputs, rng: random.Random) -> tuple[list[int], list[int]]:
    """The sampled prompt and output lengths of every request (prompt_tokens, output_tokens, the distribution)."""
    total = spec.total
    prompts = sample_lengths(spec.prompt_tokens, spec.distribution, spec.spread, total, rng)
    outputs = sample_lengths(spec.output_tokens, spec.distribution, spec.spread, total, rng)
    return prompts, outputs
