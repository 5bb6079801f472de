"""Parity: KV fidelity of P/D against its aggregated control, calibrated against the control's own noise.

Prompts (canary/checks/parity/prompts.py) are in-domain items (GSM8K format, held-out split) cut at
block-relative lengths, identical token ids in every cell of a model.

An aggregated cell measures the *reference* on itself, per prompt:
  miss    greedy generation with top-k logprobs, one request at a time (first sight of the prompt:
          prefix-cache miss, batch of one);
  again   the same request inside one concurrent wave with every other prompt's requests (a
          prefix-cache hit in another batch composition);
  forced  its own greedy output re-scored teacher-forced (prompt_logprobs, max_tokens 1);
  altered the prompt with its first block replaced (dependence_tokens generated): the evidence
          check. A prompt is *evidence* only if this changes the greedy tokens or moves a
          generated logprob by dependence_min_nats (and beyond the null arm); the others are
          listed as rejected, with the reason.
The null arm (the noise floor) is miss vs again (generation vs generation) and miss vs forced
(teacher-forced vs generated). Too few evidence prompts: `invalid`, never pass.

A P/D cell generates every prompt through its router in one concurrent wave (null_concurrency, like
the null arm's `again` wave, whose miss-vs-again comparison is the floor of that batch-composition
difference), and its own prefill server (a plain request, no KV transfer) re-scores each P/D output
teacher-forced as soon as it arrives. Compared (canary/checks/parity/fidelity.py):
  P/D generation vs the control's miss generation: greedy tokens, top-k KL;
  P/D generation vs the teacher-forced control scoring of the same tokens: top-k KL, max |delta
  logprob| and top-1 agreement at every position, even where greedy tokens agree.
Each is gated against the matching null comparisons (canary/checks/parity/gates.py): margin x floor +
tolerance, exact when the floor is 0 (CPU), else a binomial exceedance test at alpha. Every failing
prompt gets its first divergent position, the KV block it falls in on each side (logical and
kernel) and a diagnosis across prompt lengths, in the evidence and the summary.

Without a control that ran parity, the P/D cell measures the reference on its own prefill server
(plain requests) and the evidence says so. An aggregated cell on a candidate image also compares its
reference with the same cell on the baseline image (canary/checks/parity/drift.py): drift.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from canary.checks.base import CheckContext, register
from canary.checks.parity.client import ParityError, generate, rescore, tokenize
from canary.checks.parity.drift import judge_drift
from canary.checks.parity.estimate import estimate
from canary.checks.parity.exported import EXPORTED
from canary.checks.parity.fidelity import Fidelity, Series, compare
from canary.checks.parity.gates import (
    BlockSide,
    FloorGate,
    TokenGate,
    diagnose,
    first_divergence,
    floor_gate,
    locate,
    token_gate,
)
from canary.checks.parity.metrics import evidence_metrics, pd_metrics, reference_metrics
from canary.checks.parity.prompts import ParityPrompt, PromptError, build_prompts, source_items
from canary.checks.parity.reference import (
    CACHE_BATCH_ARM,
    FORCED_NULL_ARM,
    GEN_NULL_ARMS,
    Reference,
    judge_evidence,
    reference_from_evidence,
    thresholds,
)
from canary.config import ParityCheckConfig
from canary.core import metric_keys as keys
from canary.judge.results import CheckResult, Gate
from canary.plan.parity_lengths import block_sizes, cell_prompt_lengths, prompt_lengths


def measure_reference(
    base_url: str, model: str, prompts: Sequence[ParityPrompt], settings: ParityCheckConfig
) -> tuple[list[Reference], dict[str, Any]]:
    """The control's reference, null arm and evidence check (see the module doc): every prompt once,
    one after another (batch of one, prefix-cache miss); then one concurrent wave of every prompt
    again (a prefix-cache hit in another batch composition), every altered twin and every
    teacher-forced re-scoring."""
    k, n, timeout = settings.top_logprobs, settings.max_tokens, settings.request_timeout_s
    miss = [generate(base_url, model, p.ids, n, k, timeout) for p in prompts]
    with ThreadPoolExecutor(max_workers=settings.null_concurrency, thread_name_prefix="parity-wave") as pool:
        loaded = [pool.submit(generate, base_url, model, p.ids, n, k, timeout) for p in prompts]
        twin_n = min(n, settings.dependence_tokens)
        altered = [pool.submit(generate, base_url, model, p.altered_ids, twin_n, k, timeout) for p in prompts]
        forced = [
            pool.submit(rescore, base_url, model, p.ids, [x.token for x in m], k, timeout)
            for p, m in zip(prompts, miss, strict=True)
        ]
        wave = [(a.result(), b.result(), c.result()) for a, b, c in zip(loaded, altered, forced, strict=True)]
    refs = []
    for prompt, first, (again, twin, scored) in zip(prompts, miss, wave, strict=True):
        null = {CACHE_BATCH_ARM: compare(first, again), FORCED_NULL_ARM: compare(first, scored, True)}
        refs.append(Reference(prompt, first, null, compare(first[: len(twin)], twin)))
    judge_evidence(settings, refs)
    return refs, {"wave_concurrency": settings.null_concurrency, "wave_requests": 3 * len(prompts)}


def _prompts(ctx: CheckContext) -> tuple[list[ParityPrompt], str, list[int]]:
    settings, model = ctx.config.checks.parity, ctx.deployment.served_model
    model_spec = next((m for m in ctx.config.models if m.name == ctx.cell.model), ctx.config.models[0])
    items, where = source_items(ctx.config, model_spec.source)
    sizes = block_sizes(ctx.config)
    url = ctx.engine_url()
    every = prompt_lengths(ctx.config, sizes)
    # built at every length (a prompt's text depends on its place in that list), sent at the cell's
    prompts = build_prompts(
        items,
        every,
        min(sizes, default=16),
        settings.item_offset,
        lambda text: tokenize(url, model, text, settings.request_timeout_s),
    )
    mine = set(cell_prompt_lengths(ctx.config, ctx.cell, every))
    return [p for p in prompts if p.length in mine], where, sizes


def block_sides(ctx: CheckContext) -> list[BlockSide]:
    """The cell's block geometry on each side (control, or prefill and decode), for localizing a divergence."""
    cell = ctx.cell
    if cell.topology == "aggregated":
        return [BlockSide("control", cell.prefill_block_size, cell.kernel_block_prefill)]
    return [
        BlockSide("prefill", cell.prefill_block_size, cell.kernel_block_prefill),
        BlockSide("decode", cell.decode_block_size, cell.kernel_block_decode),
    ]


def _invalid(refs: Sequence[Reference], settings: ParityCheckConfig, evidence: dict[str, Any]) -> CheckResult | None:
    kept = sum(r.evidence for r in refs)
    if kept >= settings.min_evidence_prompts:
        return None
    rejected = [f"{r.prompt.length} tokens: {r.reason}" for r in refs if not r.evidence]
    return CheckResult(
        name="parity",
        verdict="invalid",
        summary=(
            f"inconclusive: only {kept}/{len(refs)} prompts have outputs that depend on their first block "
            f"(need {settings.min_evidence_prompts}); {rejected[0] if rejected else ''}"
        ),
        metrics=evidence_metrics(refs),
        evidence=evidence,
    )


@register(
    "parity",
    order=1,
    settings=ParityCheckConfig,
    metrics=EXPORTED,
    estimate=estimate,
)
def parity_check(ctx: CheckContext) -> CheckResult:
    """In-domain prompts, logprob fidelity gated against the null arm; P/D against the control."""
    settings = ctx.config.checks.parity
    model = ctx.deployment.served_model
    started = time.monotonic()
    try:
        prompts, source, sizes = _prompts(ctx)
    except (ParityError, PromptError) as exc:
        return CheckResult(name="parity", verdict="error", summary=f"prompts: {exc}")
    evidence: dict[str, Any] = {
        "prompt_source": source,
        "block_sizes": sizes,
        "prompt_lengths": [p.length for p in prompts],
    }
    if ctx.cell.topology != "pd-nixl":
        try:
            refs, load = measure_reference(ctx.deployment.base_url, model, prompts, settings)
        except ParityError as exc:
            return CheckResult(name="parity", verdict="error", summary=str(exc), evidence=evidence)
        evidence.update(
            reference=[r.to_json() for r in refs], null_load=load, reference_s=round(time.monotonic() - started, 2)
        )
        return _invalid(refs, settings, evidence) or _reference_result(ctx, refs, settings, evidence)
    return _pd_result(ctx, prompts, evidence)


def _reference_result(
    ctx: CheckContext, refs: Sequence[Reference], settings: ParityCheckConfig, evidence: dict[str, Any]
) -> CheckResult:
    floors = _floors(refs)
    kept = sum(r.evidence for r in refs)
    summary = (
        f"reference of {len(refs)} prompts ({refs[0].prompt.length}..{refs[-1].prompt.length} tokens), "
        f"{kept} evidence; null floor: KL {floors['kl']:.3g}, |dlogprob| {floors['abs_dlp']:.3g}, "
        f"{floors['token_flips']:.0f} token flips"
    )
    metrics = reference_metrics(refs, floors)
    gates: list[Gate] = []
    baseline = ctx.baseline_for()
    recorded = None if baseline is None else baseline.check("parity")
    if baseline is not None and recorded is not None and "reference" in recorded.evidence:
        base_refs = reference_from_evidence(recorded.evidence["reference"], [r.prompt for r in refs])
        gates, drift_metrics, drift = judge_drift(settings, refs, base_refs, baseline.cell.id)
        metrics.update(drift_metrics)
        evidence["drift"] = drift
        if not all(g.passed for g in gates):
            summary = (
                f"drift vs the baseline image ({baseline.cell.id}): {drift_metrics[keys.PARITY_DRIFT_TOKEN_FLIPS]:.0f}/"
                f"{drift_metrics[keys.PARITY_DRIFT_PROMPTS]:.0f} prompts change greedy tokens, KL max "
                f"{drift_metrics[keys.PARITY_DRIFT_KL_MAX]:.3g} (null floor {floors['kl']:.3g}); " + summary
            )
    if not gates:  # the control's own reference: measured for the P/D cells, nothing here to judge it against
        summary += " (ungated: the control's reference for P/D cells; no baseline image's reference to drift from)"
    return CheckResult(
        name="parity",
        verdict="ungated" if not gates else "pass" if all(g.passed for g in gates) else "fail",
        summary=summary,
        metrics=metrics,
        gates=gates,
        evidence=evidence,
    )


def _floors(refs: Sequence[Reference]) -> dict[str, float]:
    arms = [f for r in refs for f in r.null.values()]
    return {
        "kl": max((f.max_kl for f in arms), default=0.0),
        "abs_dlp": max((f.max_abs_dlp for f in arms), default=0.0),
        "token_flips": float(sum(r.null[a].token_diff for r in refs for a in GEN_NULL_ARMS if a in r.null)),
    }


def _reference_for_pd(
    ctx: CheckContext, prompts: Sequence[ParityPrompt]
) -> tuple[list[Reference], str, dict[str, Any]]:
    settings = ctx.config.checks.parity
    control = ctx.control_for()
    recorded = None if control is None else control.check("parity")
    if control is not None and recorded is not None and "reference" in recorded.evidence:
        refs = reference_from_evidence(recorded.evidence["reference"], prompts)
        if refs:
            return refs, f"control {control.cell.id}", {}
    why = "no aggregated control started" if control is None else f"control {control.cell.id} recorded no reference"
    prefill = ctx.deployment.server("prefill")
    if prefill is None:
        raise ParityError(f"no reference: {why}, and no prefill server to measure one")
    refs, load = measure_reference(prefill.base_url, ctx.deployment.served_model, prompts, settings)
    return refs, f"this cell's prefill server directly ({why})", load


def _pd_result(ctx: CheckContext, prompts: Sequence[ParityPrompt], evidence: dict[str, Any]) -> CheckResult:
    settings, model = ctx.config.checks.parity, ctx.deployment.served_model
    k, n, timeout = settings.top_logprobs, settings.max_tokens, settings.request_timeout_s
    prefill = ctx.deployment.server("prefill")
    try:
        refs, source, load = _reference_for_pd(ctx, prompts)
        if prefill is None:
            raise ParityError("a pd-nixl deployment without a prefill server")
        evidence.update(reference_source=source, reference=[r.to_json() for r in refs], null_load=load)
        invalid = _invalid(refs, settings, evidence)
        if invalid is not None:
            return invalid
        kept = [ref for ref in refs if ref.evidence]  # the others prove nothing: not sent
        scorer, started = prefill.base_url, time.monotonic()

        def generate_and_rescore(ref: Reference) -> tuple[Series, Series]:
            pd = generate(ctx.deployment.base_url, model, ref.prompt.ids, n, k, timeout)
            return pd, rescore(scorer, model, ref.prompt.ids, [p.token for p in pd], k, timeout)

        # One concurrent wave, as the null arm's `again` wave: its miss-vs-again comparison is the
        # noise floor of exactly this difference (batch composition), so the gates stay calibrated.
        with ThreadPoolExecutor(max_workers=settings.null_concurrency, thread_name_prefix="parity-pd") as pool:
            done = [f.result() for f in [pool.submit(generate_and_rescore, ref) for ref in kept]]
        evidence["pd_wave"] = {
            "concurrency": settings.null_concurrency,
            "requests": 2 * len(kept),
            "seconds": round(time.monotonic() - started, 2),
        }
        rows = [
            (ref, pd, compare(ref.miss, pd), compare(pd, tf, True)) for ref, (pd, tf) in zip(kept, done, strict=True)
        ]
    except ParityError as exc:
        return CheckResult(name="parity", verdict="error", summary=str(exc), evidence=evidence)
    judged = family_settings(ctx, tp_settings(ctx, settings, evidence), evidence)
    return judge_pd(block_sides(ctx), judged, refs, rows, source, evidence)


def family_settings(ctx: CheckContext, settings: ParityCheckConfig, evidence: dict[str, Any]) -> ParityCheckConfig:
    """The settings of a P/D cell of a state family (`state_families`): the greedy-token gate reported, not gating
    (its decode steps the state with another kernel than the prefill), noted in the evidence."""
    if ctx.cell.family not in settings.state_families or not settings.token_gate:
        return settings
    evidence["token_gate"] = (
        f"reported, not gating: {ctx.cell.family} decode steps its recurrent state with another kernel than the "
        "prefill, so P/D greedy tokens may flip at near-ties; the teacher-forced gates judge it"
    )
    return settings.model_copy(update={"token_gate": False})


def tp_settings(ctx: CheckContext, settings: ParityCheckConfig, evidence: dict[str, Any]) -> ParityCheckConfig:
    """The settings a P/D cell is judged with: the TP tolerances (tp_kl_tolerance, tp_logprob_tolerance) where a
    role runs another tensor-parallel size than the control the reference came from, noted in the evidence."""
    control = ctx.control_for()
    ranks = control.cell.prefill_tp if control is not None else ctx.cell.prefill_tp
    if ctx.cell.tp_for("prefill") == ranks and ctx.cell.tp_for("decode") == ranks:
        return settings
    evidence["tolerance"] = {
        "kl": settings.tp_kl_tolerance,
        "abs_dlp": settings.tp_logprob_tolerance,
        "why": f"{ctx.cell.tp_shape} against a control of {ranks} rank(s): another summation order",
    }
    return settings.model_copy(
        update={"kl_tolerance": settings.tp_kl_tolerance, "logprob_tolerance": settings.tp_logprob_tolerance}
    )


def judge_pd(
    sides: Sequence[BlockSide],
    settings: ParityCheckConfig,
    refs: Sequence[Reference],
    rows: Sequence[tuple[Reference, Series, Fidelity, Fidelity]],
    source: str,
    evidence: dict[str, Any],
) -> CheckResult:
    """Gate P/D rows (reference, P/D generation, generation vs control, teacher-forced) against the
    null arm of `refs`; per-prompt series, divergence locations and the diagnosis into `evidence`."""
    used = [row for row in rows if row[0].evidence]
    gen_null = [r.null[a] for r in refs for a in GEN_NULL_ARMS if a in r.null]
    forced_null = [r.null[FORCED_NULL_ARM] for r in refs if FORCED_NULL_ARM in r.null]
    abs_dlp = floor_gate(
        "abs_dlp",
        [f.max_abs_dlp for *_, f in used],
        [f.max_abs_dlp for f in forced_null],
        settings.margin,
        settings.logprob_tolerance,
        settings.alpha,
    )
    # A flip where both arms rank the same two tokens within the |delta logprob| this gate accepts is that
    # accepted noise tipping a near-tie (a bf16 step on a clean Gemma-3 pair, 2026-12-05), not a new fault:
    # counted by neither the token nor the top-1 gate, on either arm; the KL and |dlogprob| gates still judge.
    tie = abs_dlp.threshold
    evidence["near_tie_nats"] = round(tie, 9)
    evidence["near_tie_flips"] = sum(
        g.first_token_diff is not None and not g.differs_beyond(tie) for _, _, g, _ in used
    )
    tokens = token_gate(
        [g.differs_beyond(tie) for _, _, g, _ in used], [f.differs_beyond(tie) for f in gen_null], settings.alpha
    )
    floors: list[tuple[str, FloorGate]] = [
        (
            "forced-kl",
            floor_gate(
                "kl",
                [f.max_kl for *_, f in used],
                [f.max_kl for f in forced_null],
                settings.margin,
                settings.kl_tolerance,
                settings.alpha,
            ),
        ),
        ("forced-abs-dlogprob", abs_dlp),
        (
            "forced-top1",
            floor_gate(
                "top1_disagree",
                [f.top1_disagree_beyond(tie) for *_, f in used],
                [f.top1_disagree_beyond(tie) for f in forced_null],
                settings.margin,
                0.0,
                settings.alpha,
            ),
        ),
        (
            "generation-kl",
            floor_gate(
                "kl",
                [g.max_kl for _, _, g, _ in used],
                [f.max_kl for f in gen_null],
                settings.margin,
                settings.kl_tolerance,
                settings.alpha,
            ),
        ),
    ]
    gates = [
        Gate(
            name="tokens-vs-null",
            passed=tokens.passed or not settings.token_gate,
            observed=float(tokens.pd_diff),
            threshold=float(tokens.null_diff),
            detail=tokens.detail()
            + (
                f" ({evidence['near_tie_flips']} at a near-tie within {tie:.2g} nats not counted)"
                if evidence["near_tie_flips"]
                else ""
            )
            + ("" if settings.token_gate else " (reported, not gating: token_gate false)"),
        )
    ]
    gates += [
        Gate(name=name, passed=g.passed, observed=round(g.p_value, 6), threshold=settings.alpha, detail=g.detail())
        for name, g in floors
    ]
    per_prompt, failing, passing = _per_prompt(
        sides, used, tokens, floors, thresholds(settings, refs), token_gating=settings.token_gate, tie=tie
    )
    evidence.update(
        per_prompt=per_prompt,
        rejected=[{"length": r.prompt.length, "reason": r.reason} for r in refs if not r.evidence],
    )
    smallest = min(s.logical for s in sides)
    diagnosis = diagnose(failing, passing, smallest)
    evidence["diagnosis"] = diagnosis
    passed = all(g.passed for g in gates)
    failed = [g.name for g in gates if not g.passed]
    summary = (
        f"{len(used)} evidence prompts vs {source}: {tokens.detail()}"
        if passed
        else f"{len(failing)}/{len(used)} prompts beyond the null floor ({', '.join(failed)}): {diagnosis}"
    )
    return CheckResult(
        name="parity",
        verdict="pass" if passed else "fail",
        summary=summary,
        metrics=pd_metrics(
            refs,
            [(g, f) for _, _, g, f in used],
            forced_null,
            dict(floors),
            (failing, passing, smallest),
            settings.max_tokens,
        ),
        gates=gates,
        evidence=evidence,
    )


def _per_prompt(
    sides: Sequence[BlockSide],
    used: Sequence[tuple[Reference, Series, Fidelity, Fidelity]],
    tokens: TokenGate,
    floors: Sequence[tuple[str, FloorGate]],
    thresholds: dict[str, float],
    *,
    token_gating: bool = True,
    tie: float = 0.0,
) -> tuple[list[dict[str, Any]], list[tuple[int, int]], list[int]]:
    """Per-prompt rows (series, verdict, where it diverged); (length, first divergence) of failing
    prompts and lengths of passing ones."""
    exceeding = {i for _, g in floors for i in g.exceeding}
    if not tokens.exact or not token_gating:
        token_fail: set[int] = set()
    else:
        token_fail = {i for i, (_, _, g, _) in enumerate(used) if g.differs_beyond(tie)}
    rows, failing, passing = [], [], []
    for index, (ref, pd, gen, forced) in enumerate(used):
        fails = index in exceeding or index in token_fail
        row: dict[str, Any] = {
            "length": ref.prompt.length,
            "prompt_sha": ref.prompt.sha,
            "output_ids": [p.token for p in pd],
            "beyond_noise": fails,
            "generation": gen.to_json(),
            "forced": forced.to_json(),
        }
        if fails:
            at = _onset(forced, gen, thresholds)
            row["divergence"] = locate(ref.prompt.length, at, sides)
            failing.append((ref.prompt.length, at))
        else:
            passing.append(ref.prompt.length)
        rows.append(row)
    return rows, failing, passing


def _onset(forced: Fidelity, gen: Fidelity, thresholds: dict[str, float]) -> int:
    found = [x for x in (first_divergence(forced, thresholds), first_divergence(gen, thresholds)) if x is not None]
    return min(found, default=0)
