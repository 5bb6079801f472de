"""The paired build-vs-build verdict (checks.throughput.paired): both images measured interleaved.

On the 2-core CPU machine one closed-loop window of 16 requests spreads by ~0.2 in log from the next
(docs/methodology/throughput.md), so a candidate judged against a baseline cell deployed minutes
earlier needs a 60% tolerance. Here the candidate's throughput check deploys the baseline
counterpart cell beside it (`CheckContext.deploy`: the runner's, canary.run.held, hands over the
baseline cell's own deployment when it ran earlier in the run and the target could keep it frozen
since; else the target's deploy, which picks free ports and binds the roles to the same cores, so
only the loaded pair runs) and, with `fresh_candidate`, the candidate too, so both arms start alike;
then it measures both in many short alternating windows of the same seeded workload, ABBA order
(pair k: baseline first when k is even), all in one load process (`LoadSession`: a window costs its
requests, not a process start). The statistic is canary/core/paired.py: the ratio candidate /
baseline with a t interval, pass / regress / inconclusive against `margin`.

`redeploy_rounds` > 1 deploys both cells afresh for every further round (the runner's candidate
deployment stays up, idle, meanwhile) and takes the interval over the rounds, so a deployment's
mode is noise the interval sees rather than a bias it cannot.

`max_pairs` makes it sequential: after each `pairs` the verdict is read at its share of the confidence
(canary.core.paired, `looks`), and the next `pairs` are measured on the same deployments only while it
is inconclusive; evidence.paired.pairs_measured says how far it went.

A pair is dropped (recorded in evidence.paired.problems) when either window's client was not a
reliable clock, the machine was busy with other processes, or the baseline's window had failed
requests; failed requests of the candidate's windows beyond `max_error_rate` fail the check.
Every deployment made here is stopped before the check returns, also on an exception or Ctrl-C.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import Any, Literal

from canary.checks.base import CheckContext
from canary.checks.throughput import hostload
from canary.config import CanaryConfig
from canary.core import metric_keys as keys
from canary.core.paired import PairedVerdict, Window, abba_order, paired_verdict
from canary.judge.request_tests import PAIRED_GATE_PREFIX, gates_verdict
from canary.judge.results import CAUSE_KEY, CheckResult, Gate
from canary.load.launch import LoadError, LoadResult, LoadSession
from canary.load.workload import WorkloadSpec
from canary.plan.cell import Cell
from canary.targets.base import Deployment

HELD_KEY = "held"
"""Deployment.evidence key the runner sets on a deployment it kept frozen for this check (canary.run.held)."""

SEED_OFFSET = 100_000
"""Window seeds start here (round r, pair k: seed + SEED_OFFSET + 1000 r + k): no window repeats a prompt
the check's own measurement sent (vLLM's prefix cache would serve it), and both arms of a pair get the
same prompts."""

Arm = Literal["baseline", "candidate"]
LoadFn = Callable[[WorkloadSpec, Path, str], LoadResult]


def chosen(config: CanaryConfig, cell: Cell) -> bool:
    """Whether the config pairs this cell: paired on, the throughput check on, and the cell one of `cells`
    (empty: any)."""
    throughput = config.checks.throughput
    paired = throughput.paired
    picked = not paired.cells or any(cell.id.startswith(prefix) for prefix in paired.cells)
    return throughput.enabled and paired.enabled and picked


def applies(ctx: CheckContext) -> bool:
    """Whether this cell gets the paired verdict: enabled and chosen (`cells`), a target that can deploy
    another cell, and a baseline counterpart in the matrix."""
    return chosen(ctx.config, ctx.cell) and ctx.deploy is not None and ctx.baseline_cell() is not None


def counterparts_in_order(config: CanaryConfig, cells: Sequence[Cell]) -> dict[str, set[str]]:
    """Baseline cells of a run that a later cell's paired check will deploy beside it: counterpart id ->
    the ids of the cells that want it (canary.run.held keeps such a deployment, frozen, for them)."""
    wanted: dict[str, set[str]] = {}
    for index, cell in enumerate(cells):
        if cell.image == config.baseline or cell.status != "planned" or not chosen(config, cell):
            continue
        want = {**cell.axis_values(), "image": config.baseline}
        for earlier in cells[:index]:
            if earlier.status == "planned" and earlier.axis_values() == want:
                wanted.setdefault(earlier.id, set()).add(cell.id)
    return wanted


def window_spec(
    ctx: CheckContext, deployment: Deployment, base: WorkloadSpec, seed: int, requests: int
) -> WorkloadSpec:
    """The workload of one window against one arm's deployment."""
    paired = ctx.config.checks.throughput.paired
    return base.model_copy(
        update={
            "base_url": deployment.base_url,
            "num_requests": requests,
            "warmup_requests": paired.warmup_requests,
            "seed": seed,
        }
    )


def add_paired(ctx: CheckContext, base: WorkloadSpec, result: CheckResult, load: LoadFn | None = None) -> None:
    """Run the paired measurement and add its gate, metrics, evidence.paired and summary to `result`.

    `base` is the check's workload (token pool included); skipped when the check's own measurement
    was not a pass (an erroring or failing candidate needs no comparison; an invalid client would
    not measure the pairs either). Every window runs in one load process (`LoadSession`) unless
    `load` says otherwise (tests)."""
    paired = ctx.config.checks.throughput.paired
    counterpart = ctx.baseline_cell()
    block: dict[str, Any] = {
        "baseline_cell": counterpart.id if counterpart is not None else None,
        "margin": paired.margin,
        "confidence": paired.confidence,
        "trim": paired.trim,
        "metric": paired.metric,
        "pairs_per_round": paired.pairs,
        "max_pairs": paired.max_pairs,
        "looks_planned": paired.looks,
        "requests_per_window": paired.requests_per_window,
        "redeploy_rounds": paired.redeploy_rounds,
    }
    result.evidence["paired"] = block
    if result.verdict not in ("pass", "ungated"):  # a clean load; ungated: the paired verdict is its gate
        block["skipped"] = f"the throughput measurement was {result.verdict}"
        return
    if counterpart is None or ctx.deploy is None:
        block["skipped"] = "no baseline counterpart cell, or a target that cannot deploy one"
        return
    windows, records, problems, failure = _measure(ctx, counterpart.id, base, load, block)
    block["pairs_measured"] = len({(r["round"], r["pair"]) for r in records})
    block["windows"] = records
    block["problems"] = problems
    gate, verdict = _gate(ctx, windows, records, failure)
    if verdict is not None:
        block["verdict"] = verdict.to_json()
        result.metrics.update(verdict_metrics(verdict))
    result.gates.append(gate)
    for extra in _candidate_errors(ctx, records):
        result.gates.append(extra)
    result.verdict = gates_verdict(result.gates)
    if result.verdict == "invalid":
        result.evidence[CAUSE_KEY] = "paired verdict inconclusive"
    result.summary = f"{result.summary}; {gate.detail}"


def verdict_metrics(verdict: PairedVerdict) -> dict[str, float]:
    """The paired verdict's numbers in CheckResult.metrics (exported: canary/export/prometheus/schema.py)."""
    return {keys.PAIRED_RATIO: verdict.ratio, keys.PAIRED_RATIO_LOW: verdict.low, keys.PAIRED_RATIO_HIGH: verdict.high}


def _gate(
    ctx: CheckContext, windows: list[Window], records: list[dict[str, Any]], failure: str | None
) -> tuple[Gate, PairedVerdict | None]:
    """The paired gate: passed on `pass`; failed with the ratio on `regress` (fail), without a number
    when inconclusive or not measured (invalid)."""
    paired = ctx.config.checks.throughput.paired
    name = f"{PAIRED_GATE_PREFIX}{paired.metric}"
    floor = 1.0 - paired.margin
    if failure is not None:
        return Gate(name=name, passed=False, observed=None, threshold=floor, detail=f"paired: {failure}"), None
    try:
        verdict = _verdict(ctx, windows, records)
    except ValueError as exc:
        return Gate(name=name, passed=False, observed=None, threshold=floor, detail=f"paired: {exc}"), None
    decided = verdict.outcome != "inconclusive"
    gate = Gate(
        name=name,
        passed=verdict.outcome == "pass",
        observed=verdict.ratio if decided else None,
        threshold=floor,
        detail=verdict.sentence(),
    )
    return gate, verdict


def _verdict(ctx: CheckContext, windows: list[Window], records: list[dict[str, Any]]) -> PairedVerdict:
    """The verdict of the kept windows at the check's planned looks (ValueError: too few pairs)."""
    paired = ctx.config.checks.throughput.paired
    kept = [w for w in windows if not _dropped(records, w)]
    return paired_verdict(
        kept, margin=paired.margin, confidence=paired.confidence, trim=paired.trim, looks=paired.looks
    )


def _decided(ctx: CheckContext, windows: list[Window], records: list[dict[str, Any]]) -> bool:
    """Whether a look's verdict is pass or regress (a sequential check then stops measuring)."""
    try:
        return _verdict(ctx, windows, records).outcome != "inconclusive"
    except ValueError:
        return False


def _dropped(records: list[dict[str, Any]], window: Window) -> bool:
    return any(r["round"] == window.round and r["pair"] == window.pair and r["dropped"] for r in records)


def _candidate_errors(ctx: CheckContext, records: list[dict[str, Any]]) -> list[Gate]:
    """Failed requests of the candidate's windows: real failures whatever the comparison says."""
    cfg = ctx.config.checks.throughput
    mine = [r for r in records if r["arm"] == "candidate"]
    total = sum(r["requests_total"] for r in mine)
    failed = sum(r["requests_failed"] for r in mine)
    if not total:
        return []
    rate = failed / total
    return [
        Gate(
            name="paired-windows-error-rate",
            passed=rate <= cfg.max_error_rate,
            observed=rate,
            threshold=cfg.max_error_rate,
            detail=f"{failed:.0f} of {total:.0f} requests of the candidate's paired windows failed",
        )
    ]


def _measure(
    ctx: CheckContext, counterpart_id: str, base: WorkloadSpec, load: LoadFn | None, block: dict[str, Any]
) -> tuple[list[Window], list[dict[str, Any]], list[str], str | None]:
    """Every round's windows; (windows, per-window records, problems, why it could not measure)."""
    work = ctx.cell_dir / "throughput" / "paired"
    if load is not None:
        return _rounds(ctx, counterpart_id, base, load, work, block)
    with LoadSession(work / "load-session.log") as session:
        return _rounds(ctx, counterpart_id, base, session.run, work, block)


def _rounds(
    ctx: CheckContext, counterpart_id: str, base: WorkloadSpec, load: LoadFn, work: Path, block: dict[str, Any]
) -> tuple[list[Window], list[dict[str, Any]], list[str], str | None]:
    paired = ctx.config.checks.throughput.paired
    counterpart = ctx.baseline_cell()
    deploy = ctx.deploy
    assert counterpart is not None and deploy is not None  # applies() said so
    windows: list[Window] = []
    records: list[dict[str, Any]] = []
    problems: list[str] = []
    for rnd in range(paired.redeploy_rounds):
        where = work / f"round-{rnd + 1}"
        with ExitStack() as stack:
            arms: dict[Arm, Deployment] = {}
            if rnd == 0 and not paired.fresh_candidate:
                arms["candidate"] = ctx.deployment
            else:
                arms["candidate"] = stack.enter_context(deploy(ctx.cell, where / "candidate-logs"))
            arms["baseline"] = stack.enter_context(deploy(counterpart, where / "baseline-logs"))
            if rnd == 0:  # held: the baseline cell's own deployment, kept frozen since its cell (canary.run.held)
                block["baseline_deployment"] = arms["baseline"].evidence.get(HELD_KEY, "deployed for this check")
            for arm, deployment in arms.items():
                if not deployment.started:
                    cell_id = counterpart_id if arm == "baseline" else ctx.cell.id
                    return windows, records, problems, f"the {arm} ({cell_id}) did not start: {deployment.failure}"
            pgids = [s.pid for d in arms.values() for s in d.servers.values() if s.pid is not None]
            try:
                for look in range(1, paired.looks + 1):  # one look unless sequential (max_pairs)
                    pairs = range(paired.pairs * (look - 1), min(paired.pairs * look, paired.max_pairs or paired.pairs))
                    _round(ctx, rnd, arms, base, pgids, where, load, windows, records, problems, pairs)
                    if look < paired.looks and _decided(ctx, windows, records):
                        break
            except LoadError as exc:
                return windows, records, problems, f"a window's load run failed: {str(exc).splitlines()[0]}"
    return windows, records, problems, None


def _round(
    ctx: CheckContext,
    rnd: int,
    arms: dict[Arm, Deployment],
    base: WorkloadSpec,
    pgids: list[int],
    where: Path,
    load: LoadFn,
    windows: list[Window],
    records: list[dict[str, Any]],
    problems: list[str],
    pairs: range,
) -> None:
    """Measure `pairs` of round `rnd` (warming each fresh deployment first, before its first pair)."""
    cfg = ctx.config.checks.throughput
    paired = cfg.paired
    seed0 = cfg.seed + SEED_OFFSET + 1000 * rnd
    for arm, deployment in arms.items():  # a freshly started server's first requests are slow: warm it
        if deployment is not ctx.deployment and pairs.start == 0:
            load(window_spec(ctx, deployment, base, seed0 + 999, max(4, paired.warmup_requests)), where, f"warm-{arm}")
    for pair, arm in abba_order(pairs.stop, pairs.start):
        spec = window_spec(ctx, arms[arm], base, seed0 + pair, paired.requests_per_window)
        before = hostload.sample(pgids)
        run = load(spec, where, f"pair-{pair}-{arm}")
        after = hostload.sample(pgids)
        foreign = hostload.foreign_load(before, after) if before and after else None
        value = run.metrics.get(paired.metric, 0.0)
        record: dict[str, Any] = {
            "round": rnd,
            "pair": pair,
            "arm": arm,
            "value": value,
            "requests_per_s": run.metrics.get(keys.REQUESTS_PER_S, 0.0),
            "output_tokens_per_s": run.metrics.get(keys.OUTPUT_TOKENS_PER_S, 0.0),
            "ttft_p50_s": run.metrics.get("ttft_p50_s", math.nan),
            "tpot_p50_s": run.metrics.get("tpot_p50_s", math.nan),
            "requests_total": run.metrics.get("requests_total", 0.0),
            "requests_failed": run.metrics.get("requests_failed", 0.0),
            "foreign_cpu_cores": None if foreign is None else round(foreign.foreign_cores, 3),
            "client_problems": run.client_problems,
            "dropped": False,
        }
        records.append(record)
        windows.append(Window(round=rnd, pair=pair, arm=arm, value=value))
        why = _window_problem(ctx, record, foreign)
        if why is not None:
            problems.append(f"round {rnd + 1} pair {pair} {arm}: {why}")
            for r in records:
                if r["round"] == rnd and r["pair"] == pair:
                    r["dropped"] = True
    for r in records:  # a pair dropped by its second window drops its first too
        mine = r["round"] == rnd and r["pair"] in pairs
        if mine and any(o["dropped"] for o in records if o["round"] == rnd and o["pair"] == r["pair"]):
            r["dropped"] = True


def _window_problem(ctx: CheckContext, record: dict[str, Any], foreign: hostload.ForeignLoad | None) -> str | None:
    """Why a window's number is not the server's (its pair is then dropped), or None."""
    cfg = ctx.config.checks.throughput
    if record["client_problems"]:
        return "; ".join(record["client_problems"])
    limit = cfg.max_foreign_cpu_cores
    if foreign is not None and limit is not None and foreign.foreign_cores > limit:
        return f"machine busy: {foreign.describe()}, above max_foreign_cpu_cores={limit}"
    if record["arm"] == "baseline" and record["requests_failed"]:
        return f"{record['requests_failed']:.0f} failed requests on the baseline"
    if record["value"] <= 0:
        return f"no {cfg.paired.metric} measured"
    return None
