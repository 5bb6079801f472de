"""`canary run` end to end with the per-request gate and the history: the real CLI, runner,
throughput check, load generator (a locust subprocess) and writers, against scripted stand-in
servers (tests/support/scripted_server.py: no vLLM engines). The baseline image's cell is served by
one server, the candidate image's by another: equally fast (nothing raised) or 40% slower per token
and to the first token (the per-request test flags it, with Holm over the run)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from canary import cli
from canary.config import CanaryConfig
from canary.export.history.store import open_store
from canary.judge.results import RunResult
from canary.paths import CONFIGS_DIR
from canary.plan.cell import Cell
from canary.run import cells
from canary.targets.base import Deployment
from tests.support.scripted_server import ScriptedServer

BASE = "agg.cpu_attn.b32.auto.v1.baseline"
CAND = "agg.cpu_attn.b32.auto.v1.kernel32"


class TwoServers:
    """Cells of the baseline image go to one scripted server, every other cell to the second."""

    kind = "scripted"

    def __init__(self, baseline: ScriptedServer, candidate: ScriptedServer) -> None:
        self.baseline, self.candidate = baseline, candidate

    @contextmanager
    def deploy(self, cell: Cell, log_dir: Path) -> Iterator[Deployment]:
        server = self.baseline if cell.image == "baseline" else self.candidate
        yield Deployment(cell=cell, base_url=server.url, served_model=cell.model, started=True)

    def describe(self, cell: Cell) -> dict[str, object]:
        return {}


def _args(results: Path) -> list[str]:
    sets = {
        "matrix.images": "[baseline, kernel32]",
        "matrix.expectations": "[]",
        "checks.startup.enabled": "false",
        "checks.kv_transfer.enabled": "false",
        "checks.accuracy.enabled": "false",
        "checks.parity.enabled": "false",
        "checks.throughput.num_requests": "40",
        "checks.throughput.warmup_requests": "2",
        "checks.throughput.concurrency": "2",
        "checks.throughput.output_tokens": "6",
        "checks.throughput.prompt_tokens": "8",
        "checks.throughput.max_duration_s": "90",
        # cpu-default leaves latencies ungated (its engines' deployments differ by 2x); this test
        # is about the per-request gate, so it turns it on
        "checks.throughput.per_request.enabled": "true",
        "export.html": "false",
    }
    args = ["run", str(CONFIGS_DIR / "cpu-default.yaml"), "--only", BASE, "--only", CAND, "--results-dir", str(results)]
    for key, value in sets.items():
        args += ["--set", f"{key}={value}"]
    return args


@pytest.fixture(scope="module")
def servers(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[ScriptedServer, ScriptedServer, ScriptedServer]]:
    logs = tmp_path_factory.mktemp("scripted")
    with (
        ScriptedServer(ttft_s=0.05, itl_s=0.01, model="tiny", record=False, log_path=logs / "a.log") as fast,
        ScriptedServer(ttft_s=0.05, itl_s=0.01, model="tiny", record=False, log_path=logs / "b.log") as same,
        ScriptedServer(ttft_s=0.07, itl_s=0.014, model="tiny", record=False, log_path=logs / "c.log") as slow,
    ):
        yield fast, same, slow


def _run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], target: TwoServers
) -> tuple[int, RunResult, str]:
    def create_target(config: CanaryConfig, **_: object) -> TwoServers:
        return target

    monkeypatch.setattr(cells, "create_target", create_target)
    results = tmp_path / "results"
    code = cli.main(_args(results))
    captured = capsys.readouterr()
    run = RunResult.model_validate_json((results / "latest" / "results.json").read_text())
    return code, run, captured.out + captured.err


def _gates(run: RunResult, cell_id: str) -> dict[str, bool]:
    cell = next(c for c in run.cells if c.cell.id == cell_id)
    check = cell.check("throughput")
    assert check is not None
    return {g.name: g.passed for g in check.gates if g.name.startswith("per-request-")}


def test_equal_servers_raise_nothing(
    servers: tuple[ScriptedServer, ScriptedServer, ScriptedServer],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    fast, same, _ = servers
    code, run, out = _run(tmp_path, monkeypatch, capsys, TwoServers(fast, same))
    # the baseline cell runs only the load: its speed is measured with nothing to judge it against (ungated)
    assert {c.cell.id: c.verdict for c in run.cells} == {BASE: "ungated", CAND: "pass"}, out[-3000:]
    assert code == 0
    assert _gates(run, CAND) == {"per-request-ttft_s": True, "per-request-itl_mean_s": True, "per-request-e2e_s": True}
    assert _gates(run, BASE) == {}  # the baseline is not compared with itself
    assert f"history: recorded {run.run_id} in {tmp_path / 'results' / 'history.sqlite'}" in out
    with open_store(sqlite=tmp_path / "results" / "history.sqlite") as store:
        assert store.cells_of(run.run_id)[CAND][0] == "pass"
        assert store.series(CAND, "throughput", "e2e_p50_s")[0].value == pytest.approx(0.1, rel=0.3)


def test_a_slower_candidate_fails_the_per_request_test(
    servers: tuple[ScriptedServer, ScriptedServer, ScriptedServer],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    fast, _, slow = servers
    code, run, out = _run(tmp_path, monkeypatch, capsys, TwoServers(fast, slow))
    verdicts = {c.cell.id: c.verdict for c in run.cells}
    assert verdicts == {BASE: "ungated", CAND: "fail"}, out[-3000:]
    assert code == cli.EXIT_FAILED_CELLS
    assert _gates(run, CAND) == {
        "per-request-ttft_s": False,
        "per-request-itl_mean_s": False,
        "per-request-e2e_s": False,
    }
    check = next(c for c in run.cells if c.cell.id == CAND).check("throughput")
    assert check is not None
    comparisons = {c["metric"]: c for c in check.evidence["per_request"]["comparisons"]}
    assert comparisons["itl_mean_s"]["n_candidate"] == 40 and comparisons["itl_mean_s"]["n_baseline"] == 40
    assert comparisons["itl_mean_s"]["hl_low"] > 0.002  # 4 ms slower per token, with its interval
    assert all(c["p_holm"] < 0.05 for c in comparisons.values())
