"""What the engine-side timing recorder costs the scheduler (canary/targets/engine_site/timing_probe.py), on
the unit tests' stand-ins with vLLM's names: the recorder's own work per engine step with 32 running
requests, and per request (added, first scheduled, finished, its line written). Prints two numbers.

    .venv/bin/python -m tests.bench.timing_probe_overhead
"""

from __future__ import annotations

import tempfile
import time
import types

from canary.targets.engine_site import timing_probe as tp
from tests.unit.targets.test_timing_probe import _Out, _Request


def main() -> None:
    recorder = tp.TimingRecorder(tempfile.mkdtemp())
    running = [f"r{i}" for i in range(32)]
    for rid in running:
        recorder.on_add(_Request(rid, rid))
    step = types.SimpleNamespace(num_scheduled_tokens=dict.fromkeys(running, 1))
    outputs = {0: types.SimpleNamespace(outputs=[_Out(rid, [1]) for rid in running])}
    recorder.on_schedule(step)
    steps = 20000
    started = time.perf_counter()
    for _ in range(steps):
        recorder.on_schedule(step)
        recorder.on_output(None, outputs)
    print(f"per engine step, 32 running requests: {(time.perf_counter() - started) / steps * 1e6:.1f} us")
    requests = 5000
    started = time.perf_counter()
    for i in range(requests):
        rid = f"x{i}"
        recorder.on_add(_Request(rid, rid))
        recorder.on_schedule(types.SimpleNamespace(num_scheduled_tokens={rid: 1}))
        recorder.on_output(None, {0: types.SimpleNamespace(outputs=[_Out(rid, [1], "length")])})
    per = (time.perf_counter() - started) / requests * 1e6
    print(f"per request (add, first schedule, finish, one line written): {per:.1f} us")


if __name__ == "__main__":
    main()
