"""`canary`'s exit codes are what its --help and docstring say, for the usage and config paths
(the run outcomes are tested in test_outcome.py). In process, on the real configs; starts nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

from canary import cli
from canary.errors import CanaryError, ConfigError, UsageError
from canary.paths import CONFIGS_DIR

DEFAULT = str(CONFIGS_DIR / "cpu-default.yaml")


def test_an_only_that_matches_no_cell_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["plan", DEFAULT, "--only", "nope"]) == cli.EXIT_USAGE == UsageError.exit_code
    assert "canary: error: --only ['nope'] matches no cell of" in capsys.readouterr().err


def test_a_bad_config_exits_2_naming_file_and_key(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text((CONFIGS_DIR / "cpu-default.yaml").read_text() + "\nno_such_key: 1\n")
    assert cli.main(["plan", str(bad)]) == cli.EXIT_USAGE == ConfigError.exit_code
    err = capsys.readouterr().err
    assert str(bad) in err and "no_such_key" in err and "Traceback" not in err


def test_bad_arguments_exit_2_through_argparse() -> None:
    with pytest.raises(SystemExit) as stopped:
        cli.main(["plan"])
    assert stopped.value.code == cli.EXIT_USAGE


def test_a_plain_canary_error_exits_1(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    def refuse(*_: object) -> int:
        raise CanaryError("the target cannot start")

    monkeypatch.setitem(cli.COMMANDS, "plan", refuse)
    assert cli.main(["plan", DEFAULT]) == cli.EXIT_FAILED_CELLS
    assert capsys.readouterr().err == "canary: error: the target cannot start\n"


def test_the_docstring_names_every_subcommand() -> None:
    first_line = (cli.__doc__ or "").splitlines()[0]
    assert all(command in first_line for command in cli.COMMANDS), first_line


def test_the_exit_code_table_holds_every_exit_constant_once() -> None:
    constants = {name: value for name, value in vars(cli).items() if name.startswith("EXIT_") and type(value) is int}
    table = {e.name: e.code for e in cli.EXIT_CODES}
    assert table == constants
    assert len(set(table.values())) == len(table)
    for e in cli.EXIT_CODES:  # --help prints each row as the table says
        assert f"\n  {e.code:<4} {e.meaning}" in cli.build_parser().format_help()
