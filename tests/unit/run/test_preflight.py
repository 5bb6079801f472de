"""What `canary run` refuses before its first engine: a results directory it cannot write (exit 2, naming
it and why: canary.run.preflight) and, on the local target, a builtin model that is not built (exit 1,
naming `make model`: LocalTarget.preflight). Plan and the dry run refuse the results directory too
(exit 2, leaving nothing behind: a config that can never record a run is refused at the door), and accept
the unbuilt model, which only the run needs (tests/support/refusal.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from canary import cli
from canary.model import ref
from canary.run.preflight import results_dir_problem
from tests.support.refusal import assert_refused, base_config, run_cli, write_config


def _under_a_file(tmp_path: Path) -> Path:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory\n")
    return blocker / "results"


def test_an_unwritable_results_dir_is_refused_by_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    results = _under_a_file(tmp_path)
    data = base_config(tmp_path)
    data["export"]["results_dir"] = str(results)
    config = write_config(tmp_path, data)
    err = assert_refused(
        config, "export.results_dir", monkeypatch, capsys, ("run",), text=f"results directory {results} cannot hold run"
    )
    assert f"{tmp_path / 'a-file'} is a file, not a directory" in err, err


@pytest.mark.parametrize("command", [("plan",), ("run", "--dry-run")], ids=["plan", "dry-run"])
def test_plan_and_dry_run_refuse_it_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], command: tuple[str, ...]
) -> None:
    results = _under_a_file(tmp_path)
    data = base_config(tmp_path)
    data["export"]["results_dir"] = str(results)
    err = assert_refused(
        write_config(tmp_path, data), "export.results_dir", monkeypatch, capsys, command,
        text=f"results directory {results} cannot hold run",
    )  # fmt: skip
    assert f"{tmp_path / 'a-file'} is a file, not a directory" in err, err


@pytest.mark.parametrize("command", [("plan",), ("run", "--dry-run")], ids=["plan", "dry-run"])
def test_plan_and_dry_run_leave_no_results_dir_behind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], command: tuple[str, ...]
) -> None:
    data = base_config(tmp_path)
    data["export"]["results_dir"] = str(tmp_path / "new" / "results")
    code, err = run_cli([*command, str(write_config(tmp_path, data))], monkeypatch, capsys)
    assert code == cli.EXIT_OK, err
    assert not (tmp_path / "new").exists(), "the write check removes what it created"


def test_dry_run_names_a_results_dir_flag_as_the_flag(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    results = _under_a_file(tmp_path)
    config = write_config(tmp_path, base_config(tmp_path))
    code, err = run_cli(["run", "--dry-run", str(config), "--results-dir", str(results)], monkeypatch, capsys)
    assert code == cli.EXIT_USAGE, err
    assert err.startswith(f"canary: error: --results-dir: results directory {results} "), err


def test_a_results_dir_flag_is_named_as_the_flag(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    results = _under_a_file(tmp_path)
    config = write_config(tmp_path, base_config(tmp_path))
    code, err = run_cli(["run", str(config), "--results-dir", str(results)], monkeypatch, capsys)
    assert code == cli.EXIT_USAGE, err
    assert err.startswith(f"canary: error: --results-dir: results directory {results} "), err
    assert f"{tmp_path / 'a-file'} is a file, not a directory" in err, err


def test_the_problem_is_said_and_nothing_is_left_behind(tmp_path: Path) -> None:
    assert results_dir_problem(_under_a_file(tmp_path)) == f"{tmp_path / 'a-file'} is a file, not a directory"
    assert results_dir_problem(tmp_path / "a-file") == f"{tmp_path / 'a-file'} is not a directory"
    fresh = tmp_path / "new" / "results"
    assert results_dir_problem(fresh) is None
    assert fresh.is_dir() and not any(fresh.iterdir()), "the write probe is removed"


def test_a_builtin_model_not_built_stops_run_before_any_engine(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A known builtin name (here one the project would build) that is not built yet: plan and the dry
    run show the plan; run stops before its first engine, with the advice that fixes it."""
    monkeypatch.setattr(ref, "BUILTIN_MODELS", (*ref.BUILTIN_MODELS, "not-built-yet"))
    data = base_config(tmp_path)
    data["models"][0]["source"] = "builtin:not-built-yet"
    config = write_config(tmp_path, data)
    for command in (["plan"], ["run", "--dry-run"]):
        code, err = run_cli([*command, str(config)], monkeypatch, capsys)
        assert code == cli.EXIT_OK, err
    code, err = run_cli(["run", str(config)], monkeypatch, capsys, tmp_path / "results", real_target=True)
    assert code == cli.EXIT_FAILED_CELLS, err
    assert "model builtin:not-built-yet is not built" in err and "run `make model` first" in err, err


def test_a_results_dir_set_on_the_command_line_is_named_as_such(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    results = _under_a_file(tmp_path)
    config = write_config(tmp_path, base_config(tmp_path))
    assert_refused(
        config, "export.results_dir", monkeypatch, capsys, ("run",), "--set", f"export.results_dir={results}",
        source=f"--set export.results_dir={results}",
    )  # fmt: skip
