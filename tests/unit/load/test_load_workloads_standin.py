"""Each named workload through the real load subprocess against a STAND-IN for vLLM on 127.0.0.1.

The stand-in is tests/support/scripted_server.py (scripted timing; it records what arrived when and
how long each prompt was). A run takes one to two seconds.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from canary.load.launch import LoadError, LoadResult, run_load
from canary.load.workload import WorkloadSpec, build_plan
from tests.support.scripted_server import ScriptedServer

TTFT_S, ITL_S = 0.05, 0.01


@pytest.fixture(scope="module")
def standin() -> Iterator[ScriptedServer]:
    """A stand-in for vLLM (not vLLM)."""
    with ScriptedServer(ttft_s=TTFT_S, itl_s=ITL_S) as server:
        yield server


def _spec(server: ScriptedServer, workload: dict[str, Any], **changes: Any) -> WorkloadSpec:
    base: dict[str, Any] = {
        "base_url": server.url,
        "model": server.model,
        "prompt_tokens": 8,
        "output_tokens": 4,
        "num_requests": 12,
        "concurrency": 3,
        "max_duration_s": 30.0,
        "token_pool": list(range(100, 140)),
        "seed": 2,
        "workload": workload,
        # the machine is shared: these tests are about what is sent, not the client's lag
        "max_client_lag_p99_s": 1.0,
        "max_client_cpu_ratio": 1.0,
    }
    base.update(changes)
    return WorkloadSpec.model_validate(base)


def _run(server: ScriptedServer, spec: WorkloadSpec, tmp_path: Path) -> LoadResult:
    server.reset()
    result = run_load(spec, tmp_path)
    assert result.errors == {} and result.not_sent == 0 and result.stop_reason == "complete"
    return result


def _server_lengths(server: ScriptedServer, spec: WorkloadSpec) -> dict[str, int]:
    return {r.request_id: r.prompt_tokens for r in server.records()}


def test_shared_prefix_and_block_residues_arrive_with_their_lengths(standin: ScriptedServer, tmp_path: Path) -> None:
    for workload in (
        {"kind": "shared_prefix", "prefix_groups": 3, "prefix_tokens": 20},
        {"kind": "block_residues", "block_sizes": [16, 4], "block_multiples": [1, 3]},
    ):
        spec = _spec(standin, workload)
        _run(standin, spec, tmp_path)
        arrived = _server_lengths(standin, spec)
        assert arrived == {r.request_id: r.prompt_tokens for r in build_plan(spec)}
    assert sorted(set(arrived.values())) == [3, 4, 5, 11, 12, 13, 15, 16, 17, 47, 48, 49]  # the last run


def test_multi_turn_sends_a_turn_only_after_the_previous_one_finished(standin: ScriptedServer, tmp_path: Path) -> None:
    # 4 conversations of 3 turns and 6 users: unordered, the users would send later turns at once
    spec = _spec(standin, {"kind": "multi_turn", "turns": 3}, num_requests=12, concurrency=6)
    result = _run(standin, spec, tmp_path)
    assert len(result.samples) == 12
    plan = {r.request_id: r for r in build_plan(spec)}
    records = {r.request_id: r for r in standin.records()}
    by_index = {p.index: records[rid] for rid, p in plan.items()}
    for rid, planned in plan.items():
        assert records[rid].prompt_tokens == planned.prompt_tokens
        if planned.after is not None:
            previous = by_index[planned.after]
            ended = previous.token_at[-1]
            assert records[rid].received_at >= ended, f"{rid} went out before turn {planned.after} ended"
    # the users still run conversations side by side: some requests overlap in time
    spans = sorted((r.received_at, r.token_at[-1]) for r in records.values())
    assert any(b[0] < a[1] for a, b in itertools.pairwise(spans))


def test_multi_turn_keeps_its_order_across_locust_workers(standin: ScriptedServer, tmp_path: Path) -> None:
    # a master and 2 worker processes; 3 conversations, so every other request would split them: each worker
    # must get whole conversations (a turn whose predecessor went elsewhere would wait until the deadline)
    spec = _spec(
        standin, {"kind": "multi_turn", "turns": 4}, num_requests=12, concurrency=6, workers=2, max_duration_s=8.0
    )
    result = _run(standin, spec, tmp_path)
    assert len(result.samples) == 12 and {s.worker for s in result.samples} == {0, 1}
    plan = build_plan(spec)
    records = {r.request_id: r for r in standin.records()}
    by_index = {p.index: records[p.request_id] for p in plan}
    for planned in plan:
        if planned.after is not None:
            assert records[planned.request_id].received_at >= by_index[planned.after].token_at[-1]


def test_open_loop_multi_turn_starts_on_the_schedule_and_follows_each_turn(
    standin: ScriptedServer, tmp_path: Path
) -> None:
    # 4 conversations of 3 turns starting 0.1 s apart on average; a turn takes ~0.08 s, then ~0.3 s of
    # think: on the plain schedule (12 requests at 10/s) later turns would go out before their predecessor
    # ended plus its think time
    workload = {"kind": "multi_turn", "turns": 3, "think_time_s": 0.3}
    spec = _spec(standin, workload, num_requests=12, open_loop=True, request_rate=10.0)
    result = _run(standin, spec, tmp_path)
    plan = build_plan(spec)
    samples = {s.index: s for s in result.samples}
    records = {r.request_id: r for r in standin.records()}
    assert len(samples) == len(records) == 12
    # the rate starts conversations: it is not the request rate, which follows the server's pace
    assert result.metrics["intended_conversation_rate_per_s"] == 10.0
    assert "intended_request_rate_per_s" not in result.metrics
    firsts = [p for p in plan if p.after is None]
    assert len(firsts) == 4 and all(p.offset_s is not None for p in firsts)
    # the first turns keep the schedule: intended times on the plan's offsets, sent on time
    t0 = samples[0].intended_at
    for planned in firsts:
        sample = samples[planned.index]
        assert sample.intended_at is not None and t0 is not None
        assert sample.intended_at - t0 == pytest.approx(planned.offset_s, abs=1e-6)
        assert 0 <= sample.sent_at - sample.intended_at < 0.05
    # every later turn: after its predecessor's last token (server clock), its think time after the
    # predecessor ended (client clock)
    for planned in plan:
        if planned.after is None:
            continue
        previous = plan[planned.after]
        think = planned.think_s or 0.0
        assert records[planned.request_id].received_at >= records[previous.request_id].token_at[-1] + think
        gap = samples[planned.index].sent_at - samples[planned.after].ended_at
        assert think <= gap < think + 0.05, (planned.index, gap, think)
        assert samples[planned.index].intended_at == pytest.approx(samples[planned.after].ended_at + think, abs=0.01)


def test_a_trace_is_replayed_on_its_timestamps(standin: ScriptedServer, tmp_path: Path) -> None:
    rows = [
        {"timestamp": 100 + 150 * i, "input_length": 6 + i, "output_length": 3, "hash_ids": [i % 2]} for i in range(8)
    ]
    trace = tmp_path / "trace.jsonl"
    trace.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    workload = {"kind": "trace", "trace_path": str(trace), "trace_block_tokens": 4, "trace_time_scale": 2.0}
    spec = _spec(standin, workload, num_requests=8, open_loop=True)
    _run(standin, spec, tmp_path)
    plan = build_plan(spec)
    records = {r.request_id: r for r in standin.records()}
    arrived = [records[p.request_id].received_at for p in plan]
    assert [records[p.request_id].prompt_tokens for p in plan] == [6 + i for i in range(8)]
    gaps = [b - a for a, b in itertools.pairwise(arrived)]
    assert all(abs(g - 0.3) < 0.1 for g in gaps), gaps  # 150 ms apart in the trace, scaled by 2


def test_a_bad_trace_fails_before_the_load_starts(standin: ScriptedServer, tmp_path: Path) -> None:
    trace = tmp_path / "bad.jsonl"
    trace.write_text('{"timestamp": 0, "input_length": 4}\n', encoding="utf-8")
    spec = _spec(standin, {"kind": "trace", "trace_path": str(trace)}, num_requests=1)
    with pytest.raises(LoadError, match=r"bad\.jsonl:1: no 'output_length'"):
        run_load(spec, tmp_path)
