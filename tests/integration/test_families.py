"""configs/cpu-families.yaml for real, trimmed to three cells (issue 40): the sliding-window Gemma-3 as a P/D pair
over NIXL with prefix caching on (4 KV cache groups, every one recorded by the layout probe; decode serves a block
of a prompt it saw from its own cache) must pass, the Mamba2 hybrid with
prefix caching on must die on a prompt over its 256-token block and be named, never passed, and the tiny
Llama as a 2p1d pair (TP-2 prefill, TP-1 decode) must pass parity and the KV proof, then live through a
restart of its prefill (the lifecycle check). The whole config
(every family): `canary run configs/cpu-families.yaml` (docs/methodology/kv-families.md)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import NamedTuple

import pytest

from canary.cli import main
from canary.judge.results import RunResult
from canary.paths import CACHE_DIR, REPO_ROOT

CONFIG = REPO_ROOT / "configs" / "cpu-families.yaml"
CELLS = (
    # prefix caching on: a sliding-window decode cannot hold a whole prefix (NIXL sends a sliding group only its
    # window's blocks), so only the reuse probe's same-output gate judges it
    "gemma3.pd.cpu_attn.p256-d256.pc-on",
    "nemotron_h.agg.cpu_attn.b256.pc-on",
    # a P/D tensor-parallel shape (TP-2 prefill, TP-1 decode) whose prefill the lifecycle check restarts
    "llama.pd.cpu_attn.p128-d128.tp2p1d",
)


class FamiliesRun(NamedTuple):
    run: RunResult
    run_dir: Path


@pytest.fixture(scope="module")
def families(tmp_path_factory: pytest.TempPathFactory) -> FamiliesRun:
    for name in ("tiny-gemma3", "tiny-nemotron-h"):
        if not (CACHE_DIR / "models" / name / "config.json").exists():
            pytest.fail(f"the family model {name} is not built: run `make model-families`", pytrace=False)
    results = tmp_path_factory.mktemp("families")
    code = main(["run", str(CONFIG), "--results-dir", str(results), *(a for c in CELLS for a in ("--only", c))])
    (run_dir,) = [p for p in results.iterdir() if p.is_dir() and not p.is_symlink() and not p.name.startswith(".")]
    run = RunResult.model_validate(json.loads((run_dir / "results.json").read_text()))
    assert code == run.exit_code
    return FamiliesRun(run, run_dir)


@pytest.mark.engine
@pytest.mark.slow
def test_the_sliding_window_pair_passes_with_every_kv_group_recorded(families: FamiliesRun) -> None:
    pd = next(c for c in families.run.cells if c.cell.model == "gemma3" and c.cell.topology == "pd-nixl")
    assert pd.verdict == "pass", (pd.verdict, pd.reason)
    startup = pd.check("startup")
    assert startup is not None
    for role in ("prefill", "decode"):
        groups = startup.evidence["layout"]["engines"][role]["groups"]
        assert sorted(g["kind"] for g in groups) == ["full", "sliding", "sliding", "sliding"], groups
        assert {g["sliding_window"] for g in groups if g["kind"] == "sliding"} == {64}
        # each group registered with NIXL: measured, one region all four groups share (group id -1)
        assert all(g["nixl_regions"] or g["nixl_shared_regions"] for g in groups), groups
    transfer = pd.check("kv_transfer")
    assert transfer is not None and transfer.verdict == "pass", transfer.summary
    assert [g.passed for g in transfer.gates if g.name == "reuse-same-output"] == [True], transfer.gates
    assert not [g for g in transfer.gates if g.name == "decode-prefix-cache-hit"]
    assert "sliding-window KV cache group" in transfer.evidence["reuse_probe"]["decode_prefix_cache_hit"]
    startup = pd.check("startup")
    assert startup is not None and startup.evidence["live_config"]["decode"]["observed"]["prefix_caching"] is True


@pytest.mark.engine
@pytest.mark.slow
def test_the_mamba_prefix_caching_crash_is_named_never_passed(families: FamiliesRun) -> None:
    """The engine dies on the first prompt over its 256-token block (measured: IndexError in mamba_mixer2.py,
    EngineDeadError, HTTP 500). The check that met the death crashed; the runner waits its grace for the server
    to exit and names the death (the `engines` result), which is the crash the expectation names
    (engine_dies): expected-fail with the expectation's reason and the death."""
    crash = next(c for c in families.run.cells if c.cell.model == "nemotron-h")
    assert crash.cell.prefix_caching is True
    assert crash.cell.expect is not None and crash.cell.expect.engine_dies
    assert crash.verdict == "expected-fail", (crash.verdict, crash.reason)
    assert "prefix caching on" in (crash.reason or "") and "server died" in (crash.reason or ""), crash.reason
    engines = crash.check("engines")
    assert engines is not None and engines.verdict == "fail" and engines.evidence["deaths"][0]["role"] == "aggregated"
    log = (families.run_dir / "cells" / crash.cell.id / "logs" / "aggregated.log").read_text()
    assert "varlen_states[last_chunk_indices_p]" in log and "IndexError" in log


@pytest.mark.engine
@pytest.mark.slow
def test_a_2p1d_pair_serves_and_lives_through_a_prefill_restart(families: FamiliesRun) -> None:
    """Prefill's two ranks share prefill's core (0|0), decode keeps its own (1); the lifecycle check restarts
    prefill while decode serves alone, and the pair serves the same greedy tokens once prefill is back."""
    pair = next(c for c in families.run.cells if c.cell.model == "llama")
    assert (pair.cell.prefill_tp, pair.cell.decode_tp) == (2, 1)
    assert pair.verdict == "pass", (pair.verdict, pair.reason)
    parity, transfer, lifecycle = (pair.check(n) for n in ("parity", "kv_transfer", "lifecycle"))
    assert parity is not None and parity.metrics["parity_match_rate"] == 1.0, parity
    assert transfer is not None and transfer.verdict == "pass", transfer.summary
    # vLLM's default prefix caching: the reuse probe's second send came from decode's own cache (a block or more)
    # and the pulled tail, and answered like the first
    assert [g.passed for g in transfer.gates if g.name == "reuse-same-output"] == [True], transfer.gates
    before, after = transfer.evidence["before"], transfer.evidence["after"]
    assert after["prompt_tokens_cache_hit"] - before["prompt_tokens_cache_hit"] >= 128, (before, after)
    assert lifecycle is not None and lifecycle.verdict == "pass", lifecycle.summary
    assert lifecycle.evidence["decode_pids"][0] == lifecycle.evidence["decode_pids"][1]
    assert lifecycle.evidence["prefill_pids"][0] != lifecycle.evidence["prefill_pids"][1]
    logs = families.run_dir / "cells" / pair.cell.id / "logs"
    assert "VLLM_CPU_OMP_THREADS_BIND='0|0'" in (logs / "prefill.log").read_text()
