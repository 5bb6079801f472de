"""What a person watching a run reads equals what the run records: each cell's last progress line
carries the verdict of results.json, and each check line the check's recorded verdict.

The throughput check runs for real (locust in a subprocess) against the scripted stand-in server
(tests/support/scripted_server.py); the target is a stand-in that points each cell at it, and the
result files are written by the run's own writer. A run once printed `throughput -> fail` and
`=> FAIL` for a cell whose recorded verdict was `invalid`: its per-request tests were inconclusive.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from canary.config.load import load_config
from canary.judge.results import CheckResult
from canary.paths import CONFIGS_DIR
from canary.plan.cell import Cell
from canary.plan.matrix import plan
from canary.run.cells import execute
from canary.run.orchestrate import write_results
from canary.targets.base import Deployment
from tests.support.crafted import crafted_throughput
from tests.support.scripted_server import ScriptedServer

BASE, CAND = "agg.cpu_attn.b128.auto.v1.baseline", "agg.cpu_attn.b128.auto.v1.kernel32"


class StandInTarget:
    """Deploys nothing: every cell is served at one URL (the scripted server's)."""

    kind = "stand-in"

    def __init__(self, url: str, model: str) -> None:
        self.url, self.model = url, model

    @contextmanager
    def deploy(self, cell: Cell, log_dir: Path) -> Iterator[Deployment]:
        yield Deployment(cell=cell, base_url=self.url, served_model=self.model, started=True)

    def describe(self, cell: Cell) -> dict[str, object]:
        return {}


def _last_cell_verdicts(lines: list[str]) -> dict[str, str]:
    """cell id -> the verdict of the last progress line that announced one (`ID => VERDICT ...`)."""
    out: dict[str, str] = {}
    for line in lines:
        found = re.search(r"(\S+) => ([A-Z-]+)\b", line)
        if found:
            out[found.group(1)] = found.group(2).lower()
    return out


def _last_check_verdicts(lines: list[str]) -> dict[tuple[str, str], str]:
    """(cell id, check) -> the verdict of its last progress line (`ID: check -> verdict`, `ID: check a -> b`)."""
    out: dict[tuple[str, str], str] = {}
    for line in lines:
        found = re.match(r"\s*(\S+): (\w+) (?:\S+ )?-> ([a-z-]+)", line)
        if found:
            out[(found.group(1), found.group(2))] = found.group(3)
    return out


def test_inconclusive_per_request_tests_print_the_recorded_verdict(tmp_path: Path) -> None:
    """min_samples above what a run sends: every per-request test of the candidate is inconclusive,
    so its throughput check is invalid (never a pass, never a fail), on the line and in results.json."""
    overrides = [
        *(f"checks.{name}.enabled=false" for name in ("startup", "parity", "accuracy", "kv_transfer")),
        "checks.throughput.num_requests=12",
        "checks.throughput.warmup_requests=2",
        "checks.throughput.repeats=1",
        "checks.throughput.max_foreign_cpu_cores=null",  # a shared machine: not what this test is about
        "checks.throughput.max_client_lag_p99_ms=2000",
        "checks.throughput.per_request.enabled=true",
        "checks.throughput.per_request.min_samples=1000",
        "matrix.expectations=[]",
    ]
    config = load_config(CONFIGS_DIR / "cpu-default.yaml", overrides)
    full = plan(config)
    the_plan = full.model_copy(update={"cells": tuple(c for c in full.cells if c.id in (BASE, CAND))})
    lines: list[str] = []
    run_dir = tmp_path / "run"
    with ScriptedServer(ttft_s=0.02, itl_s=0.002, record=False) as server:
        run = execute(config, the_plan, run_dir, target=StandInTarget(server.url, server.model), progress=lines.append)
    write_results(run, run_dir, junit=False, html=False)
    recorded = json.loads((run_dir / "results.json").read_text())
    cells = {c["cell"]["id"]: c for c in recorded["cells"]}
    checks = {(i, k["name"]): k["verdict"] for i, c in cells.items() for k in c["checks"]}
    assert checks[(BASE, "throughput")] == "ungated", "\n".join(lines)  # no floor, no baseline: nothing gated its speed
    assert checks[(CAND, "throughput")] == "invalid", "\n".join(lines)
    assert _last_cell_verdicts(lines) == {i: c["verdict"] for i, c in cells.items()}, "\n".join(lines)
    assert _last_check_verdicts(lines) == checks, "\n".join(lines)


@pytest.mark.parametrize(
    ("line", "cell", "verdict"),
    [
        ("cell 2/3: agg.a.b => FAIL throughput: x", "agg.a.b", "fail"),
        ("re-judged: agg.a.b => PASS ", "agg.a.b", "pass"),
        ("wave 1: pd.x => EXPECTED-FAIL known (startup: y)", "pd.x", "expected-fail"),
    ],
)
def test_the_line_readers_read_what_the_runner_prints(line: str, cell: str, verdict: str) -> None:
    assert _last_cell_verdicts([line]) == {cell: verdict}


def test_a_verdict_holm_changes_after_the_cell_is_reprinted_as_recorded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A p of 0.02 fails its cell's line (provisional, and the line says so); Holm over the run's
    nine tests makes it 0.18, a pass: the run then prints the cell again with the verdict it records.
    (The check is crafted: a real load run cannot be made to land on p = 0.02.)"""
    import canary.run.cells

    config = load_config(CONFIGS_DIR / "cpu-default.yaml", ["matrix.expectations=[]"])
    full = plan(config)
    cells = [c for c in full.cells if c.status == "planned"][:3]
    crafted = dict(zip((c.id for c in cells), ([0.02, 0.6, 0.7], [0.5, 0.6, 0.7], [0.3, 0.4, 0.9]), strict=True))
    monkeypatch.setattr(
        canary.run.cells,
        "registered",
        lambda: {"throughput": lambda ctx: crafted_throughput(crafted[ctx.cell.id])},
    )
    the_plan = full.model_copy(update={"cells": tuple(cells)})
    lines: list[str] = []
    run_dir = tmp_path / "run"
    target = StandInTarget("http://127.0.0.1:9", "tiny")  # the crafted check sends nothing
    run = execute(config, the_plan, run_dir, target=target, progress=lines.append)
    write_results(run, run_dir, junit=False, html=False)
    recorded = json.loads((run_dir / "results.json").read_text())
    cells_json = {c["cell"]["id"]: c for c in recorded["cells"]}
    checks = {(i, k["name"]): k["verdict"] for i, c in cells_json.items() for k in c["checks"]}
    assert set(checks.values()) == {"pass"}
    assert any(f"{cells[0].id} => FAIL" in line and "provisional" in line for line in lines), lines
    assert _last_cell_verdicts(lines) == {i: c["verdict"] for i, c in cells_json.items()}, "\n".join(lines)
    assert _last_check_verdicts(lines) == checks, "\n".join(lines)


class SlowTarget(StandInTarget):
    """A deployment that takes `deploy_s` to come up (the real ones take 16-60 s here)."""

    def __init__(self, deploy_s: float) -> None:
        super().__init__("http://127.0.0.1:9", "tiny")
        self.deploy_s = deploy_s

    @contextmanager
    def deploy(self, cell: Cell, log_dir: Path) -> Iterator[Deployment]:
        time.sleep(self.deploy_s)
        with super().deploy(cell, log_dir) as deployment:
            yield deployment


def test_the_startup_line_and_duration_include_the_deploy_it_judged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`startup -> pass (0.0s)` followed a 16-26 s deploy: the check judges the deployment in no time."""
    import canary.run.cells

    def startup(ctx: object) -> CheckResult:
        return CheckResult(name="startup", verdict="pass", summary="ready")

    monkeypatch.setattr(canary.run.cells, "registered", lambda: {"startup": startup})
    config = load_config(CONFIGS_DIR / "cpu-default.yaml", ["matrix.expectations=[]"])
    full = plan(config)
    the_plan = full.model_copy(update={"cells": (next(c for c in full.cells if c.status == "planned"),)})
    lines: list[str] = []
    run = execute(config, the_plan, tmp_path / "run", target=SlowTarget(0.5), progress=lines.append)
    check = run.cells[0].check("startup")
    assert check is not None and check.duration_s >= 0.5
    line = next(line for line in lines if ": startup -> pass (" in line)
    took = re.search(r"\((\d+\.\d)s, of which deploy (\d+\.\d)s\)", line)
    assert took is not None, line
    assert float(took.group(1)) >= float(took.group(2)) >= 0.5
