"""GPU budget, waves and the nightly wall-time estimate: pure functions, no I/O.

A cell holds GPUs while it is deployed: an aggregated server its tensor-parallel size, a P/D pair
prefill's plus decode's (the cell's prefill_tp and decode_tp: the model's `tensor_parallel_size` unless
the matrix gives the cell a P/D shape such as 2p1d; the router none). The Kubernetes target deploys the cells in
*waves* whose GPUs fit `target.kubernetes.gpu_budget`, tears each wave down before the next, and
a run must end inside the CronJob's deadline (`target.kubernetes.job_deadline_s`, which the
helm/canary chart reads from the same config as its activeDeadlineSeconds).

The time model (`EstimateModel`; every constant lives there):

- A wave: create its objects (`deploy_s`), wait for its cells to start *in parallel*
  (`target.kubernetes.typical_start_s`; at worst `ready_timeout_s`), run every cell's checks
  *one cell after another* (one controller, one load generator: measurements of one cell are not
  disturbed by another's load), delete the objects and wait for the pods to go (`teardown_s`).
- A cell's checks, one after another: each registered check declares its own time on a cell
  (`register(estimate=...)`, canary/checks/<name>/estimate.py), from its config section, with
  `token_s` seconds per generated token of a sequence, `request_s` per request on top (prefill,
  HTTP) and `tokenize_s` per `/tokenize` request; a phase of requests of one kind takes
  `ceil(requests / concurrency)` rounds (RequestPhase). This module cannot import the checks (plan
  sits below them): its callers (canary.run, the CLI) give it their estimator,
  canary.checks.estimate.checks_by_cell.
- A run fits when its typical estimate is at most `fill_ratio` of the deadline (the rest is the
  margin for slow starts, retries and export).

Rolling coverage: when the planned cells do not fit one run, the *nightly* cells (those matching
`target.kubernetes.rotation.every_night`; by default every high-risk cell) run every night with
the aggregated controls of their P/D cells, and the other cells fill the rest of the window,
least recently checked first (never checked first of all, high-risk before the others, then plan
order). `select_night` is given the last-checked times (canary/plan/rotation.py keeps them) and
returns tonight's cells.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from canary.config import CanaryConfig, CellMatch
from canary.errors import CanaryError
from canary.plan.cell import Cell
from canary.plan.matrix import matches

KEY_BUDGET = "target.kubernetes.gpu_budget"
KEY_DEADLINE = "target.kubernetes.job_deadline_s"
KEY_NIGHTLY = "target.kubernetes.rotation.every_night"
KEY_REDUCTION = "matrix.reduction"
KEY_TP = "models[].tensor_parallel_size (or the cell's prefill_tp / decode_tp)"


class ScheduleError(CanaryError):
    """The plan cannot be scheduled inside the GPU budget or the deadline. Exits 2."""

    exit_code = 2


@dataclass(frozen=True)
class EstimateModel:
    """Every constant of the wall-time estimate, in one place (seconds)."""

    token_s: float = 0.02
    """One generated token of one sequence at the checks' concurrency (an H200 decode step with a
    small batch is 5-15 ms; 20 ms leaves room for bigger models and fp8 dequantisation)."""
    request_s: float = 0.25
    """Per request on top of its tokens: prefill of a few-shot prompt, HTTP, the router hop."""
    deploy_s: float = 15.0
    """Render the wave with helm and create its objects."""
    teardown_s: float = 90.0
    """Delete a wave and wait for its pods to go (vllm-pd's terminationGracePeriodSeconds is 60)."""
    fill_ratio: float = 0.85
    """Share of the deadline a run's typical estimate may fill."""
    tokenize_s: float = 0.02
    """One `/tokenize` request (no model work: HTTP and the tokenizer)."""


DEFAULT_MODEL = EstimateModel()


def engine_gpus(cell: Cell, config: CanaryConfig) -> dict[str, int]:
    """GPUs each engine of a cell holds, by role in start order: {aggregated: tp} or {prefill: tp, decode: tp}
    (each role's tensor-parallel size, Cell.tp_for; the router holds none)."""
    if not any(m.name == cell.model for m in config.models):
        raise ScheduleError(f"cell {cell.id}: model {cell.model!r} is not in the config")
    roles = ("aggregated",) if cell.topology == "aggregated" else ("prefill", "decode")
    return {role: cell.tp_for(role) for role in roles}


def gpus_per_cell(cell: Cell, config: CanaryConfig) -> int:
    """GPUs a cell holds: its tensor-parallel size for an aggregated server, prefill's plus decode's for P/D."""
    return sum(engine_gpus(cell, config).values())


# --------------------------------------------------------------------------- check durations


def _rounds(requests: int, concurrency: int) -> int:
    return math.ceil(requests / max(1, concurrency))


@dataclass(frozen=True)
class RequestPhase:
    """Requests of one kind a check sends: `tokens` generated tokens each, `concurrency` in flight."""

    what: str
    requests: int
    tokens: int
    concurrency: int

    def seconds(self, model: EstimateModel) -> float:
        """`ceil(requests / concurrency)` rounds of one request and its tokens."""
        return _rounds(self.requests, self.concurrency) * (model.request_s + self.tokens * model.token_s)


Estimator = Callable[[Sequence[Cell], Sequence[Cell], CanaryConfig, EstimateModel], Mapping[str, float]]
"""(cells, planned, config, model) -> cell id -> seconds of the cell's checks: what the caller gives the packing
(canary.checks.estimate.checks_by_cell; a P/D cell whose control is not in `planned` measures its own reference)."""


# --------------------------------------------------------------------------- waves


@dataclass(frozen=True)
class Wave:
    """Cells deployed together, and the estimate of the wave's wall time."""

    index: int
    cells: tuple[Cell, ...]
    gpus: int
    typical_s: float
    worst_s: float


@dataclass(frozen=True)
class Schedule:
    """Tonight's waves, the cells left for later nights, and the numbers behind it."""

    waves: tuple[Wave, ...]
    deferred: tuple[Cell, ...]
    budget: int
    deadline_s: int
    gpus: Mapping[str, int]
    model: EstimateModel = field(default=DEFAULT_MODEL)

    @property
    def cells(self) -> list[Cell]:
        """Tonight's cells in run order."""
        return [cell for wave in self.waves for cell in wave.cells]

    @property
    def typical_s(self) -> float:
        """Estimated wall time with typical starts."""
        return sum(w.typical_s for w in self.waves)

    @property
    def worst_s(self) -> float:
        """Estimated wall time when every wave waits the whole startup deadline."""
        return sum(w.worst_s for w in self.waves)

    @property
    def window_s(self) -> float:
        """What a run may fill: fill_ratio of the deadline."""
        return self.deadline_s * self.model.fill_ratio

    @property
    def peak_gpus(self) -> int:
        """The most GPUs any wave holds."""
        return max((w.gpus for w in self.waves), default=0)


def run_order(cells: Sequence[Cell]) -> list[Cell]:
    """Aggregated controls before the P/D cells that compare against them (stable otherwise)."""
    return sorted(cells, key=lambda c: c.topology != "aggregated")


def pack(
    cells: Sequence[Cell],
    config: CanaryConfig,
    budget: int,
    check_s: Mapping[str, float],
    model: EstimateModel = DEFAULT_MODEL,
) -> list[Wave]:
    """Pack cells, in the given order, into waves of at most `budget` GPUs (next fit: the order is
    kept, so controls and high-risk cells come first). Each wave runs its aggregated cells first.
    `check_s`: cell id -> seconds of its checks (an Estimator's answer, with the same `model`)."""
    settings = config.target.kubernetes
    waves: list[list[Cell]] = []
    used = 0
    for cell in cells:
        need = gpus_per_cell(cell, config)
        if need > budget:
            raise ScheduleError(
                f"cell {cell.id} needs {need} GPUs, more than {KEY_BUDGET} ({budget}): raise the budget "
                f"or lower {KEY_TP}"
            )
        if not waves or used + need > budget:
            waves.append([])
            used = 0
        waves[-1].append(cell)
        used += need
    out: list[Wave] = []
    for index, members in enumerate(waves, start=1):
        checks = sum(check_s[c.id] for c in members)
        fixed = model.deploy_s + checks + model.teardown_s
        out.append(
            Wave(
                index=index,
                cells=tuple(run_order(members)),
                gpus=sum(gpus_per_cell(c, config) for c in members),
                typical_s=round(fixed + settings.typical_start_s, 1),
                worst_s=round(fixed + settings.ready_timeout_s, 1),
            )
        )
    return out


# --------------------------------------------------------------------------- tonight's cells


def nightly(cell: Cell, every_night: Sequence[CellMatch] | None) -> bool:
    """Whether a cell runs every night (default: the high-risk cells)."""
    if every_night is None:
        return cell.high_risk
    return any(matches(m, cell) for m in every_night)


def control_of(cell: Cell, planned: Sequence[Cell]) -> Cell | None:
    """The planned aggregated control of a P/D cell: same model, image, backend, KV dtype, runner
    and the prefill block size (what the parity and paired-accuracy checks prefer), with the same prefix
    caching where one is planned."""
    if cell.topology == "aggregated":
        return None
    candidates = [
        c
        for c in planned
        if c.topology == "aggregated"
        and (c.model, c.image, c.backend, c.kv_cache_dtype, c.runner, c.prefill_block_size)
        == (cell.model, cell.image, cell.backend, cell.kv_cache_dtype, cell.runner, cell.prefill_block_size)
    ]
    same_caching = [c for c in candidates if c.prefix_caching == cell.prefix_caching]
    return next(iter(same_caching or candidates), None)


def _with_controls(cells: Sequence[Cell], planned: Sequence[Cell], chosen: set[str]) -> list[Cell]:
    out: list[Cell] = []
    for cell in cells:
        control = control_of(cell, planned)
        for member in (control, cell):
            if member is not None and member.id not in chosen:
                chosen.add(member.id)
                out.append(member)
    return out


def _refusal(what: str, estimate_s: float, model: EstimateModel, deadline_s: int, budget: int) -> ScheduleError:
    window_s = deadline_s * model.fill_ratio
    return ScheduleError(
        f"{what} needs about {estimate_s / 3600:.1f} h, more than {window_s / 3600:.1f} h "
        f"({model.fill_ratio:.0%} of the {deadline_s} s deadline); change {KEY_BUDGET} (now {budget}), "
        f"{KEY_NIGHTLY} (fewer cells every night), {KEY_REDUCTION} (pairwise) or {KEY_DEADLINE} "
        "(the CronJob's activeDeadlineSeconds)"
    )


def select_night(
    planned: Sequence[Cell],
    config: CanaryConfig,
    last_checked: Mapping[str, datetime],
    estimate: Estimator,
    model: EstimateModel = DEFAULT_MODEL,
) -> Schedule:
    """Tonight's waves: every cell when all fit; else the nightly cells (and their controls) plus
    the least recently checked others while they fit. `estimate`: the checks' time on each cell
    (canary.checks.estimate.checks_by_cell). Raises ScheduleError when even the nightly cells do not
    fit the deadline."""
    settings = config.target.kubernetes
    budget = settings.gpu_budget
    if budget is None:
        raise ScheduleError(f"{KEY_BUDGET} is not set: without it Helm deploys every cell at once (no waves)")
    deadline = settings.job_deadline_s
    window = deadline * model.fill_ratio
    gpus = {c.id: gpus_per_cell(c, config) for c in planned}
    check_s = estimate(planned, planned, config, model)

    def schedule(cells: Sequence[Cell]) -> Schedule:
        chosen = {c.id for c in cells}
        deferred = tuple(c for c in planned if c.id not in chosen)
        waves = tuple(pack(cells, config, budget, check_s, model))
        return Schedule(waves=waves, deferred=deferred, budget=budget, deadline_s=deadline, gpus=gpus, model=model)

    every_night = settings.rotation.every_night
    first = [c for c in planned if nightly(c, every_night)]
    everything = schedule(_with_controls(first + [c for c in planned if not nightly(c, every_night)], planned, set()))
    if everything.typical_s <= window:
        return everything

    chosen: set[str] = set()
    tonight = _with_controls(first, planned, chosen)
    base = schedule(tonight)
    if base.typical_s > window:
        what = f"the {len(tonight)} cells that run every night (of {len(planned)} planned)"
        raise _refusal(what, base.typical_s, model, deadline, budget)

    order = {c.id: index for index, c in enumerate(planned)}

    def staleness(cell: Cell) -> tuple[int, float, int, int]:
        seen = last_checked.get(cell.id)
        return (seen is not None, seen.timestamp() if seen else 0.0, not cell.high_risk, order[cell.id])

    current = base
    for cell in sorted((c for c in planned if c.id not in chosen), key=staleness):
        if cell.id in chosen:  # came in as the control of an earlier one
            continue
        trial_chosen = set(chosen)
        candidate = tonight + _with_controls([cell], planned, trial_chosen)
        trial = schedule(candidate)
        if trial.typical_s > window:
            break  # strict order: the next night resumes with this cell
        tonight, chosen, current = candidate, trial_chosen, trial
    return current
