"""aiperf's SLA search for `make bench-capacity`: its command line and the reading of what it writes.

aiperf 0.13 (NVIDIA, `aiperf profile`) has no goodput profile like guidellm's, but an adaptive search
over one swept dimension with SLA filters. The bench runs it as close to our SLO as its options allow:

- per-request objectives: `--goodput "time_to_first_token:T inter_token_latency:P"` marks a request
  good when its TTFT <= T ms and its TPOT <= P ms (aiperf's `inter_token_latency` is the request's
  (latency - TTFT) / (output tokens - 1): a per-request mean, as our `itl_statistic: mean`);
- the attainment: `--search-sla good_request_fraction:avg:ge:A` (good / attempted requests, errors
  counted as attempted) makes a concurrency level feasible;
- the search: `--search-planner monotonic-sla` over `phases.profiling.concurrency` in [1, max]: doubles
  from 1 until a level is infeasible, then bisects until (infeasible - feasible) / infeasible <
  precision (`AIPERF_SEARCH_PLANNER_SLA_PRECISION_DEFAULT`). A level's verdict latches only when two
  trials at it agree (its `monotonic_stability_trials`, 2 by default, not a CLI option): every level
  is measured at least twice. A verdict is a point decision on one trial's good fraction, with no
  confidence interval. (The `max-goodput-under-slo` recipe is the same objective under Bayesian
  optimization with a fixed 30 iterations: far beyond this bench's time; not used.)

It writes ARTIFACTS/search_history.json (every iteration: its concurrency, feasible or not; the latched
`boundary_summary`: feasible_max, infeasible_min; `convergence_reason`) and, per iteration,
ARTIFACTS/search_iter_NNNN/profile_runs/run_0001/profile_export_aiperf.json (metrics as
{"unit", "avg", ...}: request_throughput, request_count, error_request_count when there were errors,
good_request_fraction, goodput). `read_aiperf` turns those into the bench's row: the capacity is the
request rate aiperf measured at its highest latched feasible concurrency (the mean over its trials
there), the interval the rates at the latched feasible and infeasible levels.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

CONCURRENCY = "phases.profiling.concurrency"
HISTORY = "search_history.json"


def aiperf_command(
    exe: str, *, url: str, model: str, tokenizer: str, prompt_tokens: int, output_tokens: int, ttft_ms: float,
    tpot_ms: float, attainment: float, seconds_per_probe: float, max_concurrency: int, max_iterations: int,
    seed: int, artifacts: Path,
) -> list[str]:  # fmt: skip
    """`aiperf profile` with the bench's SLO, lengths and server, searching concurrency in [1, max_concurrency]."""
    return [
        exe, "profile", "--model", model, "--url", url, "--endpoint-type", "completions", "--streaming",
        "--tokenizer", tokenizer, "--use-server-token-count",  # lengths as vLLM counts them, not re-tokenized text
        "--isl", str(prompt_tokens), "--isl-stddev", "0", "--osl", str(output_tokens), "--osl-stddev", "0",
        "--extra-inputs", "ignore_eos:true",  # exact output lengths, as ours sends
        "--num-dataset-entries", "1000",  # 100 by default, reused in turn: vLLM's prefix cache would serve repeats
        "--benchmark-duration", f"{seconds_per_probe:g}",
        # A pacing cap far above any rate reached here (a send waits at most 1 ms for its tick): in pure
        # concurrency mode aiperf's timing manager spins a whole core while every stream is busy, a core
        # the server on a 2-core machine then lacks (measured: 98% CPU, the server's TPOT 94 ms at 1 stream).
        "--request-rate", "1000", "--arrival-pattern", "constant",
        "--goodput", f"time_to_first_token:{ttft_ms:g} inter_token_latency:{tpot_ms:g}",
        "--search-space", f"{CONCURRENCY}:1,{max_concurrency}:int", "--search-planner", "monotonic-sla",
        "--search-sla", f"good_request_fraction:avg:ge:{attainment:g}",
        "--search-metric", "goodput", "--search-direction", "maximize", "--search-max-iterations", str(max_iterations),
        "--random-seed", str(seed), "--artifact-dir", str(artifacts), "--ui-type", "none", "--no-server-metrics",
    ]  # fmt: skip


def _avg(metrics: dict[str, Any], name: str) -> float | None:
    value = metrics.get(name)
    avg = value.get("avg") if isinstance(value, dict) else None
    return float(avg) if isinstance(avg, (int, float)) else None


def load_runs(artifacts: Path) -> dict[int, dict[str, Any]]:
    """Each iteration's profile_export_aiperf.json by iteration index (a failed run has none)."""
    runs: dict[int, dict[str, Any]] = {}
    for path in sorted(artifacts.glob("search_iter_*/profile_runs/run_*/profile_export_aiperf.json")):
        index = int(path.parts[-4].removeprefix("search_iter_"))
        runs[index] = json.loads(path.read_text(encoding="utf-8"))
    return runs


def read_aiperf(history: dict[str, Any], runs: dict[int, dict[str, Any]]) -> dict[str, Any]:
    """The search's answer in requests per second, from search_history.json and the runs' exports."""
    iterations = [i for i in history.get("iterations", []) if isinstance(i, dict)]
    probes = []
    for it in iterations:
        index = it.get("iteration_idx")
        metrics = runs.get(index, {}) if isinstance(index, int) else {}
        done, errors = _avg(metrics, "request_count"), _avg(metrics, "error_request_count")
        probes.append({
            "iteration": index,
            "streams": (it.get("variation_values") or {}).get(CONCURRENCY),
            "feasible": it.get("feasible"),
            "requests": int((done or 0) + (errors or 0)),
            "requests_per_s": _avg(metrics, "request_throughput"),
            "good_fraction": _avg(metrics, "good_request_fraction"),
            "goodput": _avg(metrics, "goodput"),
            "seconds": _avg(metrics, "benchmark_duration"),
            "measured": bool(metrics),
        })  # fmt: skip
    requests = sum(p["requests"] for p in probes)
    boundary = history.get("boundary_summary") or {}
    best = (boundary.get("feasible_max") or {}).get("value")
    lowest_fail = (boundary.get("infeasible_min") or {}).get("value")
    measuring = sum(p["seconds"] or 0.0 for p in probes)  # the runs' own durations: the rest is aiperf's start-up
    row: dict[str, Any] = {
        "requests": requests,
        "measuring_seconds": measuring,
        "stop_reason": history.get("convergence_reason"),
        "probes": probes,
    }
    if not probes:
        return {**row, "error": "aiperf's search history has no iteration"}
    if best is None:
        return {**row, "error": "no concurrency level latched feasible (two agreeing trials)"}

    def rate(streams: Any, feasible: bool) -> float | None:
        """The mean request rate of the trials at `streams` that gave its latched verdict."""
        rates = [
            p["requests_per_s"]
            for p in probes
            if p["streams"] == streams and p["feasible"] is feasible and p["requests_per_s"] is not None
        ]
        return statistics.fmean(rates) if rates else None

    estimate = rate(best, True)
    return {
        **row,
        "estimate": estimate,
        "estimate_streams": best,
        "interval": [estimate, None if lowest_fail is None else rate(lowest_fail, False)],
        "interval_streams": [best, lowest_fail],
    }
