"""Throughput and latency under load (locust), judged against floors and the baseline image.

The load runs in a subprocess (`canary.load.launch`: locust monkey-patches whatever imports it)
against the cell's endpoint: the router of a P/D cell, the server of an aggregated one. Prompts
are token ids from the server's own `/tokenize`, so their length is exact. `repeats` runs (seed
+ i each, so vLLM's prefix cache never serves a repeat) give medians; the baseline image's cell
ran the same seeds.

Verdict, in order: a failed run or missing samples -> error; failed requests beyond
`max_error_rate` -> fail (failures are never counted as fast samples); a load generator that was
itself the bottleneck -> invalid (its numbers are not the server's, so no floor or regression is
judged on them); then absolute floors and the relative regression against the baseline cell. A
change beyond `regression_tolerance` is a regression only when it is also beyond the runs' own
spread (`regression_windows`: every window of the candidate's runs worse than every window of the
baseline's); one 40-request run of a CPU cell varies by +-15% from window to window.

An invalid measurement is no evidence, so it is taken again: up to `max_attempts` measurements,
`retry_backoff_s` (doubling) apart, each with fresh seeds; the first one that is not invalid is
judged. Every attempt (verdict, summary, the client's problems, the wait before it) is recorded in
evidence.attempts, their count in metrics.attempts. A check still invalid after the last attempt
names its cause in evidence.cause ("client CPU-starved"): the run is then INCONCLUSIVE, not failed.

Each measurement also records the prefix-cache hits of every engine of the cell over its load runs
(queried and hit tokens, hit rate, per role: canary/checks/throughput/prefixcache.py) in
evidence.prefix_cache and metrics; informational, no gate.

With `paired.enabled`, a candidate cell whose baseline counterpart is in the matrix is compared by the
paired verdict instead of the unpaired regression gates: the counterpart is deployed beside it and
both are measured in alternating windows (canary/checks/throughput/paired.py).
"""

from __future__ import annotations

import math
import time
import uuid
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from typing import Any

from canary.checks.base import CheckContext, register
from canary.checks.throughput import hostload, loadparity, paired, pdtime, prefixcache
from canary.checks.throughput.estimate import estimate
from canary.checks.throughput.exported import EXPORTED
from canary.checks.throughput.workload import cell_workload, workload_evidence
from canary.config import CapacityConfig, ThroughputCheckConfig
from canary.config.workloads import WorkloadShape
from canary.core import metric_keys as keys
from canary.judge.capacity_gain import EVIDENCE_KEY as GAIN_EVIDENCE_KEY
from canary.judge.capacity_gain import Capacity, judge_gain
from canary.judge.request_tests import (
    CLIENT_GATE,
    ERROR_RATE_GATE,
    FINISHED_GATE,
    MISSING_GATE_PREFIX,
    gates_verdict,
    per_request_gates,
    raw_runs,
)
from canary.judge.results import CAUSE_KEY, CheckResult, Gate
from canary.load.capacity import (
    CapacityResult,
    CapacitySlo,
    LoadMeasure,
    RateResult,
    SearchSettings,
    search_capacity,
)
from canary.load.launch import LoadError, LoadResult, run_load, token_pool, words_per_token
from canary.load.stats import Sample, Slo, higher_is_better, median_metrics, relative_change, window_values
from canary.load.workload import WorkloadSpec
from canary.plan.waves import ScheduleError, engine_gpus
from canary.targets.base import Deployment

# Metrics that are counts per run: summed over repeats rather than taken as a median.
_COUNTS = ("requests_total", "requests_succeeded", "requests_failed", "requests_not_sent", "requests_cut_by_deadline")


def build_spec(
    cfg: ThroughputCheckConfig, deployment: Deployment, repeat: int = 0, workload: WorkloadShape | None = None
) -> WorkloadSpec:
    """The workload of one repeat against a deployment (no token pool yet). `workload`: the cell's
    (workload.cell_workload: block sizes filled in); None: the config's as it stands."""
    return WorkloadSpec(
        base_url=deployment.base_url,
        model=deployment.served_model,
        endpoint=cfg.endpoint,
        workload=cfg.workload if workload is None else workload,
        prompt_tokens=cfg.prompt_tokens,
        output_tokens=cfg.output_tokens,
        length_distribution=cfg.length_distribution,
        length_spread=cfg.length_spread,
        concurrency=cfg.concurrency,
        request_rate=cfg.request_rate,
        burstiness=cfg.burstiness,
        open_loop=cfg.open_loop,
        num_requests=cfg.num_requests,
        warmup_requests=cfg.warmup_requests,
        max_duration_s=float(cfg.max_duration_s),
        request_timeout_s=cfg.request_timeout_s,
        seed=cfg.seed + repeat,
        request_id_prefix=f"tp{cfg.seed + repeat}-{uuid.uuid4().hex[:8]}",  # unique: engines see every repeat
        max_client_cpu_ratio=cfg.max_client_cpu_ratio,
        max_client_lag_p99_s=cfg.max_client_lag_p99_ms / 1e3,
        workers=cfg.workers,
        client_cpus=list(deployment.helper_cpus) if deployment.helper_cpus else None,
    )


def master_args(cfg: ThroughputCheckConfig) -> list[str]:
    """Arguments that make the load process a master waiting for remote workers (none: local)."""
    if not cfg.remote_workers:
        return []
    return [
        "--expect-workers",
        str(cfg.remote_workers),
        "--master-bind-host",
        cfg.master_bind_host,
        "--master-bind-port",
        str(cfg.master_bind_port),
    ]


def slo_of(cfg: ThroughputCheckConfig) -> Slo:
    """The goodput SLOs in seconds."""

    def seconds(ms: float | None) -> float | None:
        return None if ms is None else ms / 1e3

    return Slo(ttft_s=seconds(cfg.slo.ttft_ms), tpot_s=seconds(cfg.slo.tpot_ms), e2e_s=seconds(cfg.slo.e2e_ms))


def combine(runs: list[LoadResult]) -> dict[str, float]:
    """Medians over repeats; counts summed; the error rate over every request of every run."""
    metrics = median_metrics([r.metrics for r in runs])
    for key in _COUNTS:
        metrics[key] = float(sum(r.metrics.get(key, 0.0) for r in runs))
    total = metrics["requests_total"]
    metrics["error_rate"] = metrics["requests_failed"] / total if total else 0.0
    metrics["client_cpu_ratio"] = max(r.metrics.get("client_cpu_ratio", 0.0) for r in runs)
    lags = [r.metrics["client_lag_p99_s"] for r in runs if "client_lag_p99_s" in r.metrics]
    if lags:
        metrics["client_lag_p99_s"] = max(lags)
    metrics["repeats"] = float(len(runs))
    metrics["client_valid"] = float(all(r.valid for r in runs))
    return metrics


def floor_gates(cfg: ThroughputCheckConfig, metrics: dict[str, float]) -> list[Gate]:
    """Absolute floors from the config."""
    gates: list[Gate] = []
    floors = (
        ("min-requests-per-s", keys.REQUESTS_PER_S, cfg.min_requests_per_s),
        ("min-output-tokens-per-s", keys.OUTPUT_TOKENS_PER_S, cfg.min_output_tokens_per_s),
        ("min-goodput-ratio", "goodput_ratio", cfg.min_goodput_ratio),
    )
    for name, key, floor in floors:
        if floor is None:
            continue
        observed = metrics.get(key, 0.0)
        gates.append(
            Gate(
                name=name,
                passed=observed >= floor,
                observed=observed,
                threshold=floor,
                detail=f"{key} {observed:.3f} vs floor {floor:.3f}",
            )
        )
    return gates


def regression_gates(
    cfg: ThroughputCheckConfig,
    metrics: dict[str, float],
    baseline: dict[str, float],
    baseline_id: str,
    runs: tuple[Sequence[Sequence[Sample]], Sequence[Sequence[Sample]]] | None = None,
) -> list[Gate]:
    """Relative change of each regression metric vs the baseline cell's medians.

    With `runs` (the candidate's and the baseline's per-request samples, one list per repeat) and
    `regression_windows` > 0, a change beyond the tolerance is a regression only when it also
    exceeds the measurements' own spread: every window of the candidate's runs is worse than every
    window of the baseline's (`window_values`). Overlapping windows pass, and the detail says so.
    Without samples on both sides the tolerance alone decides."""
    gates: list[Gate] = []
    for key in cfg.regression_metrics:
        absent = [side for side, values in (("this cell", metrics), (baseline_id, baseline)) if key not in values]
        if absent:  # a number that is not there is never a pass (nor zero): the gate cannot judge
            detail = f"{key} missing on {' and '.join(absent)}: the regression gate cannot judge it"
            gates.append(Gate(name=f"{MISSING_GATE_PREFIX}{key}", passed=False, detail=detail))
            continue
        worse = relative_change(metrics[key], baseline[key], key)
        direction = "drop" if higher_is_better(key) else "rise"
        detail = (
            f"{key} {metrics[key]:.4g} vs baseline {baseline[key]:.4g} ({baseline_id}): "
            f"{direction} {max(worse, 0.0):.1%}, allowed {cfg.regression_tolerance:.0%}"
        )
        passed = worse <= cfg.regression_tolerance
        if not passed and runs is not None:
            within, spread = _within_spread(cfg, key, *runs)
            passed = within
            detail = f"{detail}; {spread}" if spread else detail
        gates.append(
            Gate(
                name=f"regression-{key}",
                passed=passed,
                observed=worse if math.isfinite(worse) else None,
                threshold=cfg.regression_tolerance,
                detail=detail,
            )
        )
    return gates


def _within_spread(
    cfg: ThroughputCheckConfig, key: str, candidate: Sequence[Sequence[Sample]], baseline: Sequence[Sequence[Sample]]
) -> tuple[bool, str]:
    """Whether the candidate's and the baseline's windows of `key` overlap, and the sentence saying so."""
    windows = cfg.regression_windows
    mine = [v for run in candidate for v in window_values(run, key, windows)]
    theirs = [v for run in baseline for v in window_values(run, key, windows)]
    if not mine or not theirs:  # no windows configured, or too few requests on a side
        return False, ""
    if higher_is_better(key):
        best, worst = max(mine), min(theirs)
        overlap = best >= worst
    else:
        best, worst = min(mine), max(theirs)
        overlap = best <= worst
    words = f"the candidate's best window {best:.4g} vs the baseline's worst {worst:.4g}"
    if overlap:
        return True, f"within the runs' own spread ({windows} windows per run: {words}): not a regression"
    return False, f"beyond the runs' own spread ({windows} windows per run: {words})"


def _prompt_source(ctx: CheckContext) -> tuple[list[int] | None, float, dict[str, Any]]:
    deployment = ctx.deployment
    urls = [deployment.base_url] + [
        s.base_url for role, s in deployment.servers.items() if role != "router" and s.base_url != deployment.base_url
    ]
    cfg = ctx.config.checks.throughput
    pool: list[int] | None = None
    where = "chat: text prompts"
    if cfg.endpoint == "completions":
        pool, where = token_pool(urls, deployment.served_model)
    ratio = words_per_token(urls, deployment.served_model) if pool is None else 1.0
    return pool, ratio, {"token_pool_from": where, "token_pool_size": len(pool or []), "words_per_token": ratio}


@register(
    "throughput",
    order=3,
    settings=ThroughputCheckConfig,
    metrics=EXPORTED,
    estimate=estimate,
)
def throughput_check(ctx: CheckContext) -> CheckResult:
    """Measure (the load `repeats` times, medians judged); measure again while the result is invalid,
    up to `max_attempts` measurements with back-off. Every attempt is recorded in evidence.attempts."""
    cfg = ctx.config.checks.throughput
    prompts = _prompt_source(ctx)
    # parity under load: the reference before any load, the samples ride the first run (loadparity.py)
    prepared = loadparity.prepare(ctx) if cfg.load_parity.enabled else None
    rider = prepared.rider(ctx) if isinstance(prepared, loadparity.Prepared) else None
    attempts: list[dict[str, Any]] = []
    waited = 0.0
    for attempt in range(cfg.max_attempts):
        wait_s = backoff_s(cfg, attempt) if attempt else 0.0
        time.sleep(wait_s)
        waited += wait_s
        result = measure(ctx, prompts, attempt, rider if attempt == 0 else None)
        attempts.append(
            {
                "attempt": attempt + 1,
                "verdict": result.verdict,
                "summary": result.summary,
                "client_problems": [p for r in result.evidence.get("runs", []) for p in r.get("client_problems", [])]
                + result.evidence.get("machine_problems", []),
                "waited_s": wait_s,
            }
        )
        if result.verdict != "invalid":
            break
    result.evidence["attempts"] = attempts
    result.metrics["attempts"] = float(len(attempts))
    if result.verdict == "invalid":
        result.evidence[CAUSE_KEY] = client_cause(attempts[-1]["client_problems"])
        result.summary = f"{result.summary} (invalid in all {len(attempts)} attempts, {waited:.1f} s of back-off)"
    elif len(attempts) > 1:
        result.summary = f"{result.summary} (attempt {len(attempts)}: the earlier ones were invalid)"
    if prepared is not None:
        loadparity.finish(ctx, prepared, rider, result)
    if paired.applies(ctx):
        pool, ratio, _ = prompts
        shape, _ = cell_workload(ctx)
        base = build_spec(cfg, ctx.deployment, workload=shape).model_copy(
            update={"token_pool": pool, "words_per_token": ratio}
        )
        paired.add_paired(ctx, base, result)
    if cfg.capacity.enabled:
        add_capacity(ctx, prompts, result)
        add_gain(ctx, result)
    return result


def add_gain(ctx: CheckContext, result: CheckResult) -> None:
    """A P/D cell's disaggregation gain over its aggregated control (canary.judge.capacity_gain), when
    both capacity searches ran: informational, into metrics, evidence and the summary."""
    if ctx.cell.topology != "pd-nixl":
        return
    control = ctx.control_for()
    try:  # engines x tensor parallel
        engines = sum(engine_gpus(ctx.cell, ctx.config).values())
        theirs = sum(engine_gpus(control.cell, ctx.config).values()) if control is not None else 1
    except ScheduleError as exc:  # a model not in the config: no gain, and never an error of the check
        result.evidence[GAIN_EVIDENCE_KEY] = {"skipped": str(exc)}
        return
    judge_gain(ctx.cell, result, control, engines, theirs)


def capacity_slo(cfg: CapacityConfig) -> CapacitySlo:
    """The capacity search's SLO in seconds."""
    return CapacitySlo(
        ttft_s=cfg.ttft_ms / 1e3,
        itl_s=cfg.itl_ms / 1e3,
        attainment=cfg.attainment,
        confidence=cfg.confidence,
        itl_statistic=cfg.itl_statistic,
    )


def search_settings(cap: CapacityConfig) -> SearchSettings:
    """The capacity search's settings from checks.throughput.capacity."""
    return SearchSettings(
        start_rate=cap.start_rate,
        growth=cap.growth,
        min_rate=min(0.05, cap.start_rate),
        max_rate=cap.max_rate,
        precision=cap.precision,
        half_width=cap.half_width,
        budget_requests=cap.budget_requests,
        budget_s=cap.budget_s,
        max_probes=cap.max_probes,
    )


def add_capacity(
    ctx: CheckContext,
    prompts: tuple[list[int] | None, float, dict[str, Any]],
    result: CheckResult,
    measure_factory: Callable[..., Callable[[float], RateResult]] = LoadMeasure,
) -> None:
    """The SLO capacity search (checks.throughput.capacity), into metrics and evidence.capacity.

    Informational: it adds no gate and never changes the verdict. Skipped when the measurement itself
    could not be judged (error, invalid): a search on the same server and client would not be either."""
    cfg = ctx.config.checks.throughput
    cap = cfg.capacity
    if result.verdict in ("error", "invalid"):
        result.evidence["capacity"] = {"skipped": f"the throughput measurement was {result.verdict}"}
        return
    pool, ratio, _ = prompts
    base = build_spec(cfg, ctx.deployment, workload=cell_workload(ctx)[0]).model_copy(
        update={"token_pool": pool, "words_per_token": ratio, "burstiness": cap.burstiness, "workers": 0}
    )
    slo = capacity_slo(cap)
    measure = measure_factory(
        base=base, work_dir=ctx.cell_dir / "throughput" / "capacity", slo=slo, seconds_per_probe=cap.seconds_per_probe
    )
    settings = search_settings(cap)
    expected = getattr(measure, "expected_seconds", None)
    found = search_capacity(measure, slo, settings, expected_seconds=expected)
    result.metrics.update(capacity_metrics(found))
    result.evidence["capacity"] = found.to_json()
    result.summary = f"{result.summary}; {capacity_summary(found)}"


def capacity_metrics(found: CapacityResult) -> dict[str, float]:
    """A search's numbers for CheckResult.metrics; an estimate or interval end it could not establish
    has no key (never 0)."""
    lower, upper = found.interval
    values = {
        keys.CAPACITY_REQUESTS_PER_S: found.estimate,
        keys.CAPACITY_LOW_REQUESTS_PER_S: lower,
        keys.CAPACITY_HIGH_REQUESTS_PER_S: upper,
        keys.CAPACITY_REQUESTS_USED: float(found.requests_used),
        keys.CAPACITY_SECONDS_USED: found.seconds_used,
    }
    return {k: v for k, v in values.items() if v is not None}


def capacity_summary(found: CapacityResult) -> str:
    """'SLO capacity 6 req/s [5.5, 6.6]' ('below' / 'above' for a missing end, 'none' without an estimate)."""
    lower, upper = found.interval
    return f"SLO capacity {Capacity(found.estimate, lower, upper).text()}"


def backoff_s(cfg: ThroughputCheckConfig, attempt: int) -> float:
    """The wait before attempt `attempt` (0-based, >= 1): retry_backoff_s, doubling each time."""
    return float(cfg.retry_backoff_s * 2 ** (attempt - 1))


def client_cause(problems: list[str]) -> str:
    """An invalid measurement's cause in a few words (for the run's INCONCLUSIVE line)."""
    text = " ".join(problems)
    if "machine busy" in text:
        return "machine busy with other processes"
    if "starved" in text:
        return "client CPU-starved"
    if "saturated" in text:
        return "client CPU-saturated"
    if "lag" in text:
        return "client event-loop lag"
    return "client not a reliable clock"


def measure(
    ctx: CheckContext,
    prompts: tuple[list[int] | None, float, dict[str, Any]],
    attempt: int,
    rider: loadparity.Rider | None = None,
) -> CheckResult:
    """One measurement: the load `repeats` times (seeds shifted by attempt x repeats, so vLLM's prefix
    cache never serves a re-measurement), judged. A `rider` sends its parity samples during the first
    run and learns that run's window."""
    cfg = ctx.config.checks.throughput
    work_dir = ctx.cell_dir / "throughput" / f"attempt-{attempt + 1}" if attempt else ctx.cell_dir / "throughput"
    pool, ratio, prompt_evidence = prompts
    shape, shape_evidence = cell_workload(ctx)
    seeds = [cfg.seed + attempt * cfg.repeats + repeat for repeat in range(cfg.repeats)]
    runs: list[LoadResult] = []
    evidence: dict[str, Any] = {
        "prompts": prompt_evidence,
        "endpoint": ctx.deployment.base_url,
        "workload": workload_evidence(cfg, shape, seeds, shape_evidence),
        "runs": [],
    }
    pgids = [
        s.pid for s in ctx.deployment.servers.values() if s.pid is not None
    ]  # local: pid == pgid; container: its init
    foreign: list[hostload.ForeignLoad | None] = []
    cache_urls = prefixcache.engine_urls(ctx.deployment)
    cache_before = prefixcache.snapshot(cache_urls)  # prefix-cache hits of this measurement, per engine
    for repeat in range(cfg.repeats):
        spec = build_spec(cfg, ctx.deployment, attempt * cfg.repeats + repeat, shape).model_copy(
            update={"token_pool": pool, "words_per_token": ratio}
        )
        before = hostload.sample(pgids)
        riding = rider if rider is not None and repeat == 0 else None
        try:
            with riding or nullcontext():
                result = run_load(spec, work_dir, name=f"run-{repeat}", slo=slo_of(cfg), extra_args=master_args(cfg))
        except LoadError as exc:
            return CheckResult(name="throughput", verdict="error", summary=str(exc).splitlines()[0], evidence=evidence)
        after = hostload.sample(pgids)
        if riding is not None:
            riding.window = loadparity.load_window(result.samples)
        runs.append(result)
        evidence["runs"].append({**result.summary(), "metrics": result.metrics})
        foreign.append(hostload.foreign_load(before, after) if before and after else None)
    metrics = combine(runs)
    cache = prefixcache.compare(cache_before, prefixcache.snapshot(cache_urls))
    metrics.update(prefixcache.metrics(cache))
    evidence[prefixcache.EVIDENCE_KEY] = prefixcache.evidence(cache)
    decomposition = pdtime.decompose_deployment(ctx.deployment, [s for r in runs for s in r.samples])
    if decomposition is not None:  # a P/D cell: where its requests' time went (informational, no gate)
        metrics.update(decomposition.metrics())
        evidence["pd_time"] = decomposition.evidence()
    host_problems = _host_problems(cfg, foreign, metrics, evidence)
    error_rate = metrics["error_rate"]
    error_gate = Gate(
        name=ERROR_RATE_GATE,
        passed=error_rate <= cfg.max_error_rate and metrics["requests_succeeded"] > 0,
        observed=error_rate,
        threshold=cfg.max_error_rate,
        detail=f"{metrics['requests_failed']:.0f} of {metrics['requests_total']:.0f} requests failed ({_errors(runs)})",
    )
    cut = metrics["requests_not_sent"] + metrics["requests_cut_by_deadline"]
    time_gate = Gate(
        name=FINISHED_GATE,
        passed=cut == 0,
        observed=cut,
        threshold=0,
        detail=f"{cut:.0f} planned requests not finished within max_duration_s={cfg.max_duration_s}",
    )
    problems = [p for r in runs for p in r.client_problems] + host_problems
    client_gate = Gate(
        name=CLIENT_GATE,
        passed=not problems,
        observed=metrics.get("client_lag_p99_s"),
        threshold=cfg.max_client_lag_p99_ms / 1e3,
        detail="; ".join(problems)
        or f"client CPU {metrics['client_cpu_ratio']:.2f} core, loop lag p99 "
        f"{metrics.get('client_lag_p99_s', 0.0) * 1e3:.1f} ms: within limits",
    )
    gates = [error_gate, client_gate, time_gate]
    if not error_gate.passed:
        verdict = "fail"  # failures are real whatever the client's state
    elif problems:
        verdict = "invalid"  # the client's numbers are not the server's: judge nothing else on them
    else:
        gates.extend(floor_gates(cfg, metrics))
        baseline = ctx.baseline_for()
        base_check = baseline.check("throughput") if baseline is not None else None
        pairs = paired.applies(ctx)  # the paired verdict replaces the unpaired regression gates
        if baseline is not None and base_check is not None and base_check.verdict in ("pass", "ungated"):
            spread = ([r.samples for r in runs], raw_runs(base_check))
            if not pairs:
                gates.extend(regression_gates(cfg, metrics, base_check.metrics, baseline.cell.id, spread))
            samples = [s for r in runs for s in r.samples]
            gates.extend(per_request_gates(cfg.per_request, samples, base_check, baseline.cell.id, evidence))
            evidence["baseline_cell"] = baseline.cell.id
        elif baseline is not None:
            evidence["baseline_cell"] = f"{baseline.cell.id} (no passing throughput result: not compared)"
        verdict = gates_verdict(gates)  # the rule family control re-applies after the run
    summary = _summary(verdict, metrics, gates)
    if decomposition is not None and decomposition.unavailable is not None:
        summary = f"{summary}; {decomposition.summary()}"
    return CheckResult(
        name="throughput",
        verdict=verdict,
        summary=summary,
        metrics=metrics,
        gates=gates,
        evidence=evidence,
    )


def _host_problems(
    cfg: ThroughputCheckConfig,
    loads: list[hostload.ForeignLoad | None],
    metrics: dict[str, float],
    evidence: dict[str, Any],
) -> list[str]:
    """CPU used outside the cell during the load runs (local servers only): into metrics and
    evidence, and a problem (invalid) for each run above max_foreign_cpu_cores."""
    measured = [load for load in loads if load is not None]
    if not measured:
        return []
    worst = max(measured, key=lambda load: load.foreign_cores)
    metrics["foreign_cpu_cores"] = round(worst.foreign_cores, 3)
    evidence["machine"] = [load.describe() for load in measured]
    limit = cfg.max_foreign_cpu_cores
    if limit is None:
        return []
    problems = [
        f"machine busy: {load.describe()}, above max_foreign_cpu_cores={limit}"
        for load in measured
        if load.foreign_cores > limit
    ]
    if problems:
        evidence["machine_problems"] = problems
    return problems


def _errors(runs: list[LoadResult]) -> str:
    counts: dict[str, int] = {}
    for run in runs:
        for kind, n in run.errors.items():
            counts[kind] = counts.get(kind, 0) + n
    return ", ".join(f"{k}: {n}" for k, n in sorted(counts.items())) or "none"


def _summary(verdict: str, metrics: dict[str, float], gates: list[Gate]) -> str:
    head = (
        f"{metrics.get('requests_per_s', 0.0):.1f} req/s, {metrics.get('output_tokens_per_s', 0.0):.0f} out tok/s, "
        f"TTFT p50 {metrics.get('ttft_p50_s', math.nan) * 1e3:.0f} ms, "
        f"TPOT p50 {metrics.get('tpot_p50_s', math.nan) * 1e3:.1f} ms, errors {metrics.get('error_rate', 0.0):.1%}"
    )
    failed = [g.detail for g in gates if not g.passed]
    if verdict == "ungated":
        return f"{head} (ungated: no floor, baseline or paired verdict judged its speed)"
    if verdict == "pass" or not failed:
        return head
    return f"{head}; {failed[0]}"
