"""`python -m canary.load.process`: one load run in its own process (locust + gevent).

    python -m canary.load.process --spec SPEC.json --out OUT.json
        one process, or a master plus spec.workers local worker processes
    python -m canary.load.process --spec SPEC.json --out OUT.json --expect-workers N \\
        --master-bind-host 0.0.0.0 --master-bind-port 5557
        a master that waits for N workers started on other machines with
    python -m canary.load.process --worker --master-host HOST --master-port 5557
    python -m canary.load.process --serve
        one process for many runs: each stdin line `{"spec": SPEC.json, "out": OUT.json}` runs one
        load (one local process each) and answers `done OUT.json` on stdout; EOF ends it

Why a subprocess: importing locust runs gevent's `monkey.patch_all()`, which replaces socket,
ssl, threading, time.sleep and subprocess for the whole process. The canary itself (pytest, urllib
calls to servers, engine subprocesses, lm-eval threads) must keep the standard library, so
locust only ever lives here; this process's CPU use is also the client's own, measurable alone.
OUT.json holds the raw samples and the client's self-measurements; `canary.load.launch` reads it.

`--serve` exists for measurements made of many short runs (the paired verdict's windows): starting
Python, locust and gevent takes ~3 s of CPU per process, longer than a 16-request window itself.
"""

from __future__ import annotations

from gevent import monkey

monkey.patch_all()  # first, before anything imports socket/ssl/threading

import argparse  # noqa: E402
import json  # noqa: E402
import logging  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import TextIO  # noqa: E402

from canary.load import locust_driver, openloop  # noqa: E402
from canary.load.workload import WorkloadSpec  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    """CLI entry point."""
    parser = argparse.ArgumentParser(prog="python -m canary.load.process", description="One locust load run.")
    parser.add_argument("--spec", type=Path, help="WorkloadSpec JSON")
    parser.add_argument("--out", type=Path, help="where to write the raw result JSON")
    parser.add_argument("--worker", action="store_true", help="run as a locust worker of a master")
    parser.add_argument("--master-host", default="127.0.0.1", help="worker: the master's address")
    parser.add_argument("--master-port", type=int, default=5557, help="worker: the master's port")
    parser.add_argument("--expect-workers", type=int, default=0, help="master: wait for N remote workers")
    parser.add_argument("--master-bind-host", default="127.0.0.1", help="master: interface to listen on")
    parser.add_argument("--master-bind-port", type=int, default=0, help="master: port (0: a free one)")
    parser.add_argument("--serve", action="store_true", help="run one load per stdin line until EOF")
    parser.add_argument("--log-level", default="WARNING")
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    if args.worker:
        return locust_driver.run_worker(args.master_host, args.master_port)
    if args.serve:
        return serve(sys.stdin, sys.stdout)
    if args.spec is None or args.out is None:
        parser.error("--spec and --out are required (unless --worker or --serve)")
    spec = WorkloadSpec.model_validate_json(args.spec.read_text(encoding="utf-8"))
    place(spec)
    if spec.open_loop:
        result = openloop.run_open(spec)
    elif args.expect_workers or spec.workers:
        result = locust_driver.run_master(
            spec, args.expect_workers, args.master_bind_host, args.master_bind_port or None
        )
    else:
        result = locust_driver.run_local(spec)
    _write(args.out, result)
    return 0


def serve(requests: TextIO, answers: TextIO) -> int:
    """Run one load per request line (`{"spec": path, "out": path}`), answer `done OUT` per run.

    Only runs of this process's own (open or closed loop, no workers): a spec asking for workers is
    an error line, `error <why>`, and the loop goes on."""
    for line in requests:
        if not line.strip():
            continue
        try:
            request = json.loads(line)
            spec = WorkloadSpec.model_validate_json(Path(request["spec"]).read_text(encoding="utf-8"))
            if spec.workers:
                raise ValueError("--serve runs loads in this process only (spec.workers must be 0)")
            place(spec)
            result = openloop.run_open(spec) if spec.open_loop else locust_driver.run_local(spec)
            _write(Path(request["out"]), result)
        except Exception as exc:  # one bad request must not end the session; the caller reads why
            answers.write(f"error {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}\n")
        else:
            answers.write(f"done {request['out']}\n")
        answers.flush()
    return 0


def place(spec: WorkloadSpec) -> None:
    """Run this process (and the workers it starts later) on spec.client_cpus, where the target put the
    cell's other helpers; no change when None."""
    if spec.client_cpus:
        os.sched_setaffinity(0, spec.client_cpus)


def _write(out: Path, result: dict[str, object]) -> None:
    result["client_cpus"] = sorted(os.sched_getaffinity(0))  # where this run's client ran (place)
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps(result), encoding="utf-8")
    tmp.replace(out)


if __name__ == "__main__":
    sys.exit(main())
