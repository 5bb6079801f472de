"""The run's ETA (canary/run/eta.py): from the plan's per-cell estimates, corrected by this run's pace,
on every cell's progress line (`cell 3/10: ID [planned], ETA 04:12 (about 5 min left)`)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from canary.checks.estimate import check_seconds
from canary.config.load import load_config
from canary.judge.results import CellResult, CheckResult
from canary.paths import CONFIGS_DIR
from canary.plan.matrix import plan
from canary.run.eta import START_S, Eta, about
from tests.unit.run.test_cells import StandInTarget, _register_temp_checks


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _eta(clock: Clock) -> tuple[Eta, list[CellResult]]:
    config = load_config(CONFIGS_DIR / "cpu-default.yaml")
    cells = plan(config).cells
    eta = Eta.for_plan(cells, config, clock=clock, wall=lambda: 0.0)
    planned = [c for c in cells if c.status == "planned"]
    results = [CellResult(cell=c, verdict="pass", checks=[]) for c in planned]
    return eta, results


def test_before_any_cell_the_eta_is_the_plans_estimate() -> None:
    eta, results = _eta(Clock())
    config = load_config(CONFIGS_DIR / "cpu-default.yaml")
    planned = [r.cell for r in results]
    expected = sum(START_S + sum(check_seconds(c, config, planned=planned).values()) for c in planned)
    assert eta.remaining_s() == pytest.approx(expected) and expected > len(planned) * START_S
    assert re.fullmatch(r"ETA \d\d:\d\d \(about \d+(\.\d)? (s|min|h) left\)", eta.line())


def test_the_pace_of_the_cells_so_far_corrects_the_rest() -> None:
    clock = Clock()
    eta, results = _eta(clock)
    first = results[0]
    names = list(eta.checks[first.cell.id])
    ran = first.model_copy(update={"checks": [CheckResult(name=n, verdict="pass") for n in names]})
    before = eta.remaining_s()
    own = START_S + sum(eta.checks[first.cell.id].values())
    clock.now += 2 * own  # this machine is twice as slow as the estimate
    eta.cell_done(ran)
    assert eta.pace() == pytest.approx(2.0)
    assert eta.remaining_s() == pytest.approx(2 * (before - own))


def test_a_cell_that_did_not_start_counts_only_its_start() -> None:
    clock = Clock()
    eta, results = _eta(clock)
    clock.now += START_S
    eta.cell_done(results[0].model_copy(update={"checks": [CheckResult(name="startup", verdict="fail")]}))
    assert eta.pace() == pytest.approx(START_S / (START_S + eta.checks[results[0].cell.id].get("startup", 0.0)))


def test_durations_read_at_a_glance() -> None:
    assert [about(s) for s in (4, 44, 300, 5399, 7200)] == ["1 s", "40 s", "5 min", "90 min", "2.0 h"]


def test_every_planned_cells_progress_line_has_an_eta(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from canary.run.cells import execute

    _register_temp_checks(monkeypatch, "pass")
    config = load_config(CONFIGS_DIR / "cpu-default.yaml", ["matrix.expectations=[]"])
    lines: list[str] = []
    execute(config, plan(config), tmp_path / "run", target=StandInTarget(), progress=lines.append)
    starts = [line for line in lines if re.match(r"cell \d+/\d+: ", line) and "=>" not in line]
    assert len(starts) == len(plan(config).cells)
    for line in starts:
        assert (", ETA " in line) == ("[planned]" in line), line
