"""canary.plan.validate: a matrix in which no cell runs, and an expectation that matches no cell of the
full matrix, exit 2 at plan, run --dry-run and run before anything starts (tests/support/refusal.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from canary import cli
from canary.config.load import load_config
from canary.errors import ConfigError
from canary.paths import CONFIGS_DIR
from canary.plan.validate import MAX_REASON_LINES, validate_plan
from tests.support.refusal import COMMAND_IDS, COMMANDS, assert_refused, base_config, run_cli, write_config


def _kernel_48(tmp_path: Path, block_sizes: list[int] | None = None) -> Path:
    """cpu-default with a baseline whose CPU_ATTN kernel blocks (48) divide none of its block sizes."""
    data = base_config(tmp_path)
    data["images"]["baseline"]["kernel_block_sizes"] = {"CPU_ATTN": [48]}
    data["matrix"].update(include=[], expectations=[])
    if block_sizes is not None:
        data["matrix"]["prefill_block_sizes"] = block_sizes
    return write_config(tmp_path, data)


@pytest.mark.parametrize("command", COMMANDS, ids=COMMAND_IDS)
def test_a_matrix_in_which_no_cell_runs_is_refused_with_the_reasons(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], command: tuple[str, ...]
) -> None:
    err = assert_refused(_kernel_48(tmp_path), "matrix", monkeypatch, capsys, command, text="none of its 6 cells")
    reasons = err.splitlines()[1:]
    assert reasons == [
        f"  2 impossible: no common block size for {size} (prefill): CPU_ATTN needs kernel block sizes [48] "
        f"(e.g. agg.cpu_attn.b{size}.auto.v1.baseline)"
        for size in (128, 16, 32)
    ], err


def test_many_reasons_are_capped(tmp_path: Path) -> None:
    config = _kernel_48(tmp_path, [16 * n for n in range(1, 46) if n % 3])  # 30 sizes, none a multiple of 48
    with pytest.raises(ConfigError) as info:
        validate_plan(load_config(config), str(config))
    lines = info.value.message.splitlines()
    assert len(lines) == 1 + MAX_REASON_LINES, lines
    assert lines[-1] == f"  ... and {30 - MAX_REASON_LINES + 1} more reasons"


def test_unsupported_cells_name_run_unsupported(tmp_path: Path) -> None:
    data = base_config(tmp_path)
    data["matrix"].update(include=[], expectations=[], runners=["v2"])
    config = write_config(tmp_path, data)
    with pytest.raises(ConfigError, match="unsupported on this platform: model runner v2") as info:
        validate_plan(load_config(config), str(config))
    assert "matrix.run_unsupported: true runs the unsupported ones anyway" in info.value.message


def test_an_exclude_that_removes_everything_is_refused(tmp_path: Path) -> None:
    data = base_config(tmp_path)
    data["matrix"]["exclude"] = [{"backend": "CPU_ATTN"}]
    config = write_config(tmp_path, data)
    with pytest.raises(ConfigError, match="removes every cell") as info:
        validate_plan(load_config(config), str(config))
    assert info.value.key_path == "matrix.exclude"


@pytest.mark.parametrize("command", COMMANDS, ids=COMMAND_IDS)
def test_an_expectation_with_a_typo_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], command: tuple[str, ...]
) -> None:
    data = base_config(tmp_path)
    data["matrix"]["expectations"][2]["match"]["image"] = "kernal32"
    assert_refused(
        write_config(tmp_path, data),
        "matrix.expectations.2.match",
        monkeypatch,
        capsys,
        command,
        text="no cell has image 'kernal32' (the matrix has baseline, kernel32)",
    )


def test_an_expectation_whose_fields_never_meet_is_refused(tmp_path: Path) -> None:
    data = base_config(tmp_path)
    data["matrix"]["expectations"][0]["match"] = {"block_size": 16, "topology": "pd-nixl", "image": "kernel32"}
    config = write_config(tmp_path, data)
    with pytest.raises(ConfigError, match="matches some cell, but no cell has all of") as info:
        validate_plan(load_config(config), str(config))
    assert info.value.key_path == "matrix.expectations.0.match"


@pytest.mark.parametrize("narrowing", [["--only", "agg.cpu_attn.b32"], ["--pairwise"]])
def test_expectations_are_matched_against_the_full_matrix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], narrowing: list[str]
) -> None:
    """--only and --pairwise narrow what runs, not what the expectations are checked against."""
    config = write_config(tmp_path, base_config(tmp_path))
    code, err = run_cli(["plan", str(config), *narrowing], monkeypatch, capsys)
    assert code == cli.EXIT_OK, err


CATALOGS = ("backends.yaml", "signatures.yaml")


@pytest.mark.parametrize("name", sorted(p.name for p in CONFIGS_DIR.glob("*.yaml") if p.name not in CATALOGS))
def test_every_shipped_config_passes(name: str) -> None:
    path = CONFIGS_DIR / name
    assert any(c.status == "planned" for c in validate_plan(load_config(path), str(path)))
