"""`canary`'s exit codes are what its --help and docstring say, for the usage and config paths
(the run outcomes are tested in test_outcome.py). In process, on the real configs; starts nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

from canary import cli
from canary.errors import CanaryError, ConfigError, UsageError
from canary.paths import CONFIGS_DIR

DEFAULT = str(CONFIGS_DIR / "cpu-default.yaml")


def _error_line(capsys: pytest.CaptureFixture[str]) -> str:
    """The one line a failed command printed (nothing on stdout, no traceback)."""
    captured = capsys.readouterr()
    assert captured.out == ""
    (line,) = captured.err.splitlines()
    assert line.startswith("canary: error: ")
    return line


def test_an_only_that_matches_no_cell_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["plan", DEFAULT, "--only", "nope"]) == cli.EXIT_USAGE == UsageError.exit_code
    assert _error_line(capsys) == (
        f"canary: error: --only nope matches no cell of {DEFAULT}; list the cell ids with `canary plan {DEFAULT} --all`"
    )


def test_an_only_with_a_typo_names_the_closest_cell_ids(capsys: pytest.CaptureFixture[str]) -> None:
    # one --only of two matching nothing is the same mistake: it would run half of what was asked
    assert cli.main(["plan", DEFAULT, "--only", "agg.cpu_attn.b32", "--only", "pd.cpu_attn.p32-d46"]) == 2
    line = _error_line(capsys)
    assert "--only pd.cpu_attn.p32-d46 matches no cell of" in line
    assert "(closest: pd.cpu_attn.p32-d64, pd.cpu_attn.p32-d32" in line and f"`canary plan {DEFAULT} --all`" in line


def test_an_unknown_key_set_by_an_override_blames_the_override_with_a_did_you_mean(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`--set checks.acuracy.limit=50` used to say `configs/cpu-default.yaml: checks.acuracy: unknown key`."""
    assert cli.main(["plan", DEFAULT, "--set", "checks.acuracy.limit=50"]) == cli.EXIT_USAGE
    line = _error_line(capsys)
    assert line.startswith("canary: error: --set checks.acuracy.limit=50: checks.acuracy: unknown key: ")
    assert "did you mean checks.accuracy?" in line and DEFAULT not in line


def test_a_bad_value_set_by_an_override_blames_the_override(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["plan", DEFAULT, "--set", "checks.accuracy.limit=abc"]) == cli.EXIT_USAGE
    assert _error_line(capsys).startswith("canary: error: --set checks.accuracy.limit=abc: checks.accuracy.limit: ")


def test_an_unknown_key_in_a_file_names_the_file_and_the_closest_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.yaml"
    text = (CONFIGS_DIR / "cpu-default.yaml").read_text()
    bad.write_text(text.replace("    batch_size: 25\n", "    batch_sise: 25\n", 1))
    assert cli.main(["plan", str(bad)]) == cli.EXIT_USAGE
    line = _error_line(capsys)
    assert line.startswith(f"canary: error: {bad}: checks.accuracy.batch_sise: unknown key: ")
    assert "did you mean checks.accuracy.batch_size?" in line


def test_a_config_that_is_not_there_lists_the_configs_closest_first(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["plan", "configs/cpu-defalt.yaml"]) == cli.EXIT_USAGE
    line = _error_line(capsys)
    assert line.startswith("canary: error: configs/cpu-defalt.yaml: file not found; the configs in ")
    listed = line.split("/: ", 1)[1].split(", ")
    assert listed[0] == "cpu-default.yaml"
    assert {"h200-mrv2-pd.yaml", "selftest.yaml"} <= set(listed)
    assert "backends.yaml" not in listed and "signatures.yaml" not in listed  # catalogs, not matrix configs


def _exit_codes_of(help_text: str) -> dict[int, str]:
    block = help_text.split("exit codes:\n", 1)[1]
    rows = [line.split(None, 1) for line in block.splitlines() if line.startswith("  ")]
    return {int(code): meaning for code, meaning in rows}


@pytest.mark.parametrize("command", sorted(cli.COMMANDS))
def test_each_command_help_lists_only_its_own_exit_codes(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    """`run --help` used to list `catalog: a difference` under code 1."""
    with pytest.raises(SystemExit):
        cli.main([command, "--help"])
    codes = _exit_codes_of(capsys.readouterr().out)
    assert codes == cli.command_exit_codes(command)
    assert (cli.EXIT_INCONCLUSIVE in codes) == (command in ("run", "check", "bisect"))  # bisect: no culprit named
    assert any("catalog" in m or "vLLM's source" in m for m in codes.values()) == (command == "catalog")


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


def test_a_long_run_started_with_sigint_ignored_still_stops_on_sigint() -> None:
    # `canary run ... &` from a script inherits SIGINT ignored; `kill -INT` must still stop it (exit 130)
    import os
    import signal
    import subprocess
    import sys
    import textwrap

    child = textwrap.dedent(
        """
        import os, signal, sys, time
        from canary import cli
        cli.COMMANDS["run"] = lambda args, console: (os.kill(os.getpid(), signal.SIGINT), time.sleep(5), 0)[-1]
        sys.exit(cli.main(["run", sys.argv[1]]))
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", child, DEFAULT],
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(Path(cli.__file__).resolve().parent.parent)},
    )
    assert (done.returncode, done.stderr.strip().splitlines()[-1]) == (cli.EXIT_INTERRUPTED, "canary: interrupted")
