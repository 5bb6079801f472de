"""Prefix caching as a cell dimension (issue 40): matrix.prefix_caching [true, false] and an include's
prefix_caching plan cells with id part pc-on / pc-off, pass vLLM's flag to every engine, refuse the same flag in
extra_args, pick a control of the same caching, and are judged on it: startup reads the engine's
enable_prefix_caching, kv_transfer gates decode's own prefix cache."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from canary.checks.kv_transfer.check import (
    REUSE_TOKENS,
    KvCounters,
    prefix_cache_gate,
    reuse_ids,
    reuse_length,
    reuse_output_gate,
    sliding_window_decode,
)
from canary.checks.parity.fidelity import Position
from canary.checks.startup.check import (
    Observed,
    bool_label,
    cache_config,
    compare,
    expected_for,
    missing_evidence,
)
from canary.config import CanaryConfig, CellMatch
from canary.config.load import validate_config
from canary.core.promtext import parse
from canary.errors import ConfigError
from canary.paths import REPO_ROOT
from canary.plan.cell import Cell
from canary.plan.matrix import matches, plan
from canary.plan.waves import control_of
from canary.targets.engine_plan import EngineBuild, EnginePlanner, port_names


def _data(**matrix: Any) -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((REPO_ROOT / "configs" / "cpu-default.yaml").read_text())
    data["matrix"].update(
        include=[], prefill_block_sizes=[128], topologies=["aggregated", "pd-nixl"], expectations=[], images=None
    )
    data["matrix"].pop("select", None)
    data["matrix"].update(matrix)
    data["images"] = {"baseline": data["images"]["baseline"]}
    return data


def _config(**matrix: Any) -> CanaryConfig:
    return validate_config(_data(**matrix), "test")


def _cells(config: CanaryConfig) -> dict[str, Cell]:
    return {c.id: c for c in plan(config).planned()}


def test_the_dimension_crosses_every_cell_and_names_it_in_the_id() -> None:
    cells = _cells(_config(prefix_caching=[True, False]))
    assert sorted(cells) == [
        "agg.cpu_attn.b128.pc-off.auto.v1.baseline",
        "agg.cpu_attn.b128.pc-on.auto.v1.baseline",
        "pd.cpu_attn.p128-d128.pc-off.auto.v1.baseline",
        "pd.cpu_attn.p128-d128.pc-on.auto.v1.baseline",
    ]
    on = cells["pd.cpu_attn.p128-d128.pc-on.auto.v1.baseline"]
    assert on.prefix_caching is True and on.axis_values()["prefix_caching"] == "true"
    # left unset, cells keep the ids they always had and the engine its default
    plain = _cells(_config())
    assert sorted(plain) == ["agg.cpu_attn.b128.auto.v1.baseline", "pd.cpu_attn.p128-d128.auto.v1.baseline"]
    assert all(c.prefix_caching is None and c.prefix_caching_args() == [] for c in plain.values())
    assert "prefix_caching" not in next(iter(plain.values())).axis_values()


def test_an_include_sets_it_per_cell_and_matches_select_by_it() -> None:
    include = {"backend": "CPU_ATTN", "prefill_block_size": 128, "decode_block_size": 128, "prefix_caching": False}
    data = _data(include=[include])
    data["matrix"]["expectations"] = [
        {"match": {"prefix_caching": False}, "expect": "check-fail", "reason": "a known prefix-caching-off bug"}
    ]
    cells = _cells(validate_config(data, "test"))
    off = cells["pd.cpu_attn.p128-d128.pc-off.auto.v1.baseline"]
    assert off.expect is not None and off.expect.reason.startswith("a known")
    default = cells["pd.cpu_attn.p128-d128.auto.v1.baseline"]
    assert default.expect is None  # the engine's default is not "off", nor "on"
    assert matches(CellMatch(prefix_caching=False), off) and not matches(CellMatch(prefix_caching=True), off)
    assert not matches(CellMatch(prefix_caching=True), default) and matches(CellMatch(), default)


def test_a_pd_cell_gets_the_control_of_its_own_caching() -> None:
    planned = list(_cells(_config(prefix_caching=[True, False])).values())
    for pair in (c for c in planned if c.topology == "pd-nixl"):
        control = control_of(pair, planned)
        assert control is not None and control.prefix_caching == pair.prefix_caching, pair.id


def test_every_engine_of_the_cell_is_asked_for_it(tmp_path: Path) -> None:
    config = _config(prefix_caching=[True, False])
    planner = EnginePlanner(config, cache_dir=tmp_path, cores=2, gpus_here=None)
    builds = {"baseline": EngineBuild(tmp_path / "python")}
    for cell in plan(config).planned():
        ports = {name: str(20000 + i) for i, name in enumerate(port_names(cell))}
        servers = planner.plan(cell, ports, builds, layout_root="/logs", dry_run=True).servers
        want = "--enable-prefix-caching" if cell.prefix_caching else "--no-enable-prefix-caching"
        engines = [s for s in servers if s.role in ("aggregated", "prefill", "decode")]
        assert engines and all(want in s.argv for s in engines), cell.id
        other = "--no-enable-prefix-caching" if cell.prefix_caching else "--enable-prefix-caching"
        assert all(other not in s.argv for s in engines), cell.id


@pytest.mark.parametrize(
    ("where", "key"),
    [("model", "models.0.extra_args"), ("target", "target.local.extra_args")],
)
def test_the_flag_in_extra_args_beside_the_dimension_is_refused_naming_it(where: str, key: str) -> None:
    data = _data(prefix_caching=[True])
    if where == "model":
        data["models"][0]["extra_args"] = ["--no-enable-prefix-caching"]
    else:
        data["target"]["local"] = {**data["target"].get("local", {}), "extra_args": ["--enable-prefix-caching"]}
    with pytest.raises(ConfigError, match=key.replace(".", r"\.") + ".*drop the flag"):
        validate_config(data, "test.yaml")
    data["matrix"].pop("prefix_caching")  # without the dimension, extra_args may say it (the engine's choice)
    validate_config(data, "test.yaml")


def test_duplicate_or_empty_values_are_refused() -> None:
    with pytest.raises(ConfigError, match="duplicate entries"):
        _config(prefix_caching=[True, True])
    with pytest.raises(ConfigError, match="an empty list plans nothing"):
        _config(prefix_caching=[])


def _metrics(**labels: str) -> str:
    fields = {"block_size": "128", "cache_dtype": "auto", "effective_attention_block_size": "128", **labels}
    text = ",".join(f'{k}="{v}"' for k, v in fields.items())
    return f"# TYPE vllm:cache_config_info gauge\nvllm:cache_config_info{{{text}}} 1.0\n"


def _observe(text: str) -> Observed:
    labels = cache_config(parse(text))
    return Observed(
        block_size=int(labels["block_size"]),
        effective_attention_block_size=int(labels["effective_attention_block_size"]),
        kv_cache_dtype=labels["cache_dtype"],
        prefix_caching=bool_label(labels.get("enable_prefix_caching")),
        has_log=False,
    )


def test_startup_fails_an_engine_that_runs_another_prefix_caching_than_asked() -> None:
    cells = _cells(_config(prefix_caching=[True, False]))
    off = cells["pd.cpu_attn.p128-d128.pc-off.auto.v1.baseline"]
    expected = expected_for(off, "decode")
    mismatches, missing = compare(expected, _observe(_metrics(enable_prefix_caching="True")))
    assert mismatches == ["enable_prefix_caching: asked False, runs True"] and "enable_prefix_caching" not in missing
    mismatches, missing = compare(expected, _observe(_metrics(enable_prefix_caching="False")))
    assert mismatches == [] and "enable_prefix_caching" not in missing
    # a label the engine does not export is missing evidence (invalid), never "verified"
    observed = _observe(_metrics())
    mismatches, missing = compare(expected, observed)
    assert mismatches == [] and missing_evidence(observed, missing) == ["enable_prefix_caching"]
    # a cell that leaves it to the engine does not judge it
    plain = _cells(_config())["pd.cpu_attn.p128-d128.auto.v1.baseline"]
    mismatches, missing = compare(expected_for(plain, "decode"), observed)
    assert mismatches == [] and missing_evidence(observed, missing) == []


def _delta(cache_hit: float) -> KvCounters:
    return KvCounters(
        bytes_transferred=1e6,
        transfers=4,
        failed_transfers=0,
        prompt_tokens=900,
        prompt_tokens_local_compute=0,
        prompt_tokens_external=900 - cache_hit,
        prompt_tokens_cache_hit=cache_hit,
        requests=4,
    )


def test_kv_transfer_gates_decodes_own_prefix_cache_against_what_was_asked() -> None:
    on_hit = prefix_cache_gate(True, _delta(256), 256)
    assert on_hit.passed and on_hit.name == "decode-prefix-cache-hit"
    assert not prefix_cache_gate(True, _delta(255), 256).passed  # less than a block: the path did not run
    assert not prefix_cache_gate(True, _delta(0), 256).passed
    off = prefix_cache_gate(False, _delta(0), 256)
    assert off.passed and off.name == "decode-prefix-cache-off"
    assert not prefix_cache_gate(False, _delta(16), 256).passed  # a cache it should not keep


def test_the_reuse_probe_spans_two_blocks_and_a_tail_where_the_model_takes_it() -> None:
    assert reuse_length(256, 2048) == 640
    assert reuse_length(16, 2048) == 40
    assert reuse_length(384, 2048) == 960
    assert reuse_length(1024, 2048) == 2048 - REUSE_TOKENS - 1  # capped by the model, still over one block
    assert reuse_length(1024, 1030) is None  # not even one block and a token fits
    assert reuse_ids([1, 2, 3], 7) == [1, 2, 3, 1, 2, 3, 1]
    assert reuse_ids(list(range(100)), 40) == list(range(40))


def _send(*tokens: tuple[int, float, int, float]) -> list[Position]:
    """A generation: per position the token taken, its logprob, and the runner-up with its logprob."""
    return [Position(token=t, logprob=lp, top={t: lp, r: rlp}) for t, lp, r, rlp in tokens]


def test_the_reuse_probe_must_answer_alike_when_decode_reuses_its_cached_prefix() -> None:
    same = _send((5, -0.1, 6, -2.0), (7, -0.2, 8, -3.0))
    assert reuse_output_gate([same, list(same)]).passed
    # another answer from the second position on, far from a tie: the tail decode pulled is not the prompt's
    wrong = _send((5, -0.1, 6, -2.0), (8, -0.3, 7, -2.5))
    changed = reuse_output_gate([same, wrong])
    assert not changed.passed and changed.name == "reuse-same-output" and "token 1: 7 -> 8" in changed.detail
    # both sends rank 7 and 8 within 0.02 nats: another summation order tipped a tie
    tie_a = _send((5, -0.1, 6, -2.0), (7, -0.690, 8, -0.696))
    tie_b = _send((5, -0.1, 6, -2.0), (8, -0.690, 7, -0.697))
    tipped = reuse_output_gate([tie_a, tie_b])
    assert tipped.passed and "near-tie" in tipped.detail
    unanswered = reuse_output_gate([same, None])
    assert not unanswered.passed and "no answer" in unanswered.detail  # missing evidence never passes


def test_a_decode_with_a_sliding_window_group_is_not_asked_for_a_prefix_hit() -> None:
    """Measured on the tiny Gemma-3 P/D pair with prefix caching on: decode served 0 prompt tokens from its own
    cache (NIXL sends a sliding group only the window's blocks, so no prefix is whole in every group)."""
    sliding = {"kv_cache_groups": [{"kind": "sliding"}, {"kind": "sliding"}, {"kind": "full"}]}
    why = sliding_window_decode("dense", sliding)  # the engine's record wins over the declared family
    assert why is not None and "2 sliding-window KV cache group(s)" in why
    assert sliding_window_decode("sliding-window", {"kv_cache_groups": [{"kind": "full"}]}) is None
    assert sliding_window_decode("sliding-window", None) is not None  # no record: the declared family
    assert sliding_window_decode("dense", None) is None
