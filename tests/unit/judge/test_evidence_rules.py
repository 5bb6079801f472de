"""Issue 41: no green without evidence. A crashed check is never the known bug; a dead engine is named and
fails the cell; a check that ran no gate says so (ungated), never pass; a missing number is never a pass;
a config whose cells nothing could judge is refused at load."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from canary.checks import base as checks_base
from canary.checks.accuracy.check import Threshold, build_result
from canary.checks.accuracy.gsm8k import QuestionResult
from canary.checks.accuracy.sequential import evaluate_sequentially
from canary.config import AccuracyCheckConfig
from canary.config.load import load_config
from canary.errors import ConfigError
from canary.judge.expectations import ENGINES_CHECK, apply_expectation
from canary.judge.request_tests import gates_verdict
from canary.judge.results import CheckResult, Gate, worst
from canary.paths import CONFIGS_DIR
from canary.plan.cell import Cell
from canary.plan.matrix import find, plan
from canary.run.cells import engines_died, execute
from canary.targets import processes
from canary.targets.base import Deployment, ServerInfo
from canary.targets.liveness import LOG_LINES, deaths, describe_exit

PD_KNOWN_BAD = "pd.cpu_attn.p32-d64.auto.v1.baseline"
STARTUP_FAIL = "agg.cpu_attn.b16.auto.v1.baseline"


def _check(name: str, verdict: str, **evidence: object) -> CheckResult:
    return CheckResult(name=name, verdict=verdict, summary=f"{name} {verdict}", evidence=dict(evidence))  # type: ignore[arg-type]


def _cell(cell_id: str, overrides: list[str] | None = None) -> Cell:
    cell = find(list(plan(load_config(CONFIGS_DIR / "cpu-default.yaml", overrides or [])).cells), cell_id)
    assert cell is not None and cell.expect is not None
    return cell


DIED = CheckResult(
    name=ENGINES_CHECK,
    verdict="fail",
    summary="during parity: decode server died (killed by signal 9 (SIGKILL), noticed 2026-12-05T01:00:00+00:00)",
)


# --------------------------------------------------------------------------- expectations


def test_checks_that_crashed_are_never_the_expected_failure() -> None:
    # cpu-default's p32-d64 cell expects parity, accuracy and kv_transfer to fail; all three crashed.
    cell = _cell(PD_KNOWN_BAD)
    checks = [_check("startup", "pass"), _check("parity", "error"), _check("accuracy", "error")]
    verdict, reason = apply_expectation(cell, [*checks, _check("kv_transfer", "error")])
    assert verdict == "error" and "parity: parity error" in reason and "expected failure not judged" in reason


def test_a_dead_engine_fails_a_cell_whatever_it_was_expected_to_fail() -> None:
    cell = _cell(PD_KNOWN_BAD)
    checks = [_check("startup", "pass"), _check("parity", "fail"), _check("accuracy", "error"), DIED]
    verdict, reason = apply_expectation(cell, checks)
    assert verdict == "fail" and "decode server died" in reason and "not the expected failure" in reason


def test_an_expectation_that_names_the_crash_covers_it() -> None:
    expectation = {
        "match": {"prefill_block_size": 32, "decode_block_size": 64},
        "expect": "check-fail",
        "reason": "decode crashes on long prompts",
        "engine_dies": True,
    }
    cell = _cell(PD_KNOWN_BAD, ["matrix.expectations=" + json.dumps([expectation])])
    verdict, reason = apply_expectation(cell, [_check("startup", "pass"), _check("parity", "fail"), DIED])
    assert verdict == "expected-fail" and "decode crashes" in reason
    verdict, _ = apply_expectation(cell, [_check("startup", "pass"), DIED])
    assert verdict == "expected-fail"
    # the check that met the dying server errored: a consequence of the named crash, not a missing measurement
    verdict, reason = apply_expectation(cell, [_check("startup", "pass"), _check("parity", "error"), DIED])
    assert verdict == "expected-fail" and "decode server died" in reason
    # the same errors without a death seen: nothing shows the named crash happened
    verdict, _ = apply_expectation(cell, [_check("startup", "pass"), _check("parity", "error")])
    assert verdict == "error"


def test_engine_dies_is_refused_outside_check_fail() -> None:
    bad = {"match": {"block_size": 16}, "expect": "startup-fail", "reason": "x", "engine_dies": True}
    with pytest.raises(ConfigError, match="engine_dies applies to expect: check-fail"):
        load_config(CONFIGS_DIR / "cpu-default.yaml", ["matrix.expectations=" + json.dumps([bad])])


def test_a_startup_fail_cell_whose_target_raised_is_an_error_not_an_unexpected_pass() -> None:
    cell = _cell(STARTUP_FAIL)
    verdict, reason = apply_expectation(cell, [_check("deploy", "error")])
    assert verdict == "error" and "expected startup failure not judged" in reason and "deploy" in reason
    verdict, _ = apply_expectation(cell, [_check("startup", "error")])
    assert verdict == "error"
    verdict, _ = apply_expectation(cell, [_check("startup", "pass")])
    assert verdict == "unexpected-pass"


def test_a_cell_with_no_check_is_never_pass() -> None:
    verdict, reason = apply_expectation(_cell(STARTUP_FAIL), [])
    assert verdict == "error" and "no check ran" in reason
    assert worst([]) == "ungated"
    assert worst(["ungated", "ungated"]) == "ungated"
    assert worst(["pass", "ungated"]) == "pass"


# --------------------------------------------------------------------------- gates


def test_throughput_with_only_the_loads_own_gates_is_ungated() -> None:
    load_only = [Gate(name=n, passed=True) for n in ("error-rate", "client-not-bottleneck", "finished-in-time")]
    assert gates_verdict(load_only) == "ungated"
    assert gates_verdict([*load_only, Gate(name="floor-requests_per_s", passed=True)]) == "pass"
    assert gates_verdict([Gate(name="error-rate", passed=False), *load_only[1:]]) == "fail"


def test_a_regression_metric_missing_on_one_side_is_invalid_not_skipped() -> None:
    from canary.checks.throughput.check import regression_gates

    config = load_config(CONFIGS_DIR / "cpu-default.yaml")
    cfg = config.checks.throughput
    mine = {key: 1.0 for key in cfg.regression_metrics}
    theirs = {key: 1.0 for key in cfg.regression_metrics[1:]}
    gates = regression_gates(cfg, mine, theirs, "agg.baseline")
    missing = [g for g in gates if not g.passed]
    assert [g.name for g in missing] == [f"missing-{cfg.regression_metrics[0]}"]
    assert "agg.baseline" in missing[0].detail
    validity = [Gate(name=n, passed=True) for n in ("error-rate", "client-not-bottleneck", "finished-in-time")]
    assert gates_verdict([*validity, *gates]) == "invalid"


# --------------------------------------------------------------------------- config


def test_a_config_with_every_check_disabled_is_refused() -> None:
    names = ["startup", "parity", "accuracy", "throughput", "kv_transfer"]
    with pytest.raises(ConfigError, match="every check is disabled"):
        load_config(CONFIGS_DIR / "cpu-default.yaml", [f"checks.{n}.enabled=false" for n in names])


def test_startup_alone_without_live_config_verification_is_refused() -> None:
    off = [f"checks.{n}.enabled=false" for n in ("parity", "accuracy", "throughput", "kv_transfer")]
    with pytest.raises(ConfigError, match="verify_live_config"):
        load_config(CONFIGS_DIR / "cpu-default.yaml", [*off, "checks.startup.verify_live_config=false"])
    load_config(CONFIGS_DIR / "cpu-default.yaml", off)  # verified startup alone can fail: accepted


# --------------------------------------------------------------------------- the watch


@contextmanager
def _server(tmp_path: Path, code: str) -> Iterator[tuple[Deployment, processes.ManagedProcess]]:
    """A real process standing in for an engine server (its log, its exit), started like the local target's."""
    log = tmp_path / "decode.log"
    proc = processes.start("decode", [sys.executable, "-c", code], {"PATH": "/usr/bin:/bin"}, log)
    deployment = Deployment(cell=_cell(PD_KNOWN_BAD), base_url="http://127.0.0.1:9", served_model="tiny", started=True)
    deployment.servers["decode"] = ServerInfo(role="decode", base_url="http://127.0.0.1:9", log_path=log, pid=proc.pid)
    deployment.exit_status = lambda role: proc.exit_code() if role == "decode" else None
    try:
        yield deployment, proc
    finally:
        processes.stop([proc])


def _wait_exit(proc: processes.ManagedProcess, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while proc.alive() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not proc.alive(), "the stand-in server did not exit"


def test_the_watch_names_a_server_killed_by_a_signal_with_its_log(tmp_path: Path) -> None:
    code = (
        "import os, signal, sys; print('ERROR EngineCore encountered an issue', flush=True); "
        "os.kill(os.getpid(), signal.SIGKILL)"
    )
    with _server(tmp_path, code) as (deployment, proc):
        _wait_exit(proc)
        died = engines_died(deployment, during="parity")
    assert died is not None and died.verdict == "fail"
    assert "decode server died (killed by signal 9 (SIGKILL)" in died.summary and "during parity" in died.summary
    (death,) = died.evidence["deaths"]
    assert "EngineCore encountered an issue" in (death["cause"] or "")
    assert any("EngineCore" in line for line in death["log_tail"])


def test_the_watch_waits_its_grace_for_a_server_on_its_way_down(tmp_path: Path) -> None:
    with _server(tmp_path, "import time, sys; time.sleep(1.5); sys.exit(3)") as (deployment, proc):
        assert proc.alive()
        assert engines_died(deployment, during="parity") is None, "no grace: it still runs"
        died = engines_died(deployment, during="parity", grace_s=20.0)
    assert died is not None and "exited with status 3" in died.summary


def test_the_watch_says_nothing_while_the_server_runs(tmp_path: Path) -> None:
    with _server(tmp_path, "import time; time.sleep(60)") as (deployment, proc):
        assert proc.alive() and engines_died(deployment, during="parity") is None
    assert Deployment(cell=deployment.cell, base_url="", served_model="tiny").deaths() == []


def test_exit_statuses_in_words() -> None:
    assert describe_exit(3) == "exited with status 3"
    assert describe_exit(-11) == "killed by signal 11 (SIGSEGV)"
    assert "SIGKILL" in describe_exit(137)


class DyingTarget:
    """A stand-in target whose decode 'server' is a real process that exits during the first check."""

    kind = "stand-in"

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path

    @contextmanager
    def deploy(self, cell: Cell, log_dir: Path) -> Iterator[Deployment]:
        with _server(log_dir, "import sys; print('decode: NIXL read failed'); sys.exit(7)") as (deployment, proc):
            deployment.cell = cell
            _wait_exit(proc)
            yield deployment

    def describe(self, cell: Cell) -> dict[str, object]:
        return {}


def test_the_runner_stops_a_cell_whose_engine_died_and_names_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through execute: cpu-default's known-bad cell, its checks 'fail' as expected, but decode exited."""
    import canary.run.cells

    ran: list[str] = []

    def named(name: str, outcome: str) -> checks_base.CheckFn:
        def run(ctx: checks_base.CheckContext) -> CheckResult:
            ran.append(name)
            return _check(name, outcome)

        return run

    fakes = {"startup": named("startup", "pass")}
    fakes |= {n: named(n, "fail") for n in ("parity", "accuracy", "kv_transfer")}
    monkeypatch.setattr(canary.run.cells, "registered", lambda: fakes)
    config = load_config(CONFIGS_DIR / "cpu-default.yaml", ["checks.throughput.enabled=false"])
    full = plan(config)
    the_plan = full.model_copy(update={"cells": tuple(c for c in full.cells if c.id == PD_KNOWN_BAD)})
    run = execute(config, the_plan, tmp_path / "run", target=DyingTarget(tmp_path), progress=lambda _: None)
    (cell,) = run.cells
    assert cell.verdict == "fail" and "decode server died (exited with status 7" in cell.reason
    assert ran == ["startup"], "nothing is measured on a dead server"
    assert run.exit_code == 1
    engines = cell.check(ENGINES_CHECK)
    assert engines is not None and engines.evidence["deaths"][0]["log_tail"] == ["decode: NIXL read failed"]


# --------------------------------------------------------------------------- checks with no gate


def _answers(ids: list[int]) -> list[QuestionResult]:
    return [QuestionResult(i, "q", "t", f"h{i}", "out", "1", "1", i % 4 != 0, i % 4 != 0) for i in ids]


def _accuracy(threshold: float | None) -> CheckResult:
    outcome = evaluate_sequentially(
        list(range(20)),
        _answers,
        batch_size=20,
        early_stop=False,
        threshold=threshold,
        confidence=0.95,
        paired_alpha=0.01,
        control=None,
    )
    gate = None if threshold is None else Threshold(threshold, "test")
    return build_result(outcome, AccuracyCheckConfig(), gate, "", 1.0, "gsm8k", Path("s.jsonl"))


def test_accuracy_with_no_threshold_and_no_control_is_ungated() -> None:
    result = _accuracy(None)
    assert result.verdict == "ungated" and not result.gates and "ungated" in result.summary
    gated = _accuracy(0.5)
    assert gated.verdict == "pass" and gated.gates


def test_parity_on_the_control_with_no_baseline_reference_is_ungated(tmp_path: Path) -> None:
    from canary.checks.base import CheckContext
    from canary.checks.parity import check as parity
    from canary.checks.parity.fidelity import Position, compare
    from canary.checks.parity.prompts import ParityPrompt
    from canary.checks.parity.reference import CACHE_BATCH_ARM, FORCED_NULL_ARM, Reference

    series = [Position(7 + i, -0.1, {7 + i: -0.1, 8 + i: -2.1}) for i in range(8)]
    twin = [Position(9 + i, -0.1, {9 + i: -0.1, 10 + i: -2.1}) for i in range(8)]
    null = {CACHE_BATCH_ARM: compare(series, series), FORCED_NULL_ARM: compare(series, series, True)}
    ids = list(range(40))
    refs = [Reference(ParityPrompt(40, ids, [5, *ids[1:]], 4, 40), series, null, compare(series, twin))]
    config = load_config(CONFIGS_DIR / "cpu-default.yaml")
    cell = next(c for c in plan(config).cells if c.topology == "aggregated" and c.image == config.baseline)
    ctx = CheckContext(cell, Deployment(cell, "http://127.0.0.1:9", "tiny", started=True), config, tmp_path)
    result = parity._reference_result(ctx, refs, config.checks.parity, {})
    assert result.verdict == "ungated" and "ungated" in result.summary and not result.gates


def test_startup_without_live_config_verification_is_ungated(tmp_path: Path) -> None:
    """A real (stand-in) OpenAI server answers: it serves, but the config it runs was not looked at."""
    from canary.checks.base import CheckContext
    from canary.checks.startup.check import startup_check
    from tests.support.scripted_server import ScriptedServer

    config = load_config(CONFIGS_DIR / "cpu-default.yaml", ["checks.startup.verify_live_config=false"])
    cell = next(c for c in plan(config).cells if c.topology == "aggregated" and c.status == "planned")
    with ScriptedServer(ttft_s=0.0, itl_s=0.0, record=False) as server:
        deployment = Deployment(cell, server.url, server.model, started=True)
        deployment.servers["aggregated"] = ServerInfo(role="aggregated", base_url=server.url)
        result = startup_check(CheckContext(cell, deployment, config, tmp_path))
    assert result.verdict == "ungated", result.summary
    assert "live config not verified" in result.summary


def test_a_deaths_log_tail_keeps_the_engines_lines_not_the_500s_it_answered_while_dying(tmp_path: Path) -> None:
    """Measured (make test, fault 12): an API server whose engine core died answered every parity request with 500
    until it exited, and the tail was 12 access lines; the engine's own lines are what a reader needs."""
    log = tmp_path / "decode.log"
    engine = [
        "(EngineCore pid=7) ERROR 12-05 09:29:01 [core.py:1] EngineCore encountered a fatal error.",
        "(APIServer pid=6) ERROR 12-05 09:29:01 [async_llm.py:906] vllm.v1.engine.exceptions.EngineDeadError: dead",
    ]
    access = [
        f'INFO:     127.0.0.1:{51800 + i} - "POST /v1/completions HTTP/1.1" 500 Internal Server Error'
        for i in range(40)
    ]
    log.write_text(
        "\n".join(["(APIServer pid=6) INFO 12-05 09:28:00 [api_server.py:1] started", *engine, *access]) + "\n"
    )
    (death,) = deaths({"decode": log}, lambda role: 1)
    assert death.cause is not None and "EngineDeadError" in death.cause
    assert death.log_tail[-2:] == tuple(engine) and len(death.log_tail) <= LOG_LINES
    assert not any("POST /v1/completions" in line for line in death.log_tail)
