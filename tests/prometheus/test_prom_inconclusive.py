"""A run whose only problem is a measurement the canary could not take, end to end: `canary run`
(the real CLI, runner, throughput check, load generator, writers and exporters) against the
scripted stand-in server (tests/support/scripted_server.py: no vLLM engines), pushed to the real
Pushgateway and scraped by the real Prometheus with the real alert rules.

The load client's loop-lag bound is set below anything a client can meet (0.001 ms), so every
measurement is `invalid` the way a CPU-starved client's is: the check measures again (bounded:
`max_attempts`, with back-off), records every attempt, stays `invalid`, and the run is
INCONCLUSIVE everywhere: exit code 3, the terminal, summary.md, summary.html, the textfile,
`canary_run_outcome_code` 1 in Prometheus, CanaryRunInconclusive firing and CanaryCellFailing not.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from promhelpers import JOB, PromStack, http_get

from canary import cli
from canary.config import CanaryConfig
from canary.export.prometheus import schema as s
from canary.judge.results import RunResult
from canary.judge.verdicts import OUTCOME_CODES
from canary.paths import CONFIGS_DIR
from canary.plan.cell import Cell
from canary.run import cells
from canary.targets.base import Deployment
from tests.support.scripted_server import ScriptedServer

pytestmark = pytest.mark.prometheus

CELL = "agg.cpu_attn.b32.auto.v1.baseline"
SCOPE = "it-inconclusive"
ATTEMPTS = 2
BACKOFF_S = 0.3
HEADLINE = "INCONCLUSIVE: 1 cell could not be measured: client CPU-starved; rerun"


class ScriptedTarget:
    """A target whose every cell is the already running scripted server (deploys nothing)."""

    kind = "scripted"

    def __init__(self, server: ScriptedServer) -> None:
        self.server = server

    @contextmanager
    def deploy(self, cell: Cell, log_dir: Path) -> Iterator[Deployment]:
        yield Deployment(cell=cell, base_url=self.server.url, served_model=cell.model, started=True)

    def describe(self, cell: Cell) -> dict[str, object]:
        return {"base_url": self.server.url}


def _args(results: Path, pushgateway_url: str) -> list[str]:
    sets = {
        "checks.startup.enabled": "false",
        "checks.kv_transfer.enabled": "false",
        "checks.accuracy.enabled": "false",
        "checks.parity.enabled": "false",
        "checks.throughput.num_requests": "12",
        "checks.throughput.warmup_requests": "2",
        "checks.throughput.concurrency": "2",
        "checks.throughput.output_tokens": "4",
        "checks.throughput.prompt_tokens": "8",
        "checks.throughput.max_duration_s": "60",
        "checks.throughput.max_client_lag_p99_ms": "0.001",
        "checks.throughput.max_attempts": str(ATTEMPTS),
        "checks.throughput.retry_backoff_s": str(BACKOFF_S),
        "export.pushgateway.url": pushgateway_url,
        "export.pushgateway.job": JOB,
        "export.pushgateway.scope": SCOPE,
    }
    args = ["run", str(CONFIGS_DIR / "cpu-default.yaml"), "--only", CELL, "--results-dir", str(results)]
    for key, value in sets.items():
        args += ["--set", f"{key}={value}"]
    return args


@pytest.fixture(scope="module")
def scripted(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ScriptedServer]:
    log = tmp_path_factory.mktemp("scripted") / "server.log"
    with ScriptedServer(ttft_s=0.005, itl_s=0.002, model="tiny", log_path=log) as server:
        yield server


def test_an_unmeasurable_cell_makes_the_run_inconclusive_everywhere(
    prom_stack: PromStack,
    scripted: ScriptedServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    target = ScriptedTarget(scripted)

    def create_target(config: CanaryConfig, **_: object) -> ScriptedTarget:
        return target

    monkeypatch.setattr(cells, "create_target", create_target)
    results = tmp_path / "results"
    code = cli.main(_args(results, prom_stack.pushgateway_url))
    out = capsys.readouterr().out

    # Exit code and terminal.
    assert code == cli.EXIT_INCONCLUSIVE == 3, out
    assert HEADLINE in out.replace("\n", " ") or HEADLINE in out, out[-3000:]
    run = RunResult.model_validate_json((results / "latest" / "results.json").read_text())
    assert run.outcome == "inconclusive" and not run.ok
    (cell,) = [c for c in run.cells if c.cell.id == CELL]
    assert cell.verdict == "invalid"

    # The bounded re-measurement: every attempt recorded, with its back-off, none valid.
    check = cell.check("throughput")
    assert check is not None and check.verdict == "invalid"
    attempts = check.evidence["attempts"]
    assert [a["attempt"] for a in attempts] == list(range(1, ATTEMPTS + 1))
    assert [a["verdict"] for a in attempts] == ["invalid"] * ATTEMPTS
    assert [a["waited_s"] for a in attempts] == [0.0, BACKOFF_S]
    assert all(any("event-loop lag" in p for p in a["client_problems"]) for a in attempts)
    assert check.metrics["attempts"] == ATTEMPTS
    assert check.evidence["cause"] == "client CPU-starved"
    assert f"invalid in all {ATTEMPTS} attempts" in check.summary
    run_dir = results / "latest"
    assert (run_dir / "cells" / CELL / "throughput" / f"attempt-{ATTEMPTS}").is_dir()

    # Markdown and HTML say the same.
    markdown = (run_dir / "summary.md").read_text()
    assert markdown.splitlines()[0].endswith(": INCONCLUSIVE")
    assert f"**{HEADLINE}**" in markdown
    assert "  - attempts: 1 invalid (after 0.0 s), 2 invalid (after 0.3 s)" in markdown
    html = (run_dir / "summary.html").read_text()
    assert ": INCONCLUSIVE</h1>" in html and HEADLINE in html
    assert "attempts: 1 invalid (after 0.0 s), 2 invalid (after 0.3 s)" in html

    # The textfile and Prometheus carry the run outcome; the inconclusive alert fires, the cell one does not.
    inconclusive = OUTCOME_CODES["inconclusive"]
    assert f"{s.RUN_OUTCOME.name} {float(inconclusive)}" in (run_dir / "canary.prom").read_text()
    prom_stack.wait_for(
        f'{s.RUN_OUTCOME.name}{{scope="{SCOPE}"}}',
        lambda r: len(r) == 1 and float(r[0]["value"][1]) == inconclusive and r[0]["metric"]["job"] == JOB,
        deadline_s=30,
    )
    prom_stack.wait_for(
        f'ALERTS{{alertstate="firing",scope="{SCOPE}"}}',
        lambda r: {x["metric"]["alertname"] for x in r} == {"CanaryRunInconclusive"},
        deadline_s=30,
    )
    alerts = json.loads(http_get(f"{prom_stack.prometheus_url}/api/v1/alerts"))["data"]["alerts"]
    (fired,) = [a for a in alerts if a["labels"].get("scope") == SCOPE]
    assert fired["labels"]["severity"] == "warning"
    assert fired["annotations"]["summary"] == f"vLLM canary {JOB}/{SCOPE}: last run inconclusive"
