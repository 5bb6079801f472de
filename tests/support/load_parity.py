"""Synthetic inputs of parity under load (canary/checks/throughput/loadparity.py) without engines: sample
prompts, a control's reference with an exact null arm (as on CPU), riders that already rode, contexts.

Series are greedy tokens base, base+1, ... with top-2 logprobs; `flip_at` puts a near tie at one
position whose runner-up wins (an honest engine's batch-dependent flip), `corrupt` shifts every
logprob and token (what a wrong KV block does)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from canary.checks.base import CheckContext
from canary.checks.parity.fidelity import Position, Series, compare
from canary.checks.parity.prompts import ParityPrompt
from canary.checks.parity.reference import CACHE_BATCH_ARM, FORCED_NULL_ARM, Reference, judge_evidence
from canary.checks.throughput.loadparity import Prepared, Ridden, Rider
from canary.judge.results import CellResult, CheckResult
from canary.plan.matrix import plan
from canary.targets.base import Deployment, ServerInfo
from tests.support.sample import sample_config

TOKENS = 8
AGG = "agg.cpu_attn.b32.auto.v1.baseline"
PD = "pd.cpu_attn.p32-d32.auto.v1.baseline"


def series(base: int, *, flip_at: int | None = None, corrupt: bool = False) -> Series:
    """A greedy series (see the module doc)."""
    out = []
    for i in range(TOKENS):
        token, other = base + i, base + 100 + i
        if corrupt:
            out.append(Position(other, -0.5, {other: -0.5, token: -1.5}))
        elif i == flip_at:  # a near tie the runner-up wins
            out.append(Position(other, -0.69, {other: -0.69, token: -0.70}))
        else:
            out.append(Position(token, -0.1, {token: -0.1, other: -2.1}))
    return out


def prompt(length: int, first_item: int) -> ParityPrompt:
    """A sample prompt of distinct ids."""
    ids = [1, *(1000 * first_item + i for i in range(length - 1))]
    return ParityPrompt(length, ids, [1, 7, *ids[2:]], 1, first_item)


def reference(p: ParityPrompt) -> Reference:
    """The control's reference on CPU: bit-identical null arms, an altered twin that changes the output."""
    miss = series(p.first_item)
    null = {CACHE_BATCH_ARM: compare(miss, miss), FORCED_NULL_ARM: compare(miss, miss, True)}
    return Reference(p, miss, null, compare(miss, series(p.first_item + 50)))


def prepared(lengths: Sequence[int] = (257, 513, 257, 513, 257, 513)) -> Prepared:
    """Sample prompts and their reference (every prompt evidence)."""
    prompts = [prompt(n, 10 + i) for i, n in enumerate(lengths)]
    refs = [reference(p) for p in prompts]
    judge_evidence(sample_config().checks.parity, refs)
    return Prepared(prompts, refs, f"control {AGG}", 1, 3.0, {"prompt_source": "synthetic"})


def rode(samples: Sequence[tuple[ParityPrompt, Series | None]], window: tuple[float, float] = (0.0, 100.0)) -> Rider:
    """A rider that already sent these samples, one a second, inside `window` unless it says otherwise."""
    rider = Rider(lambda p: series(p.first_item), [p for p, _ in samples], 1)
    for i, (p, s) in enumerate(samples):
        rider.ridden.append(Ridden(p, s, 1.0 + i, 1.5 + i, None if s is not None else "HTTP 500"))
    rider.window = window
    return rider


def context(cell_id: str, work: Path, earlier: dict[str, CellResult] | None = None) -> CheckContext:
    """A context for a cell of the sample config (no server answers at its URLs)."""
    config = sample_config()
    cell = next(c for c in plan(config).planned() if c.id == cell_id)
    servers = {}
    if cell.topology == "pd-nixl":
        servers = {role: ServerInfo(role, "http://127.0.0.1:1", "http://127.0.0.1:1/metrics") for role in ("prefill",)}
    deployment = Deployment(cell, "http://127.0.0.1:1", "tiny", servers, started=True)
    return CheckContext(cell, deployment, config, work, earlier=earlier or {})


def throughput_result() -> CheckResult:
    """A throughput result the sub-result folds into."""
    return CheckResult(name="throughput", verdict="pass", summary="9.0 req/s")
