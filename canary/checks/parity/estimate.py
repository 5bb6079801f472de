"""The parity check's time estimate: the requests canary/checks/parity/check.py really sends on a cell.

n = the cell's prompts (canary.plan.parity_lengths): 2n `/tokenize` requests (`tokenize_s` each); an
aggregated control n greedy requests of `max_tokens` one at a time (the prefix-cache miss), then one
wave of `null_concurrency` in flight: n again (the null arm), n altered-first-block twins of
min(`max_tokens`, `dependence_tokens`) tokens (the evidence check), n teacher-forced re-scorings (one
token); a P/D cell one wave of n generations through the router and n re-scorings on its prefill
server (at most n: only evidence prompts are sent), plus the control's requests when no aggregated
control is planned (it then measures the reference on its own prefill server).
"""

from __future__ import annotations

from canary.checks.base import EstimateInput
from canary.config import CanaryConfig
from canary.plan.cell import Cell
from canary.plan.parity_lengths import cell_prompt_lengths, prompt_lengths
from canary.plan.waves import DEFAULT_MODEL, EstimateModel, RequestPhase, control_of

_EVERY_LENGTH = "parity.prompt_lengths"
"""EstimateInput.memo key: the config's prompt lengths (planning the matrix once per estimate pass)."""


def parity_prompt_count(config: CanaryConfig, cell: Cell | None = None) -> int:
    """Prompts the parity check sends on a cell (canary.plan.parity_lengths.cell_prompt_lengths;
    no cell: an aggregated one, every length of the config)."""

    every = prompt_lengths(config)
    return len(every) if cell is None else len(cell_prompt_lengths(config, cell, every))


def parity_phases(config: CanaryConfig, pd: bool, own_reference: bool, prompts: int) -> list[RequestPhase]:
    """The parity check's generation requests on one cell, from `checks.parity`: the control's reference,
    null arm and evidence twins (an aggregated cell, or a P/D cell without a planned control:
    `own_reference`), and a P/D cell's generations and re-scorings. `prompts`: parity_prompt_count(config).
    The /tokenize requests are not phases (no model work): 2 per prompt, EstimateModel.tokenize_s each."""
    settings = config.checks.parity
    tokens, wave = settings.max_tokens, settings.null_concurrency
    phases: list[RequestPhase] = []
    if not pd or own_reference:
        phases += [
            RequestPhase("reference (prefix-cache miss, one at a time)", prompts, tokens, 1),
            RequestPhase("null arm (again, in a concurrent wave)", prompts, tokens, wave),
            RequestPhase("altered-first-block twins", prompts, min(tokens, settings.dependence_tokens), wave),
            RequestPhase("null arm (teacher-forced re-scoring)", prompts, 1, wave),
        ]
    if pd:
        phases += [
            RequestPhase("P/D generations through the router", prompts, tokens, wave),
            RequestPhase("teacher-forced re-scoring on the prefill server", prompts, 1, wave),
        ]
    return phases


def parity_seconds(
    config: CanaryConfig, pd: bool, own_reference: bool, prompts: int, model: EstimateModel = DEFAULT_MODEL
) -> float:
    """Estimated seconds of the parity check on one cell (parity_phases plus the /tokenize requests)."""
    phases = parity_phases(config, pd, own_reference, prompts)
    return 2 * prompts * model.tokenize_s + sum(phase.seconds(model) for phase in phases)


def estimate(inp: EstimateInput) -> float:
    """parity_seconds of the cell: its prompts, and whether it measures its own reference (a P/D cell
    whose aggregated control is not planned)."""
    every = inp.memo.get(_EVERY_LENGTH)
    if not isinstance(every, list):
        every = inp.memo[_EVERY_LENGTH] = prompt_lengths(inp.config)
    prompts = len(cell_prompt_lengths(inp.config, inp.cell, every))
    pd = inp.cell.topology == "pd-nixl"
    own_reference = pd and inp.planned is not None and control_of(inp.cell, inp.planned) is None
    return parity_seconds(inp.config, pd, own_reference, prompts, inp.model)
