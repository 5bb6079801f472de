"""canary.run.held: a baseline deployment kept frozen from its cell to a later cell's paired check.

The deployments are STAND-IN servers (tests/support/scripted_server.py, real HTTP in their own
processes, not vLLM) and freezing is real: the stand-in target SIGSTOPs a server's process, so a
frozen one does not answer and takes no CPU until it is thawed. The real local target's freeze on a
vLLM P/D pair is in tests/integration/test_freeze.py.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from canary.checks import base as checks_base
from canary.checks.throughput.paired import HELD_KEY, counterparts_in_order
from canary.config import CanaryConfig
from canary.config.load import load_config
from canary.judge.results import CheckResult
from canary.paths import CONFIGS_DIR
from canary.plan.cell import Cell
from canary.plan.matrix import plan
from canary.run import held as held_module
from canary.run.cells import execute
from canary.run.held import HeldDeployments
from canary.targets.base import Deployment, Freezes
from canary.targets.readiness import probe
from tests.support.scripted_server import ScriptedServer

BASELINE = "pd.cpu_attn.p128-d128.auto.v1.baseline"
CANDIDATE = "pd.cpu_attn.p128-d128.auto.v1.kernel32"


def _config(*overrides: str) -> CanaryConfig:
    return load_config(CONFIGS_DIR / "cpu-default.yaml", list(overrides))


def _cell(config: CanaryConfig, cell_id: str) -> Cell:
    return next(c for c in plan(config).cells if c.id == cell_id)


def _state(pid: int, want: str | None = None, timeout_s: float = 5.0) -> str:
    """The process state letter; with `want`, polled until it shows (a signal reaches a process running on
    another core asynchronously: read at once on a busy machine, a stopped process can still say R)."""
    deadline = time.monotonic() + timeout_s
    while True:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        if want is None or state == want or time.monotonic() > deadline:
            return state
        time.sleep(0.02)


class FreezingTarget:
    """Deploys a cell as one scripted server; freezes it with SIGSTOP, thaws it with SIGCONT
    (`thaw_works=False`: a thaw that leaves it stopped, a deployment that does not come back)."""

    kind = "stand-in"

    def __init__(self, thaw_works: bool = True, can_freeze: bool = True, thaw_raises: bool = False) -> None:
        self.thaw_works = thaw_works
        self.thaw_raises = thaw_raises
        self.can_freeze = can_freeze
        self.events: list[str] = []
        self.pids: dict[str, int] = {}

    @contextmanager
    def deploy(self, cell: Cell, log_dir: Path) -> Iterator[Deployment]:
        self.events.append(f"deploy {cell.id}")
        with ScriptedServer(model=cell.model, record=False) as server:
            assert server.proc is not None
            self.pids[cell.id] = server.proc.pid
            try:
                yield Deployment(cell=cell, base_url=server.url, served_model=cell.model, started=True)
            finally:
                os.killpg(server.proc.pid, signal.SIGCONT)  # as processes.stop does: a frozen one can stop
                self.events.append(f"stop {cell.id}")

    def describe(self, cell: Cell) -> dict[str, object]:
        return {}

    def freeze(self, deployment: Deployment) -> bool:
        if not self.can_freeze:
            return False
        os.killpg(self.pids[deployment.cell.id], signal.SIGSTOP)
        self.events.append(f"freeze {deployment.cell.id}")
        return True

    def thaw(self, deployment: Deployment) -> None:
        self.events.append(f"thaw {deployment.cell.id}")
        if self.thaw_raises:
            raise OSError("cannot signal the group")
        if self.thaw_works:
            os.killpg(self.pids[deployment.cell.id], signal.SIGCONT)


@contextmanager
def _after_the_baseline_cell(
    target: FreezingTarget, tmp_path: Path, progress: Callable[[str], None] = lambda _: None
) -> Iterator[tuple[CanaryConfig, HeldDeployments]]:
    """A run's held deployments of cpu-default once its baseline P/D p128 cell has run its (empty) checks."""
    config = _config()
    with HeldDeployments(target, config, plan(config).cells, progress) as held:
        with held.deploy_cell(_cell(config, BASELINE), tmp_path):
            pass
        yield config, held


def test_cpu_default_holds_the_kernel32_pairs_baseline_for_its_paired_check() -> None:
    config = _config()
    cells = plan(config).cells
    assert counterparts_in_order(config, cells) == {BASELINE: {CANDIDATE}}
    off = _config("checks.throughput.paired.enabled=false")
    assert counterparts_in_order(off, plan(off).cells) == {}
    no_load = _config("checks.throughput.enabled=false")
    assert counterparts_in_order(no_load, plan(no_load).cells) == {}
    only_candidate = [c for c in cells if c.id == CANDIDATE]  # an --only run of the candidate: nothing to keep
    assert counterparts_in_order(config, only_candidate) == {}
    backwards = [c for c in cells if c.id == CANDIDATE] + [c for c in cells if c.id == BASELINE]
    assert counterparts_in_order(config, backwards) == {}, "a counterpart after its candidate"


def test_the_baseline_is_frozen_between_its_cell_and_the_paired_check(tmp_path: Path) -> None:
    config = _config()
    target = FreezingTarget()
    assert isinstance(target, Freezes)
    with HeldDeployments(target, config, plan(config).cells, lambda _: None) as held:
        with held.deploy_cell(_cell(config, BASELINE), tmp_path) as own:
            assert probe(own.base_url, own.served_model).ready
        assert held.held == [BASELINE]
        pid = target.pids[BASELINE]
        assert _state(pid, want="T") == "T", "the kept deployment runs on"
        assert not probe(own.base_url, own.served_model, timeout_s=0.5).ready
        held.finished(BASELINE)
        with held.deploy(_cell(config, BASELINE), tmp_path / "paired") as thawed:
            assert thawed is own, "the check got another deployment than the one kept"
            assert probe(thawed.base_url, thawed.served_model).ready
            note = thawed.evidence[HELD_KEY]
            assert isinstance(note, dict) and note["from_cell"] == BASELINE and "ready_after_thaw_s" in note
        assert held.held == []
    assert target.events == [f"deploy {BASELINE}", f"freeze {BASELINE}", f"thaw {BASELINE}", f"stop {BASELINE}"]


def test_a_held_deployment_that_does_not_answer_is_replaced(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(held_module, "THAW_READY_S", 1.0)
    target = FreezingTarget(thaw_works=False)
    messages: list[str] = []
    with (
        _after_the_baseline_cell(target, tmp_path, messages.append) as (config, held),
        held.deploy(_cell(config, BASELINE), tmp_path / "paired") as fresh,
    ):
        assert probe(fresh.base_url, fresh.served_model).ready
        note = fresh.evidence[HELD_KEY]
        assert isinstance(note, dict) and "deployed afresh" in str(note["discarded"])
    assert target.events == [
        f"deploy {BASELINE}",
        f"freeze {BASELINE}",
        f"thaw {BASELINE}",
        f"stop {BASELINE}",
        f"deploy {BASELINE}",
        f"stop {BASELINE}",
    ]
    assert any("deployed afresh" in m for m in messages)


def test_a_thaw_that_raises_still_stops_the_held_deployment(tmp_path: Path) -> None:
    target = FreezingTarget(thaw_raises=True)
    with _after_the_baseline_cell(target, tmp_path) as (config, held):
        with pytest.raises(OSError, match="cannot signal"), held.deploy(_cell(config, BASELINE), tmp_path / "p"):
            pass
        assert target.events[-1] == f"stop {BASELINE}", "a held deployment no one holds any more ran on"


def test_a_held_deployment_nobody_used_stops_after_the_last_cell_that_wanted_it(tmp_path: Path) -> None:
    target = FreezingTarget()
    with _after_the_baseline_cell(target, tmp_path) as (_, held):
        held.finished(BASELINE)
        held.finished("agg.cpu_attn.b128.auto.v1.kernel32")
        assert held.held == [BASELINE]
        held.finished(CANDIDATE)  # e.g. its throughput failed, so no paired check asked
        assert held.held == []
        assert target.events[-1] == f"stop {BASELINE}"


def test_a_cell_that_raises_is_stopped_not_kept_and_close_stops_the_rest(tmp_path: Path) -> None:
    config = _config()
    target = FreezingTarget()
    with (
        pytest.raises(RuntimeError, match="check crashed"),
        HeldDeployments(target, config, plan(config).cells, lambda _: None) as held,
        held.deploy_cell(_cell(config, BASELINE), tmp_path),
    ):
        raise RuntimeError("check crashed")
    assert target.events == [f"deploy {BASELINE}", f"stop {BASELINE}"]
    target = FreezingTarget()
    with _after_the_baseline_cell(target, tmp_path) as (_, held):
        pid = target.pids[BASELINE]
        assert held.held == [BASELINE]
    assert held.held == [] and target.events[-1] == f"stop {BASELINE}"
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_a_target_that_cannot_freeze_stops_the_cell_as_before(tmp_path: Path) -> None:
    target = FreezingTarget(can_freeze=False)
    with _after_the_baseline_cell(target, tmp_path) as (_, held):
        assert held.held == [] and target.events == [f"deploy {BASELINE}", f"stop {BASELINE}"]


def test_a_run_deploys_the_baseline_once_and_its_paired_check_gets_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through the runner: the candidate's throughput check (a stand-in that deploys the counterpart as the
    paired check does) gets the baseline cell's own deployment, and every deployment is stopped."""
    config = _config("matrix.expectations=[]")
    got: dict[str, Deployment] = {}
    own: dict[str, Deployment] = {}

    def startup(ctx: checks_base.CheckContext) -> CheckResult:
        own[ctx.cell.id] = ctx.deployment
        return CheckResult(name="startup", verdict="pass", summary="up")

    def throughput(ctx: checks_base.CheckContext) -> CheckResult:
        counterpart = ctx.baseline_cell()
        if ctx.cell.id == CANDIDATE and counterpart is not None and ctx.deploy is not None:
            with ctx.deploy(counterpart, ctx.cell_dir / "paired") as deployment:
                assert probe(deployment.base_url, deployment.served_model).ready
                got[ctx.cell.id] = deployment
        return CheckResult(name="throughput", verdict="pass", summary="measured")

    import canary.run.cells

    monkeypatch.setattr(canary.run.cells, "registered", lambda: {"startup": startup, "throughput": throughput})
    target = FreezingTarget()
    run = execute(config, plan(config), tmp_path / "run", target=target, progress=lambda _: None)
    assert run.ok
    assert got[CANDIDATE] is own[BASELINE]
    assert target.events.count(f"deploy {BASELINE}") == 1
    deployed = [e.split()[1] for e in target.events if e.startswith("deploy")]
    stopped = [e.split()[1] for e in target.events if e.startswith("stop")]
    assert sorted(deployed) == sorted(stopped)
    assert target.events.index(f"stop {BASELINE}") > target.events.index(f"deploy {CANDIDATE}")
