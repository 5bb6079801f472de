"""checks.throughput.paired end to end against STAND-IN servers (tests/support/scripted_server.py, not
vLLM): the throughput check deploys the baseline counterpart through CheckContext.deploy, measures both
in ABBA windows with the real load client, and judges the ratio. Equal scripted speeds pass, a candidate
scripted 2.3x slower regresses; every deployment the check made is stopped, also when a window raises."""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from canary.checks.base import CheckContext
from canary.checks.throughput import paired
from canary.checks.throughput.check import build_spec, throughput_check
from canary.config import CanaryConfig
from canary.config.load import load_config
from canary.judge.results import CheckResult
from canary.load.launch import LoadResult
from canary.load.workload import WorkloadSpec
from canary.paths import REPO_ROOT
from canary.plan.cell import Cell
from canary.plan.matrix import plan
from canary.targets.base import Deployment, ServerInfo
from tests.support.scripted_server import ScriptedServer

TTFT_S = 0.02
FAST_ITL_S, SLOW_ITL_S = 0.01, 0.025  # 16 tokens: 0.18 s vs 0.42 s a request, ratio 0.43

OVERRIDES = [
    "checks.throughput.output_tokens=16",
    "checks.throughput.num_requests=8",
    "checks.throughput.warmup_requests=1",
    "checks.throughput.max_foreign_cpu_cores=null",  # the stand-ins measure the client, not the machine
    "checks.throughput.max_client_lag_p99_ms=2000",
    "checks.throughput.paired.pairs=4",
    "checks.throughput.paired.requests_per_window=16",
    # the margin of a stand-in on a machine other tests load: one window in a few runs 20% off (seen)
    "checks.throughput.paired.margin=0.3",
    "checks.throughput.paired.warmup_requests=1",
]


def _config(*extra: str) -> CanaryConfig:
    return load_config(REPO_ROOT / "configs/paired.yaml", [*OVERRIDES, *extra])


def _cells(config: CanaryConfig) -> dict[str, Cell]:
    return {c.image: c for c in plan(config).cells}


def _deployment(cell: Cell, server: ScriptedServer) -> Deployment:
    assert server.proc is not None
    info = ServerInfo(role="router", base_url=server.url, pid=server.proc.pid)
    return Deployment(cell=cell, base_url=server.url, served_model=server.model, servers={"router": info}, started=True)


class StandinTarget:
    """Deploys a cell as one scripted server whose inter-token latency depends on the cell's image."""

    def __init__(self, itl_by_image: dict[str, float]) -> None:
        self.itl_by_image = itl_by_image
        self.servers: list[ScriptedServer] = []
        self.deployed: list[str] = []

    @contextmanager
    def deploy(self, cell: Cell, log_dir: Path) -> Iterator[Deployment]:
        self.deployed.append(cell.id)
        with ScriptedServer(ttft_s=TTFT_S, itl_s=self.itl_by_image[cell.image], model="tiny", record=False) as server:
            self.servers.append(server)
            yield _deployment(cell, server)


def _run_check(tmp_path: Path, candidate_itl: float, *extra: str) -> tuple[CheckResult, StandinTarget]:
    config = _config(*extra)
    cells = _cells(config)
    target = StandinTarget({"baseline": FAST_ITL_S, "candidate": candidate_itl})
    with target.deploy(cells["candidate"], tmp_path / "logs") as deployment:
        ctx = CheckContext(
            cell=cells["candidate"], deployment=deployment, config=config, cell_dir=tmp_path, deploy=target.deploy
        )
        assert paired.applies(ctx)
        result = throughput_check(ctx)
    assert all(s.proc is not None and s.proc.poll() is not None for s in target.servers)  # all stopped
    return result, target


def test_equal_standins_pass(tmp_path: Path) -> None:
    result, target = _run_check(tmp_path, FAST_ITL_S)
    block = result.evidence["paired"]
    assert target.deployed == ["pd.cpu_attn.p128-d128.auto.v1.candidate", "pd.cpu_attn.p128-d128.auto.v1.baseline"]
    assert [(w["pair"], w["arm"]) for w in block["windows"]] == [
        (0, "baseline"), (0, "candidate"), (1, "candidate"), (1, "baseline"),
        (2, "baseline"), (2, "candidate"), (3, "candidate"), (3, "baseline"),
    ]  # fmt: skip
    assert block["verdict"]["outcome"] == "pass", result.summary
    assert 0.7 <= result.metrics["paired_ratio_low"] <= result.metrics["paired_ratio"] <= 1.2
    assert result.verdict == "pass"
    assert not any(g.name.startswith("regression-") for g in result.gates)  # paired replaces the unpaired gate
    assert "paired candidate/baseline" in result.summary


def test_a_slower_candidate_standin_regresses(tmp_path: Path) -> None:
    # a 2.3x slower candidate: four pairs tell it, also on a loaded machine (two were inconclusive there)
    result, _ = _run_check(tmp_path, SLOW_ITL_S, "checks.throughput.paired.pairs=4")
    assert result.evidence["paired"]["verdict"]["outcome"] == "regress", result.summary
    assert result.metrics["paired_ratio_high"] < 0.7 and 0.3 < result.metrics["paired_ratio"] < 0.6
    assert result.verdict == "fail"
    gate = next(g for g in result.gates if g.name == "paired-requests_per_s")
    assert not gate.passed and gate.observed == pytest.approx(result.metrics["paired_ratio"])


class RecordingTarget:
    """Deploys nothing real: records which cells were entered and left."""

    def __init__(self) -> None:
        self.events: list[str] = []

    @contextmanager
    def deploy(self, cell: Cell, log_dir: Path) -> Iterator[Deployment]:
        self.events.append(f"up {cell.image}")
        try:
            yield Deployment(cell=cell, base_url=f"http://127.0.0.1:9/{cell.image}", served_model="tiny", started=True)
        finally:
            self.events.append(f"down {cell.image}")


def _ctx(tmp_path: Path, target: RecordingTarget, *extra: str) -> CheckContext:
    config = _config(*extra)
    cell = _cells(config)["candidate"]
    deployment = Deployment(cell=cell, base_url="http://127.0.0.1:9/own", served_model="tiny", started=True)
    return CheckContext(cell=cell, deployment=deployment, config=config, cell_dir=tmp_path, deploy=target.deploy)


def test_an_interrupted_window_still_stops_what_the_check_deployed(tmp_path: Path) -> None:
    target = RecordingTarget()
    ctx = _ctx(tmp_path, target, "checks.throughput.paired.redeploy_rounds=2")

    def interrupted(spec: WorkloadSpec, work_dir: Path, name: str) -> LoadResult:
        raise KeyboardInterrupt

    base = build_spec(ctx.config.checks.throughput, ctx.deployment)
    with pytest.raises(KeyboardInterrupt):
        paired.add_paired(ctx, base, CheckResult(name="throughput", verdict="pass", summary="x"), load=interrupted)
    assert target.events == ["up baseline", "down baseline"]


def test_redeploy_rounds_deploy_both_cells_afresh_and_judge_over_rounds(tmp_path: Path) -> None:
    target = RecordingTarget()
    ctx = _ctx(tmp_path, target, "checks.throughput.paired.redeploy_rounds=3")
    speed = {"own": 10.0, "baseline": 10.0, "candidate": 7.0}  # round 1 measures the cell's own deployment
    seen: list[str] = []

    def scripted(spec: WorkloadSpec, work_dir: Path, name: str) -> LoadResult:
        arm = spec.base_url.rsplit("/", 1)[1]
        seen.append(f"{work_dir.name}/{name}")
        value = speed[arm] * (1.0 + 0.01 * len(seen) % 3)
        metrics = {"requests_per_s": value, "requests_total": 12.0, "requests_failed": 0.0}
        return LoadResult(spec, [], None, "done", 0, 0, 1, metrics=metrics)  # type: ignore[arg-type]

    result = CheckResult(name="throughput", verdict="pass", summary="x")
    paired.add_paired(ctx, build_spec(ctx.config.checks.throughput, ctx.deployment), result, load=scripted)
    assert target.events == [
        "up baseline", "down baseline",
        "up candidate", "up baseline", "down baseline", "down candidate",
        "up candidate", "up baseline", "down baseline", "down candidate",
    ]  # fmt: skip
    assert seen[:2] == ["round-1/warm-baseline", "round-1/pair-0-baseline"]
    verdict = result.evidence["paired"]["verdict"]
    assert verdict["rounds"] == 3 and verdict["degrees_of_freedom"] == 2
    # round 1 compares the own deployment (10) with the baseline (10), rounds 2-3 the fresh candidate (7)
    assert verdict["round_log_ratios"][0] == pytest.approx(0.0, abs=0.03)
    assert result.metrics["paired_ratio"] == pytest.approx(0.7 ** (2 / 3), rel=0.03)


def test_a_fresh_candidate_is_deployed_and_warmed_like_the_baseline(tmp_path: Path) -> None:
    target = RecordingTarget()
    ctx = _ctx(tmp_path, target, "checks.throughput.paired.fresh_candidate=true")
    seen: list[str] = []

    def scripted(spec: WorkloadSpec, work_dir: Path, name: str) -> LoadResult:
        seen.append(f"{spec.base_url.rsplit('/', 1)[1]}:{name}")
        metrics = {"requests_per_s": 10.0 + 0.01 * (len(seen) % 2), "requests_total": 12.0, "requests_failed": 0.0}
        return LoadResult(spec, [], None, "done", 0, 0, 1, metrics=metrics)  # type: ignore[arg-type]

    result = CheckResult(name="throughput", verdict="pass", summary="x")
    paired.add_paired(ctx, build_spec(ctx.config.checks.throughput, ctx.deployment), result, load=scripted)
    assert target.events == ["up candidate", "up baseline", "down baseline", "down candidate"]
    assert seen[:2] == ["candidate:warm-candidate", "baseline:warm-baseline"]  # both arms start alike
    assert not any(s.startswith("own:") for s in seen)  # the cell's own deployment is not measured
    assert result.evidence["paired"]["verdict"]["outcome"] == "pass"


def test_only_the_chosen_cells_are_paired(tmp_path: Path) -> None:
    target = RecordingTarget()
    assert paired.applies(_ctx(tmp_path, target))  # empty list: every candidate cell with a counterpart
    assert paired.applies(_ctx(tmp_path, target, "checks.throughput.paired.cells=[pd.cpu_attn.p128]"))
    assert not paired.applies(_ctx(tmp_path, target, "checks.throughput.paired.cells=[agg.]"))


def _noisy(noise: float, seen: list[str]) -> paired.LoadFn:
    """Scripted windows: the candidate at 0.9 of the baseline, each pair's ratio `noise` above or below it in turn."""

    def scripted(spec: WorkloadSpec, work_dir: Path, name: str) -> LoadResult:
        seen.append(name)
        value = 10.0
        if spec.base_url.endswith("/own") and name.startswith("pair-"):
            pair = int(name.split("-")[1])
            value = 9.0 * math.exp(noise if pair % 4 in (0, 3) else -noise)
        metrics = {"requests_per_s": value, "requests_total": 12.0, "requests_failed": 0.0}
        return LoadResult(spec, [], None, "done", 0, 0, 1, metrics=metrics)  # type: ignore[arg-type]

    return scripted


@pytest.mark.parametrize(
    ("noise", "measured", "outcome"),
    [
        (0.0, 4, "pass"),  # the first look decides: no more pairs
        (0.12, 8, "pass"),  # the first look is inconclusive, the second decides
        (1.0, 12, "inconclusive"),  # never decided: stops at max_pairs
    ],
)
def test_a_sequential_check_adds_pairs_only_while_inconclusive(
    tmp_path: Path, noise: float, measured: int, outcome: str
) -> None:
    target = RecordingTarget()
    ctx = _ctx(tmp_path, target, "checks.throughput.paired.max_pairs=12", "checks.throughput.paired.trim=0")
    seen: list[str] = []
    result = CheckResult(name="throughput", verdict="pass", summary="x")
    paired.add_paired(ctx, build_spec(ctx.config.checks.throughput, ctx.deployment), result, load=_noisy(noise, seen))
    block = result.evidence["paired"]
    assert block["looks_planned"] == 3 and block["pairs_measured"] == measured
    assert seen.count("warm-baseline") == 1  # one baseline deployment, warmed once, for every look
    assert seen[-2:] in ([f"pair-{measured - 1}-baseline", f"pair-{measured - 1}-candidate"],
                         [f"pair-{measured - 1}-candidate", f"pair-{measured - 1}-baseline"])  # fmt: skip
    verdict = block["verdict"]
    assert verdict["outcome"] == outcome and verdict["pairs"] == measured
    assert verdict["look_confidence"] == pytest.approx(1 - 0.05 / 3)
    assert "over up to 3 looks, 98.3% each" in result.summary
    assert target.events == ["up baseline", "down baseline"]


def test_sequential_settings_that_cannot_work_are_refused() -> None:
    from canary.errors import ConfigError

    with pytest.raises(ConfigError, match="max_pairs"):
        _config("checks.throughput.paired.max_pairs=2")  # below pairs (4)
    with pytest.raises(ConfigError, match="redeploy_rounds 1"):
        _config("checks.throughput.paired.max_pairs=8", "checks.throughput.paired.redeploy_rounds=2")
    assert _config("checks.throughput.paired.max_pairs=10").checks.throughput.paired.looks == 3
    assert _config().checks.throughput.paired.looks == 1
