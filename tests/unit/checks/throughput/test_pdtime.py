"""The P/D time decomposition (canary/checks/throughput/pdtime.py) on crafted engine records: the join by
the client's id, each process's own clock, a missing record, a recompute fallback, hooks that could not
attach."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from canary.checks.throughput import pdtime
from canary.core import metric_keys as keys
from canary.plan.cell import Cell
from canary.targets.base import Deployment, ServerInfo
from canary.targets.engine_site.timing_probe import NIXL_PULL
from tests.support.pd_records import SPLIT, Engine, add_request, ttft_of


def _cell() -> Cell:
    from canary.plan.matrix import plan
    from tests.support.sample import sample_config

    return next(c for c in plan(sample_config()).planned() if c.topology == "pd-nixl")


def _deployment(tmp_path: Path, prefill: Engine, decode: Engine) -> Deployment:
    servers = {}
    for role, engine in (("prefill", prefill), ("decode", decode)):
        engine.write(tmp_path / f"{role}.layout")
        servers[role] = ServerInfo(role=role, base_url=f"http://127.0.0.1:{1 if role == 'prefill' else 2}")
        servers[role].layout_dir = tmp_path / f"{role}.layout"
    servers["router"] = ServerInfo(role="router", base_url="http://127.0.0.1:3")
    return Deployment(_cell(), "http://127.0.0.1:3", "tiny", servers, started=True)


def test_terms_sum_to_the_ttft_across_processes_on_their_own_clocks(tmp_path: Path) -> None:
    """Prefill's and decode's monotonic clocks start 4000 s apart; each file's anchor puts its stamps on the
    wall clock, so every term comes out as written."""
    prefill, decode = Engine(pid=101, mono_base=1000.0), Engine(pid=202, mono_base=5000.0)
    samples = [add_request(prefill, decode, f"tp0-x-{i}", 1_700_000_100.0 + i) for i in range(5)]
    found = pdtime.decompose_deployment(_deployment(tmp_path, prefill, decode), samples)
    assert found is not None and found.unavailable is None and len(found.good) == 5
    row = found.good[0]
    for term in ("prefill_queue", "prefill_compute", "decode_wait", "kv_transfer", "handover", "first_decode_step"):
        assert row.terms[term] == pytest.approx(SPLIT[term], abs=1e-6), term
    router = SPLIT["router_in"] + SPLIT["router_between"] + SPLIT["router_out"]
    assert row.terms["router"] == pytest.approx(router, abs=1e-6)
    assert sum(row.terms[t] for t in pdtime.TTFT_TERMS) == pytest.approx(row.ttft_s, abs=1e-9)
    assert row.ttft_s == pytest.approx(ttft_of(SPLIT), abs=1e-6)
    assert row.terms["decode"] == pytest.approx(0.1)
    assert row.provenance["kv_bytes"] == 65536 and row.provenance["decode"] == "decode http://127.0.0.1:2"
    assert row.provenance["prefill_pid"] == 101 and not row.recompute
    metrics = found.metrics()
    assert metrics[keys.pd_time_key("kv_transfer", "p50")] == pytest.approx(SPLIT["kv_transfer"], abs=1e-6)
    assert metrics[keys.PD_TIME_REQUESTS] == 5.0 and metrics[keys.PD_TIME_RECOMPUTED] == 0.0
    evidence = found.evidence()
    assert evidence["available"] and evidence["joined"] == 5 and len(evidence["rows"]) == 5
    assert evidence["stats_ms"]["kv_transfer"]["p50"] == pytest.approx(20.0, abs=1e-3)
    json.dumps(evidence)  # results.json can hold it


def test_a_slower_transfer_moves_only_the_transfer_term(tmp_path: Path) -> None:
    """What fault 10 must look like: 30 ms more per read, every other term as before."""
    split = {**SPLIT, "kv_transfer": SPLIT["kv_transfer"] + 0.030}
    prefill, decode = Engine(pid=1, mono_base=10.0), Engine(pid=2, mono_base=20.0)
    samples = [add_request(prefill, decode, f"r-{i}", 1_700_000_000.0 + i, split) for i in range(4)]
    stats = pdtime.join(samples, *_sides(prefill, decode)).stats()
    assert stats["kv_transfer"]["p50"] == pytest.approx(0.050, abs=1e-6)
    assert stats["prefill_compute"]["p50"] == pytest.approx(SPLIT["prefill_compute"], abs=1e-6)
    assert stats["handover"]["p50"] == pytest.approx(SPLIT["handover"], abs=1e-6)


def _sides(prefill: Engine, decode: Engine) -> tuple[pdtime.EngineSide, pdtime.EngineSide]:
    return (
        pdtime.engine_side("prefill", "prefill", [pdtime.parse_file(Path("p"), prefill.text_lines())]),
        pdtime.engine_side("decode", "decode", [pdtime.parse_file(Path("d"), decode.text_lines())]),
    )


def test_a_missing_engine_record_leaves_the_request_out_and_says_so() -> None:
    prefill, decode = Engine(pid=1, mono_base=0.0), Engine(pid=2, mono_base=0.0)
    samples = [add_request(prefill, decode, f"r-{i}", 1_700_000_000.0 + i) for i in range(3)]
    prefill.lines = [line for line in prefill.lines if line.get("cid") != "r-1"]  # e.g. truncated, or aborted
    found = pdtime.join(samples, *_sides(prefill, decode))
    assert len(found.rows) == 3 and len(found.good) == 2
    assert found.rows[1].problems == ["no prefill record"]
    evidence = found.evidence()
    assert evidence["joined"] == 2 and "r-1: no prefill record" in evidence["problems"]


def test_a_clock_that_disagrees_shows_as_a_negative_term() -> None:
    """A decode whose anchor is 50 ms off (its stamps land before the prefill finished): the row is not
    trusted rather than silently shrinking the router term."""
    prefill, decode = Engine(pid=1, mono_base=0.0), Engine(pid=2, mono_base=0.0)
    samples = [add_request(prefill, decode, "r-0", 1_700_000_000.0)]
    decode.mono_base -= 0.05  # its file's anchor now puts every decode stamp 50 ms early
    found = pdtime.join(samples, *_sides(prefill, decode))
    assert (
        not found.good and "negative: " in found.rows[0].problems[0] and "router_between" in found.rows[0].problems[0]
    )
    assert found.summary() == "decomposition unavailable: no request joined without problems"


def test_a_recompute_fallback_is_named_and_has_no_transfer() -> None:
    """Decode computed the prompt itself (no KV read, its first step scheduled the whole prompt)."""
    prefill, decode = Engine(pid=1, mono_base=0.0), Engine(pid=2, mono_base=0.0)
    split = {**SPLIT, "kv_transfer": 0.0, "handover": 0.0}
    samples = [add_request(prefill, decode, "r-0", 1_700_000_000.0, split, recompute_tokens=63, read=False)]
    found = pdtime.join(samples, *_sides(prefill, decode))
    row = found.good[0]
    assert row.recompute and row.provenance["recomputed_tokens"] == 63
    assert row.terms["kv_transfer"] == 0.0 and row.terms["handover"] == 0.0
    assert row.terms["decode_wait"] == pytest.approx(SPLIT["decode_wait"], abs=1e-6)
    assert found.metrics()[keys.PD_TIME_RECOMPUTED] == 1.0


def test_a_read_of_another_prefill_request_is_a_problem() -> None:
    prefill, decode = Engine(pid=1, mono_base=0.0), Engine(pid=2, mono_base=0.0)
    samples = [add_request(prefill, decode, "r-0", 1_700_000_000.0)]
    decode.lines[-1]["remote_id"] = "someone-else"
    row = pdtime.join(samples, *_sides(prefill, decode)).rows[0]
    assert any("someone-else" in p for p in row.problems)


def test_warmup_and_failed_requests_are_not_decomposed() -> None:
    prefill, decode = Engine(pid=1, mono_base=0.0), Engine(pid=2, mono_base=0.0)
    warm = add_request(prefill, decode, "r-0", 1_700_000_000.0)
    warm.warmup = True
    failed = add_request(prefill, decode, "r-1", 1_700_000_001.0)
    failed.error = "http_500"
    assert pdtime.join([warm, failed], *_sides(prefill, decode)).rows == []


def test_a_hook_that_could_not_attach_makes_it_unavailable(tmp_path: Path) -> None:
    prefill, decode = Engine(pid=1, mono_base=0.0), Engine(pid=2, mono_base=0.0)
    samples = [add_request(prefill, decode, "r-0", 1_700_000_000.0)]
    decode.hooks[f"{NIXL_PULL}.NixlPullConnectorWorker._read_blocks"] = "missing: no method _read_blocks in this vLLM"
    found = pdtime.decompose_deployment(_deployment(tmp_path, prefill, decode), samples)
    assert found is not None and found.unavailable is not None
    assert "decode: NixlPullConnectorWorker._read_blocks missing: no method _read_blocks" in found.unavailable
    assert found.summary().startswith("decomposition unavailable: decode: NixlPullConnectorWorker._read_blocks")
    assert found.metrics() == {} and found.evidence() == {"available": False, "why": found.unavailable}


def test_no_records_at_all_is_unavailable_and_an_aggregated_cell_has_none(tmp_path: Path) -> None:
    deployment = _deployment(tmp_path, Engine(pid=1, mono_base=0.0), Engine(pid=2, mono_base=0.0))
    for role in ("prefill", "decode"):
        for path in (tmp_path / f"{role}.layout").glob("timing.*"):
            path.unlink()
    found = pdtime.decompose_deployment(deployment, [])
    assert found is not None and found.unavailable is not None and "no timing records" in found.unavailable
    aggregated = Deployment(_cell(), "http://x", "tiny", {"aggregated": ServerInfo("aggregated", "http://x")})
    assert pdtime.decompose_deployment(aggregated, []) is None


def test_a_broken_line_and_a_truncated_file_are_reported_not_fatal(tmp_path: Path) -> None:
    prefill, decode = Engine(pid=1, mono_base=0.0), Engine(pid=2, mono_base=0.0)
    samples = [add_request(prefill, decode, "r-0", 1_700_000_000.0)]
    lines = [*decode.text_lines(), "{not json", json.dumps({"ev": "truncated", "at": 1.0})]
    side = pdtime.engine_side("decode", "decode", [pdtime.parse_file(Path("timing.2.jsonl"), lines)])
    assert "timing.2.jsonl:" in side.problems[0] and "decode: timing records truncated" in side.problems[1]
    assert not side.blocking
    found = pdtime.join(samples, _sides(prefill, decode)[0], side)
    assert len(found.good) == 1 and found.evidence()["problems"][:2] == side.problems
