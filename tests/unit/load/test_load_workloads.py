"""Named workloads (canary/load/workloads/<kind>/): seeded plans, exact lengths, shared prefixes, residues, traces."""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from canary.checks.throughput.check import build_spec
from canary.config import ThroughputCheckConfig
from canary.config.trace import TraceError, load_trace
from canary.load.schedule import schedule
from canary.load.workload import PlannedRequest, WorkloadSpec, build_plan, share_of_plan
from canary.load.workloads.block_residues.requests import residue_lengths
from canary.plan.cell import Cell
from canary.targets.base import Deployment

POOL = list(range(1000, 1400))


def _spec(workload: dict[str, Any], **changes: Any) -> WorkloadSpec:
    base: dict[str, Any] = {
        "base_url": "http://127.0.0.1:1",
        "model": "m",
        "prompt_tokens": 12,
        "output_tokens": 5,
        "num_requests": 24,
        "warmup_requests": 2,
        "token_pool": POOL,
        "seed": 3,
        "workload": workload,
    }
    base.update(changes)
    return WorkloadSpec.model_validate(base)


def _prompt(request: PlannedRequest) -> list[int]:
    prompt = json.loads(request.body)["prompt"]
    assert isinstance(prompt, list)
    return prompt


def _same_plan(a: list[PlannedRequest], b: list[PlannedRequest]) -> bool:
    return [(r.body, r.offset_s, r.after, r.group) for r in a] == [(r.body, r.offset_s, r.after, r.group) for r in b]


def _write_trace(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


@pytest.mark.parametrize("kind", ["shared_prefix", "multi_turn", "block_residues"])
def test_a_named_workload_is_seeded(kind: str) -> None:
    spec = _spec(
        {"kind": kind, "block_sizes": [16] if kind == "block_residues" else None}, length_distribution="uniform"
    )
    assert _same_plan(build_plan(spec), build_plan(spec))
    assert not _same_plan(build_plan(spec), build_plan(spec.model_copy(update={"seed": 4})))


def test_the_default_workload_has_no_order_and_no_groups() -> None:
    plan = build_plan(_spec({}))
    assert all(r.after is None and r.group is None for r in plan)
    assert [len(_prompt(r)) for r in plan] == [12] * 26


def test_shared_prefix_groups_share_their_prefix_token_for_token() -> None:
    spec = _spec({"kind": "shared_prefix", "prefix_groups": 3, "prefix_tokens": 40}, length_distribution="uniform")
    plan = build_plan(spec)
    assert [r.group for r in plan] == [i % 3 for i in range(26)]  # interleaved across groups
    prefixes: dict[int, list[int]] = {}
    for r in plan:
        prompt = _prompt(r)
        assert len(prompt) == r.prompt_tokens and r.prompt_tokens > 40  # prefix + a suffix of the sampled length
        assert prefixes.setdefault(r.group or 0, prompt[:40]) == prompt[:40]
    assert len({tuple(p) for p in prefixes.values()}) == 3  # distinct groups have distinct prefixes
    suffixes = [tuple(_prompt(r)[40:]) for r in plan]
    assert len(set(suffixes)) == len(suffixes)  # each suffix fresh


def test_multi_turn_prompts_grow_by_the_previous_output_and_new_tokens() -> None:
    spec = _spec({"kind": "multi_turn", "turns": 3}, length_distribution="uniform")
    plan = build_plan(spec)
    conversations = 9  # ceil(26 / 3)
    by_index = {r.index: r for r in plan}
    for r in plan:
        assert r.group == r.index % conversations
        assert len(_prompt(r)) == r.prompt_tokens
        if r.index < conversations:
            assert r.after is None
            continue
        prev = by_index[r.index - conversations]
        assert r.after == prev.index and prev.group == r.group
        new = r.prompt_tokens - prev.prompt_tokens - prev.max_tokens
        assert 1 <= new <= 15  # uniform around 12 +- 25%
        assert _prompt(r)[: prev.prompt_tokens] == _prompt(prev)  # the whole previous prompt, token for token
    assert max(r.index // conversations for r in plan) == 2  # three turns at most


def test_multi_turn_shares_keep_conversations_together() -> None:
    plan = build_plan(_spec({"kind": "multi_turn", "turns": 2}))
    shares = [share_of_plan(plan, w, 3) for w in range(3)]
    assert sorted(r.index for s in shares for r in s) == list(range(len(plan)))  # disjoint, whole
    for share in shares:
        taken = {r.index for r in share}
        assert all(r.after is None or r.after in taken for r in share)


def test_the_share_of_other_workloads_is_still_every_nth() -> None:
    plan = build_plan(_spec({"kind": "shared_prefix"}))
    assert [r.index for r in share_of_plan(plan, 1, 3)] == list(range(1, 26, 3))
    rebuilt = build_plan(_spec({"kind": "shared_prefix"}))  # a worker builds the same plan
    assert _same_plan(share_of_plan(plan, 2, 3), share_of_plan(rebuilt, 2, 3))


def test_open_loop_multi_turn_starts_conversations_on_the_schedule() -> None:
    spec = _spec({"kind": "multi_turn", "turns": 3, "think_time_s": 0.5}, open_loop=True, request_rate=5.0)
    plan = build_plan(spec)
    conversations = 9  # ceil(26 / 3): the first turns are requests 0..8
    starts = schedule(26, 5.0, 1.0, spec.seed)[:conversations]
    assert [r.offset_s for r in plan[:conversations]] == starts  # conversation c starts at the c-th arrival
    assert all(r.think_s is None for r in plan[:conversations])
    later = plan[conversations:]
    assert all(r.offset_s is None and r.after is not None for r in later)  # sent after their predecessor
    thinks = [r.think_s or 0.0 for r in later]
    assert all(t > 0 for t in thinks) and len(set(thinks)) == len(thinks)
    assert statistics.fmean(thinks) == pytest.approx(0.5, rel=0.6)  # exponential of mean 0.5, 17 draws
    assert [r.think_s for r in build_plan(spec)] == [r.think_s for r in plan]  # seeded
    assert [r.think_s for r in build_plan(spec.model_copy(update={"seed": 4}))][conversations:] != thinks
    no_think = build_plan(_spec({"kind": "multi_turn"}, open_loop=True, request_rate=5.0))
    assert {r.think_s for r in no_think if r.after is not None} == {0.0}
    closed = build_plan(_spec({"kind": "multi_turn"}, request_rate=5.0))  # paced closed loop: as before
    assert [r.offset_s for r in closed] == schedule(26, 5.0, 1.0, spec.seed)


def test_think_time_needs_the_open_loop() -> None:
    with pytest.raises(ValidationError, match="think_time_s needs open_loop"):
        _spec({"kind": "multi_turn", "think_time_s": 1.0})


def test_block_residues_are_one_either_side_of_each_multiple() -> None:
    assert residue_lengths([16, 32], [1, 2]) == [15, 16, 17, 31, 32, 33, 63, 64, 65]
    assert residue_lengths([1], [1]) == [1, 2]  # 0 tokens is no prompt
    plan = build_plan(_spec({"kind": "block_residues", "block_sizes": [16, 32], "block_multiples": [1, 2]}))
    expected = [15, 16, 17, 31, 32, 33, 63, 64, 65]
    assert [len(_prompt(r)) for r in plan] == [expected[i % 9] for i in range(26)]
    assert [r.prompt_tokens for r in plan] == [expected[i % 9] for i in range(26)]


def test_a_trace_replays_its_arrivals_lengths_and_shared_blocks(tmp_path: Path) -> None:
    trace = _write_trace(
        tmp_path / "t.jsonl",
        [
            {"timestamp": 1000, "input_length": 10, "output_length": 3, "hash_ids": [7, 8]},
            {"timestamp": 1500, "input_length": 9, "output_length": 4, "hash_ids": [7, 9]},
            {"timestamp": 3000, "input_length": 6, "output_length": 2},
            {"timestamp": 3000, "input_length": 3, "output_length": 1, "hash_ids": [8]},
        ],
    )
    workload = {"kind": "trace", "trace_path": str(trace), "trace_block_tokens": 4, "trace_time_scale": 0.5}
    spec = _spec(workload, num_requests=4, warmup_requests=0, request_rate=None)
    plan = build_plan(spec)
    assert [r.offset_s for r in plan] == pytest.approx([0.0, 0.25, 1.0, 1.0])
    assert [len(_prompt(r)) for r in plan] == [10, 9, 6, 3] and [r.max_tokens for r in plan] == [3, 4, 2, 1]
    a, b, _c, d = (_prompt(r) for r in plan)
    assert a[:4] == b[:4]  # hash id 7: one block, shared token for token
    assert a[4:8] != b[4:8]  # 8 vs 9
    assert d == a[4:7]  # hash id 8 again, cut to 3 tokens
    assert _same_plan(plan, build_plan(spec))
    again = build_plan(spec.model_copy(update={"seed": 5}))
    assert _prompt(again[0])[:4] != a[:4]  # the blocks follow the seed


@pytest.mark.parametrize(
    ("line", "says"),
    [
        ("not json", "not JSON"),
        ("[1, 2]", "must be a JSON object"),
        ('{"timestamp": 5, "output_length": 3}', "no 'input_length'"),
        ('{"timestamp": 5, "input_length": "9", "output_length": 3}', "'input_length' must be a number"),
        ('{"timestamp": 5, "input_length": 0, "output_length": 3}', "'input_length' must be at least 1"),
        ('{"timestamp": 5, "input_length": 2.5, "output_length": 3}', "whole numbers"),
        ('{"timestamp": 5, "input_length": 2, "output_length": 3, "hash_ids": [1, "x"]}', "'hash_ids' must be"),
        ('{"timestamp": 1, "input_length": 2, "output_length": 3}', "before the previous line"),
    ],
)
def test_a_bad_trace_line_is_named_by_file_and_line(tmp_path: Path, line: str, says: str) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text('{"timestamp": 2, "input_length": 4, "output_length": 1}\n\n' + line + "\n", encoding="utf-8")
    with pytest.raises(TraceError, match=f"bad.jsonl:3: .*{says}"):
        load_trace(path)


def test_a_trace_shorter_than_the_run_is_an_error(tmp_path: Path) -> None:
    trace = _write_trace(tmp_path / "short.jsonl", [{"timestamp": 0, "input_length": 4, "output_length": 1}])
    with pytest.raises(TraceError, match="1 requests, the run sends 26"):
        build_plan(_spec({"kind": "trace", "trace_path": str(trace)}))
    with pytest.raises(ValidationError, match="needs trace_path"):
        _spec({"kind": "trace"})


def test_text_prompts_share_prefixes_too() -> None:
    spec = _spec({"kind": "shared_prefix", "prefix_groups": 2, "prefix_tokens": 10}, endpoint="chat")
    plan = build_plan(spec)
    texts = [json.loads(r.body)["messages"][0]["content"].split() for r in plan]
    assert texts[0][:10] == texts[2][:10] != texts[1][:10]


def test_the_throughput_config_carries_the_workload() -> None:
    cfg = ThroughputCheckConfig.model_validate({"workload": {"kind": "shared_prefix", "prefix_tokens": 32}})
    deployment = Deployment(cell=Cell.model_construct(id="agg.b32"), base_url="http://router:1", served_model="tiny")
    spec = build_spec(cfg, deployment)
    assert spec.workload.kind == "shared_prefix" and spec.workload.prefix_tokens == 32
    with pytest.raises(ValidationError, match="capacity search does not run a multi_turn"):
        ThroughputCheckConfig.model_validate({"workload": {"kind": "multi_turn"}, "capacity": {"enabled": True}})
    open_turns = ThroughputCheckConfig.model_validate(
        {"workload": {"kind": "multi_turn", "think_time_s": 0.2}, "open_loop": True, "request_rate": 2}
    )
    assert build_spec(open_turns, deployment).workload.think_time_s == 0.2
    trace_cfg = ThroughputCheckConfig.model_validate(
        {"workload": {"kind": "trace", "trace_path": "x.jsonl"}, "open_loop": True}
    )
    assert trace_cfg.request_rate is None  # the trace's timestamps are the arrivals
