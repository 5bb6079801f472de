"""The real engine venv: the overlay probe; engine_site's NIXL progress-thread floor, alone and in a P/D pair.

nixl 1.5.1 hard-codes the progress thread's sleep to 0 (a busy loop, one core per engine); the
engine site floors it when CANARY_NIXL_PROGRESS_DELAY_US is set. Without it an idle P/D pair of
this 2-core machine burned ~2.0 cores (measured); with it ~0.1.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from canary.images import overlay
from canary.paths import DEFAULT_ENGINE_PYTHON
from canary.targets.base import Deployment
from canary.targets.engine_env import ENGINE_SITE_DIR, NIXL_PROGRESS_DELAY_ENV
from canary.targets.processes import descendants

PROBE = """
import nixl._api as api
config = api.nixlBind.nixlAgentConfig()
config.pthrDelay = 0  # what nixl_agent.__init__ does
print("probe:", config.pthrDelay)
agent = api.nixl_agent("canary-probe", api.nixl_agent_config(num_threads=1))
print("probe:", agent.name)
"""


def _probe(delay: str | None) -> list[str]:
    assert DEFAULT_ENGINE_PYTHON.exists(), "no .venv-engine: run `make engine-venv` (make test does)"
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ENGINE_SITE_DIR), "UCX_NET_DEVICES": "lo", "HOME": "/tmp"}
    if delay is not None:
        env[NIXL_PROGRESS_DELAY_ENV] = delay
    done = subprocess.run(
        [str(DEFAULT_ENGINE_PYTHON), "-c", PROBE], env=env, capture_output=True, text=True, timeout=120, check=True
    )
    return [line.split(None, 1)[1] for line in done.stdout.splitlines() if line.startswith("probe: ")]  # NIXL logs too


def test_overlay_probe_finds_the_engine_package_without_importing_it() -> None:
    """canary.images.overlay against the real engine venv (the unit tests cover its error paths)."""
    engine = overlay.probe_engine(DEFAULT_ENGINE_PYTHON)
    assert (engine.package_dir / "__init__.py").is_file()
    assert engine.package_dir.name == "vllm" and "site-packages" in str(engine.package_dir)
    assert engine.version.startswith("vllm")


def test_progress_delay_is_floored_and_the_agent_still_starts() -> None:
    assert _probe("1000") == ["1000", "canary-probe"]


def test_without_the_variable_nixl_is_left_as_shipped() -> None:
    assert _probe(None) == ["0", "canary-probe"]
    assert _probe("not-a-number") == ["0", "canary-probe"]


def _cpu_seconds(pids: set[int]) -> float:
    ticks = 0
    for pid in pids:
        try:
            for task in Path(f"/proc/{pid}/task").iterdir():
                fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
                ticks += int(fields[11]) + int(fields[12])  # utime + stime
        except (FileNotFoundError, ProcessLookupError):
            continue
    return ticks / os.sysconf("SC_CLK_TCK")


@pytest.mark.engine
def test_idle_pd_pair_does_not_spin(pd_deployment: Deployment) -> None:
    pids: set[int] = set()
    for role in ("prefill", "decode"):
        server = pd_deployment.server(role)
        assert server is not None and server.pid is not None
        pids |= {server.pid, *descendants(server.pid)}
    time.sleep(2)  # let any request of an earlier test drain
    before, started = _cpu_seconds(pids), time.monotonic()
    time.sleep(5)
    cores = (_cpu_seconds(pids) - before) / (time.monotonic() - started)
    assert cores < 0.6, f"an idle P/D pair used {cores:.2f} cores (NIXL progress threads spinning?)"
