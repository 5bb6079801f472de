"""The open-loop dispatcher's own accuracy (canary/load/openloop.py) against the scripted STAND-IN server.

    .venv/bin/python tests/bench/openloop_accuracy.py [--rounds 3] [--requests 400] [--rate 40]

Runs from the working directory's checkout (run it from two checkouts to compare code). Each round is
one synthetic open-loop run (Poisson arrivals at --rate, 16-token prompts and outputs) against
tests/support/scripted_server.py (TTFT 50 ms, ITL 10 ms) and prints: the client's send lateness
(actual - scheduled send) p50 / p99, and its TTFT error (the client's TTFT minus the stand-in's own
record of receive -> first token write, matched by request id) p50 / p99. `make bench` measures the
closed loop; this measures the open loop's dispatcher, which `make bench` does not run.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, os.getcwd())  # the checkout this is run from

from canary.load.launch import run_load
from canary.load.workload import WorkloadSpec
from tests.support.scripted_server import ScriptedServer


def main() -> int:
    """Run the rounds and print one line each."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--requests", type=int, default=400)
    parser.add_argument("--rate", type=float, default=40.0)
    args = parser.parse_args()
    with ScriptedServer(ttft_s=0.05, itl_s=0.01) as server:
        for round_ in range(args.rounds):
            server.reset()
            spec = WorkloadSpec(
                base_url=server.url, model=server.model, prompt_tokens=16, output_tokens=16,
                num_requests=args.requests, warmup_requests=10, open_loop=True, request_rate=args.rate,
                seed=round_, token_pool=list(range(100, 200)), max_duration_s=120.0,
                max_client_lag_p99_s=1.0, max_client_cpu_ratio=1.0,
            )  # fmt: skip
            with tempfile.TemporaryDirectory() as work:
                result = run_load(spec, Path(work))
            records = {r.request_id: r for r in server.records()}
            errors = sorted(
                s.ttft_s - (records[s.request_id].token_at[0] - records[s.request_id].received_at)
                for s in result.samples
                if not s.warmup and s.ttft_s is not None and s.request_id in records
            )
            m = result.metrics
            print(
                f"round {round_}: send lateness p50 {m['send_lateness_p50_s'] * 1e3:.2f} ms "
                f"p99 {m['send_lateness_p99_s'] * 1e3:.2f} ms; TTFT error p50 {statistics.median(errors) * 1e3:.2f} ms "
                f"p99 {errors[int(0.99 * len(errors))] * 1e3:.2f} ms; client CPU {m.get('client_cpu_ratio', 0.0):.2f}; "
                f"errors {result.errors}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
