"""The GPU budget scheduler: GPUs per cell, packing into waves, the wall-time estimate, tonight's
cells of a rotating matrix, the rotation state file, and `canary plan`'s waves and refusal."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from canary.checks import estimate
from canary.checks.estimate import checks_by_cell
from canary.cli import main
from canary.config import CanaryConfig
from canary.config.load import validate_config
from canary.plan import waves
from canary.plan.cell import Cell
from canary.plan.matrix import plan
from canary.plan.rotation import RotationStateError, load_state, state_path
from canary.plan.waves import DEFAULT_MODEL, EstimateModel, ScheduleError

BASE: dict[str, Any] = {
    "version": 1,
    "name": "waves",
    "platform": "sm90",
    "models": [{"name": "m", "source": "org/m", "tensor_parallel_size": 1}],
    "images": {"baseline": {"ref": "vllm/vllm-openai:v0.33.0"}, "patched": {"ref": "example/vllm:patched"}},
    "matrix": {
        "attention_backends": ["FLASH_ATTN", "FLASHINFER"],
        "prefill_block_sizes": [64, 128],
        "decode_block_sizes": [64, 128],
        "runners": ["v1", "v2"],
        "topologies": ["aggregated", "pd-nixl"],
    },
    "checks": {
        "accuracy": {"limit": 100, "num_concurrent": 10, "max_gen_toks": 50},
        "parity": {"prompt_lengths": [8, 33], "block_relative": False, "max_tokens": 10},
        "throughput": {
            "num_requests": 90,
            "warmup_requests": 10,
            "concurrency": 10,
            "output_tokens": 100,
            "repeats": 2,
            "max_duration_s": 1000,
        },
        "kv_transfer": {"probe_requests": 2},
    },
    "target": {"kind": "kubernetes", "kubernetes": {"gpu_budget": 16, "typical_start_s": 600}},
}


def config(**kubernetes: Any) -> CanaryConfig:
    data = yaml.safe_load(yaml.safe_dump(BASE))
    data["target"]["kubernetes"].update(kubernetes)
    return validate_config(data, "waves test")


def planned(cfg: CanaryConfig) -> list[Cell]:
    return plan(cfg).planned()


def test_gpus_per_cell_follow_topology_and_tensor_parallelism() -> None:
    cfg = config()
    cells = planned(cfg)
    agg = next(c for c in cells if c.topology == "aggregated")
    pd = next(c for c in cells if c.topology == "pd-nixl")
    assert (waves.gpus_per_cell(agg, cfg), waves.gpus_per_cell(pd, cfg)) == (1, 2)
    data = yaml.safe_load(yaml.safe_dump(BASE))
    data["models"][0]["tensor_parallel_size"] = 8
    tp8 = validate_config(data, "tp8")
    cells = planned(tp8)  # a cell carries its roles' tensor-parallel sizes from the plan
    agg = next(c for c in cells if c.topology == "aggregated")
    pd = next(c for c in cells if c.topology == "pd-nixl")
    assert (waves.gpus_per_cell(agg, tp8), waves.gpus_per_cell(pd, tp8)) == (8, 16)


def test_gpus_per_cell_follow_each_roles_tensor_parallel_size() -> None:
    """A P/D shape (2p1d, 1p4d) holds prefill's plus decode's GPUs, each engine its own role's."""
    data = yaml.safe_load(yaml.safe_dump(BASE))
    data["matrix"]["prefill_tp_sizes"] = [1, 2]
    data["matrix"]["decode_tp_sizes"] = [1, 4]
    cfg = validate_config(data, "shapes")
    held = {c.id: waves.engine_gpus(c, cfg) for c in planned(cfg) if c.topology == "pd-nixl"}
    shapes = sorted((g["prefill"], g["decode"]) for g in held.values())
    assert sorted(set(shapes)) == [(1, 1), (1, 4), (2, 1), (2, 4)]
    assert {waves.gpus_per_cell(c, cfg) for c in planned(cfg) if c.tp_shape == "tp2p4d"} == {6}


def test_check_seconds_follow_the_config() -> None:
    cfg = config()
    pd = next(c for c in planned(cfg) if c.topology == "pd-nixl")
    m = EstimateModel(token_s=0.01, request_s=0.5)
    got = estimate.check_seconds(pd, cfg, m)
    assert got["kv_transfer"] == pytest.approx(2 * (0.5 + 4 * 0.01), abs=0.05)  # rounded to 0.1 s
    # P/D with its control planned: one wave (8 in flight) of 2 generations and 2 re-scorings, 4 /tokenize
    # requests (canary.checks.parity.estimate.parity_phases; tests/unit/checks/parity/test_parity_estimate.py)
    assert got["parity"] == pytest.approx((0.5 + 10 * 0.01) + (0.5 + 0.01) + 4 * 0.02, abs=0.05)
    assert got["accuracy"] == pytest.approx(10 * (0.5 + 50 * 0.01))  # 100 questions, 10 at a time
    assert got["throughput"] == pytest.approx(2 * 10 * (0.5 + 100 * 0.01))  # 2 repeats x 10 rounds
    agg = next(c for c in planned(cfg) if c.topology == "aggregated")
    assert "kv_transfer" not in estimate.check_seconds(agg, cfg, m)
    data = yaml.safe_load(yaml.safe_dump(BASE))
    data["checks"]["throughput"]["max_duration_s"] = 5
    data["checks"]["accuracy"]["enabled"] = False
    capped = estimate.check_seconds(pd, validate_config(data, "capped"), m)
    assert capped["throughput"] == 2 * 5 and "accuracy" not in capped


def test_pack_keeps_every_wave_inside_the_budget_and_the_order() -> None:
    cfg = config()
    cells = planned(cfg)
    for budget in (2, 3, 5, 16):
        packed = waves.pack(cells, cfg, budget, checks_by_cell(cells, cells, cfg))
        assert all(w.gpus <= budget for w in packed)
        assert sum(len(w.cells) for w in packed) == len(cells)
        flat = [c.id for w in packed for c in sorted(w.cells, key=lambda c: [x.id for x in cells].index(c.id))]
        assert flat == [c.id for c in cells]  # next fit: the given order survives
        for wave in packed:  # aggregated controls run before the P/D cells of their wave
            topologies = [c.topology for c in wave.cells]
            assert topologies == sorted(topologies, key=lambda t: t != "aggregated")
    # 1-GPU and 2-GPU cells: next fit wastes at most one GPU per wave
    assert all(w.gpus >= 15 for w in waves.pack(cells, cfg, 16, checks_by_cell(cells, cells, cfg))[:-1])


def test_a_cell_bigger_than_the_budget_is_refused_with_the_keys() -> None:
    cfg = config()
    pd = next(c for c in planned(cfg) if c.topology == "pd-nixl")
    with pytest.raises(ScheduleError, match=r"needs 2 GPUs, more than target\.kubernetes\.gpu_budget \(1\)"):
        waves.pack([pd], cfg, 1, checks_by_cell([pd], [pd], cfg))


def test_wave_estimate_is_start_plus_sequential_checks_plus_teardown() -> None:
    cfg = config(typical_start_s=300, ready_timeout_s=1200)
    cells = planned(cfg)[:3]
    m = EstimateModel(deploy_s=10, teardown_s=20)
    (wave,) = waves.pack(cells, cfg, 16, checks_by_cell(cells, cells, cfg, m), m)
    checks = sum(estimate.cell_check_seconds(c, cfg, m) for c in cells)
    assert wave.typical_s == pytest.approx(10 + 300 + checks + 20, abs=0.1)
    assert wave.worst_s == pytest.approx(10 + 1200 + checks + 20, abs=0.1)


def test_everything_runs_when_it_fits_high_risk_first_controls_before_their_pd() -> None:
    cfg = config(job_deadline_s=10**6)
    cells = planned(cfg)
    night = waves.select_night(cells, cfg, {}, checks_by_cell)
    assert not night.deferred and sorted(c.id for c in night.cells) == sorted(c.id for c in cells)
    order = [c.id for c in night.cells]
    risky = [c for c in cells if c.high_risk]
    assert {c.id for c in night.waves[0].cells} & {c.id for c in risky}
    for cell in cells:
        control = waves.control_of(cell, cells)
        if control is not None:
            assert order.index(control.id) < order.index(cell.id)


def test_rotation_runs_nightly_cells_and_the_stalest_others_within_the_window() -> None:
    every = [{"backend": "FLASHINFER", "prefill_block_size": 128, "decode_block_size": 128, "runner": "v2"}]
    cfg = config(job_deadline_s=7200, rotation={"every_night": every})
    cells = planned(cfg)
    night = waves.select_night(cells, cfg, {}, checks_by_cell)
    assert night.deferred, "the window must be too small for the whole matrix"
    assert night.typical_s <= 7200 * DEFAULT_MODEL.fill_ratio
    ids = {c.id for c in night.cells}
    nightly = [c for c in cells if waves.nightly(c, cfg.target.kubernetes.rotation.every_night)]
    assert nightly and all(c.id in ids for c in nightly)
    for cell in nightly:  # with their controls
        control = waves.control_of(cell, cells)
        assert control is None or control.id in ids

    # Next night: the cells checked tonight are the freshest, so the others go first. A cell of
    # last night runs again only when it runs every night or is the control of a P/D cell tonight.
    now = datetime(2026, 11, 30, 2, 0, tzinfo=UTC)
    seen = {c.id: now for c in night.cells}
    second = waves.select_night(cells, cfg, seen, checks_by_cell)
    second_ids = {c.id for c in second.cells}
    controls = {ctl.id for c in second.cells if (ctl := waves.control_of(c, cells)) is not None}
    nightly_ids = {c.id for c in nightly}
    unchecked = {c.id for c in cells} - ids
    assert second_ids - ids, "the rotation must move on to cells not checked yet"
    # stalest first: a checked cell comes back (other than nightly or as a control) only after
    # every unchecked one got its turn
    assert unchecked <= second_ids or (second_ids & ids) <= nightly_ids | controls
    assert unchecked <= second_ids, "two nights cover this matrix (the window holds over half of it)"
    # the oldest check goes before a newer one
    old = cells[-1]
    seen_all = {c.id: now for c in cells} | {old.id: now - timedelta(days=9)}
    third = waves.select_night(cells, cfg, seen_all, checks_by_cell)
    assert old.id in {c.id for c in third.cells}


def test_a_nightly_set_that_cannot_fit_is_refused_naming_the_keys() -> None:
    cfg = config(job_deadline_s=1800)
    with pytest.raises(ScheduleError) as caught:
        waves.select_night(planned(cfg), cfg, {}, checks_by_cell)
    message = str(caught.value)
    for key in (
        "target.kubernetes.gpu_budget",
        "target.kubernetes.rotation.every_night",
        "matrix.reduction",
        "target.kubernetes.job_deadline_s",
    ):
        assert key in message
    assert caught.value.exit_code == 2


def test_rotation_state_roundtrip_and_errors(tmp_path: Path) -> None:
    cfg = config(rotation={"state_file": str(tmp_path / "state" / "rot.json")})
    state = load_state(cfg)
    assert state.cells == {} and state.path == tmp_path / "state" / "rot.json"
    when = datetime(2026, 11, 30, 3, 4, 5, tzinfo=UTC)
    state.record("agg.x", when, "pass")
    again = load_state(cfg)
    assert again.last_checked() == {"agg.x": when}
    assert again.cells["agg.x"].verdict == "pass"
    assert [p.name for p in (tmp_path / "state").iterdir()] == ["rot.json"], "no temp file left behind"
    (tmp_path / "state" / "rot.json").write_text(json.dumps({"version": 1, "config": "other", "cells": {}}))
    with pytest.raises(RotationStateError, match="rotation state of config 'other'"):
        load_state(cfg)
    (tmp_path / "state" / "rot.json").write_text("{not json")
    with pytest.raises(RotationStateError, match="cannot read the rotation state"):
        load_state(cfg)
    assert state_path(config(), tmp_path) == tmp_path / "rotation-waves.json"


def _write(tmp_path: Path, **kubernetes: Any) -> Path:
    data = yaml.safe_load(yaml.safe_dump(BASE))
    data["target"]["kubernetes"].update(kubernetes)
    data["export"] = {"results_dir": str(tmp_path / "results")}
    path = tmp_path / "waves.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_canary_plan_prints_gpus_waves_and_the_estimate(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _write(tmp_path, job_deadline_s=7200)
    assert main(["plan", str(path)]) == 0
    out = " ".join(capsys.readouterr().out.split())  # the console wraps its lines at the terminal's width
    assert "GPUs" in out and "waves within 16 GPUs" in out
    assert "estimated wall time" in out and "job deadline 2.00 h" in out
    assert "rotation:" in out
    assert main(["plan", str(path), "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    schedule = payload["schedule"]
    assert schedule["gpu_budget"] == 16 and schedule["job_deadline_s"] == 7200
    assert set(schedule["gpus_per_cell"].values()) == {1, 2}
    assert all(sum(schedule["gpus_per_cell"][c] for c in w["cells"]) == w["gpus"] <= 16 for w in schedule["waves"])
    assert schedule["estimated_s"] <= 7200


def test_canary_plan_refuses_a_plan_past_the_deadline(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _write(tmp_path, job_deadline_s=1800)
    assert main(["plan", str(path)]) == 2
    err = capsys.readouterr().err
    assert "target.kubernetes.job_deadline_s" in err and "target.kubernetes.gpu_budget" in err


@pytest.mark.parametrize("name", ["h200-mrv2-pd.yaml", "deepseek-v4.yaml"])
def test_the_shipped_gpu_configs_fit_a_night(name: str) -> None:
    """The GPU configs as shipped: waves inside their budget (16 H200s for h200-mrv2-pd), tonight's
    estimate inside the CronJob deadline, the nightly cells and their controls included."""
    from canary.config.load import load_config
    from canary.paths import CONFIGS_DIR

    cfg = load_config(CONFIGS_DIR / name)
    settings = cfg.target.kubernetes
    assert settings.gpu_budget is not None
    if name == "h200-mrv2-pd.yaml":
        assert settings.gpu_budget == 16
    cells = planned(cfg)
    night = waves.select_night(cells, cfg, {}, checks_by_cell)
    assert night.typical_s <= settings.job_deadline_s * DEFAULT_MODEL.fill_ratio
    assert 0 < night.peak_gpus <= settings.gpu_budget
    ids = {c.id for c in night.cells}
    for cell in cells:
        if waves.nightly(cell, settings.rotation.every_night):
            control = waves.control_of(cell, cells)
            assert cell.id in ids and (control is None or control.id in ids)
    assert len(ids) + len(night.deferred) == len(cells)
