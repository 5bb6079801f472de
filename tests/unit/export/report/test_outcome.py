"""The run outcome (OK / FAILED / INCONCLUSIVE) in every view and as `canary run`'s exit code, and the
throughput check's bounded re-measurement of an invalid measurement.

The end-to-end version (real CLI, load generator, scripted server, Prometheus and alert rules) is
tests/prometheus/test_prom_inconclusive.py; these pin the wording and the loop on the sample run.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from rich.console import Console

from canary import cli
from canary.checks.base import CheckContext
from canary.checks.throughput import check as throughput
from canary.config.load import load_config
from canary.export.prometheus import schema
from canary.export.report import html, markdown
from canary.export.report.outcome import headline
from canary.export.report.terminal import outcome_line
from canary.judge.results import CellResult, CheckResult, RunResult
from canary.judge.verdicts import OUTCOME_CODES, Verdict
from canary.load.stats import ClientHealth, client_problems
from canary.paths import CONFIGS_DIR
from canary.plan.matrix import find, plan
from canary.targets.base import Deployment
from tests.support.sample import sample_run


def _with(run: RunResult, verdicts: dict[str, Verdict], throughput_cause: str = "") -> RunResult:
    """The sample run with only the given cells not passing (every other planned cell passes)."""
    cells: list[CellResult] = []
    for cell in run.cells:
        if cell.verdict in ("skipped", "unsupported"):
            cells.append(cell)
            continue
        verdict = verdicts.get(cell.cell.id, "pass")
        checks = [CheckResult(name="startup", verdict="pass", summary="ready")]
        if verdict == "invalid":
            evidence = {"cause": throughput_cause} if throughput_cause else {}
            checks.append(CheckResult(name="throughput", verdict="invalid", summary="lag", evidence=evidence))
        elif verdict == "error":
            checks.append(CheckResult(name="accuracy", verdict="error", summary="RuntimeError: boom\ntraceback"))
        cells.append(cell.model_copy(update={"verdict": verdict, "checks": checks, "reason": verdict}))
    return run.model_copy(update={"cells": cells})


@pytest.fixture(scope="module")
def base() -> RunResult:
    return sample_run()


def _ids(run: RunResult) -> list[str]:
    return [c.cell.id for c in run.cells if c.verdict not in ("skipped", "unsupported")]


def test_one_invalid_cell_is_inconclusive_in_every_view(base: RunResult) -> None:
    cell = _ids(base)[1]
    run = _with(base, {cell: "invalid"}, "client CPU-starved")
    line = "INCONCLUSIVE: 1 cell could not be measured: client CPU-starved; rerun"
    assert run.outcome == "inconclusive" and not run.ok
    assert headline(run) == line
    assert cli.exit_code(run) == cli.EXIT_INCONCLUSIVE == 3
    console = Console(record=True, width=200, color_system=None)
    console.print(outcome_line(run))
    assert console.export_text().strip() == line
    md = markdown.render(run)
    assert md.splitlines()[0].endswith(": INCONCLUSIVE") and f"**{line}**" in md
    page = html.render(run)
    assert ": INCONCLUSIVE</h1>" in page and line in page
    samples = {x.name: x.value for x in schema.samples(run) if not x.labels}
    assert samples[schema.RUN_OUTCOME.name] == OUTCOME_CODES["inconclusive"] == 1


def test_errors_and_invalid_cells_name_each_cause_once(base: RunResult) -> None:
    a, b, c = _ids(base)[:3]
    run = _with(base, {a: "invalid", b: "invalid", c: "error"}, "client CPU-starved")
    assert headline(run) == (
        "INCONCLUSIVE: 3 cells could not be measured: client CPU-starved, accuracy: RuntimeError: boom; rerun"
    )


def test_a_definitive_finding_makes_the_run_failed_and_names_the_unmeasured_too(base: RunResult) -> None:
    a, b = _ids(base)[:2]
    run = _with(base, {a: "fail", b: "invalid"}, "client CPU-starved")
    assert run.outcome == "failed" and cli.exit_code(run) == cli.EXIT_FAILED_CELLS
    # no failing check here: the cell's reason says why
    assert headline(run) == f"FAILED: 1 cell failed: {a} fail; 1 cell could not be measured: client CPU-starved"
    assert markdown.render(run).splitlines()[0].endswith(": FAILED")


def test_a_clean_run_is_ok_and_an_interrupted_one_says_so(base: RunResult) -> None:
    run = _with(base, {})
    assert run.outcome == "ok" and cli.exit_code(run) == cli.EXIT_OK
    assert headline(run).startswith("OK: ")
    stopped = run.model_copy(update={"interrupted": True})
    assert cli.exit_code(stopped) == cli.EXIT_INTERRUPTED
    assert headline(stopped).startswith("OK (interrupted): ")


@pytest.mark.parametrize(
    ("verdict", "interrupted", "outcome", "code"),
    [
        ("pass", False, "ok", 0),
        ("fail", False, "failed", 1),
        ("invalid", False, "inconclusive", 3),
        ("invalid", True, "inconclusive", 130),
    ],
)
def test_results_json_carries_the_outcome_and_exit_code_first_and_reads_back(
    base: RunResult, tmp_path: Path, verdict: Verdict, interrupted: bool, outcome: str, code: int
) -> None:
    """A script reads `.outcome` and `.exit_code` instead of recomputing OK/FAILED/INCONCLUSIVE."""
    import json

    from canary.export.report import write_json

    cell = _ids(base)[0]
    run = _with(base, {cell: verdict}).model_copy(update={"interrupted": interrupted})
    path = write_json(run, tmp_path)
    data = json.loads(path.read_text(encoding="utf-8"))
    assert list(data)[:4] == ["schema_version", "run_id", "outcome", "exit_code"]
    assert (data["outcome"], data["exit_code"]) == (outcome, code) == (run.outcome, cli.exit_code(run))
    back = RunResult.model_validate_json(path.read_text(encoding="utf-8"))  # derived keys are not read as input
    assert back.outcome == outcome and back.exit_code == code and back.cells == run.cells


def test_the_exit_codes_are_documented_where_users_look() -> None:
    helptext = cli.build_parser().format_help()
    readme = (CONFIGS_DIR.parent / "README.md").read_text(encoding="utf-8")
    reference = (CONFIGS_DIR.parent / "docs" / "reference" / "exit-codes.md").read_text(encoding="utf-8")
    for code in (cli.EXIT_OK, cli.EXIT_FAILED_CELLS, cli.EXIT_USAGE, cli.EXIT_INCONCLUSIVE, cli.EXIT_INTERRUPTED):
        assert f"\n  {code} " in helptext
        assert f"- {code}: " in (cli.__doc__ or "")
        assert f"\n| {code} | " in readme
        assert f"- **{code}**: " in reference


# --------------------------------------------------------------------------- the re-measurement loop


def test_the_cause_words_follow_the_load_generators_own_diagnosis() -> None:
    def cause(cpu_ratio: float, lag_s: float) -> str:
        health = ClientHealth(cpu_s=cpu_ratio * 10, wall_s=10, lag_s=[lag_s] * 50)
        return throughput.client_cause(client_problems(health, max_cpu_ratio=0.9, max_lag_p99_s=0.05))

    assert cause(0.05, 0.2) == "client CPU-starved"
    assert cause(0.95, 0.0) == "client CPU-saturated"
    assert cause(0.7, 0.2) == "client event-loop lag"


def _context(tmp_path: Path, attempts: int, backoff_s: float) -> CheckContext:
    config = load_config(
        CONFIGS_DIR / "cpu-default.yaml",
        [
            f"checks.throughput.max_attempts={attempts}",
            f"checks.throughput.retry_backoff_s={backoff_s}",
            "checks.throughput.load_parity.enabled=false",  # needs a server; the retries are the subject here
        ],
    )
    cell = find(list(plan(config).cells), "agg.cpu_attn.b32.auto.v1.baseline")
    assert cell is not None
    deployment = Deployment(cell=cell, base_url="http://127.0.0.1:9", served_model=cell.model, started=True)
    return CheckContext(cell=cell, deployment=deployment, config=config, cell_dir=tmp_path)


def _scripted_measurements(monkeypatch: pytest.MonkeyPatch, verdicts: list[Verdict]) -> list[tuple[int, float]]:
    """Stand-in for one measurement (the real one needs a server: test_prom_inconclusive runs it):
    returns the given verdicts in turn and records (attempt, when)."""
    calls: list[tuple[int, float]] = []

    def measure(ctx: CheckContext, prompts: object, attempt: int, rider: object = None) -> CheckResult:
        calls.append((attempt, time.monotonic()))
        verdict = verdicts[attempt]
        problems = ["client event-loop lag p99 134.0 ms > 100.0 ms: (other processes starved it of CPU)"]
        runs = [{"client_problems": problems if verdict == "invalid" else []}]
        return CheckResult(name="throughput", verdict=verdict, summary=f"try {attempt}", evidence={"runs": runs})

    monkeypatch.setattr(throughput, "measure", measure)
    monkeypatch.setattr(throughput, "_prompt_source", lambda ctx: (None, 1.0, {}))
    return calls


def test_an_invalid_measurement_is_taken_again_until_valid(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _scripted_measurements(monkeypatch, ["invalid", "pass", "pass"])
    result = throughput.throughput_check(_context(tmp_path, attempts=3, backoff_s=0.2))
    assert result.verdict == "pass" and [a for a, _ in calls] == [0, 1]
    assert calls[1][1] - calls[0][1] >= 0.2
    assert [(a["attempt"], a["verdict"], a["waited_s"]) for a in result.evidence["attempts"]] == [
        (1, "invalid", 0.0),
        (2, "pass", 0.2),
    ]
    assert result.metrics["attempts"] == 2 and "attempt 2" in result.summary and "cause" not in result.evidence


def test_the_re_measurement_is_bounded_and_backs_off(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _scripted_measurements(monkeypatch, ["invalid"] * 3)
    result = throughput.throughput_check(_context(tmp_path, attempts=3, backoff_s=0.1))
    assert result.verdict == "invalid" and len(calls) == 3
    assert [a["waited_s"] for a in result.evidence["attempts"]] == [0.0, 0.1, 0.2]
    assert calls[2][1] - calls[1][1] >= 0.2
    assert result.evidence["cause"] == "client CPU-starved"
    assert result.summary == "try 2 (invalid in all 3 attempts, 0.3 s of back-off)"


def test_a_failure_is_not_measured_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _scripted_measurements(monkeypatch, ["fail", "pass"])
    result = throughput.throughput_check(_context(tmp_path, attempts=3, backoff_s=0.0))
    assert result.verdict == "fail" and len(calls) == 1 and result.metrics["attempts"] == 1
