"""Refused at the door: run `canary plan`, `canary run --dry-run` and `canary run` in process on a bad
config and prove each exits with the expected code before anything started.

The evidence that nothing started: the target the run would use is replaced by one that records every
call (deploy, describe) and fails loudly, no child process of the test appeared, and the results
directory holds no run directory.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psutil
import pytest
import yaml

from canary import cli
from canary.paths import CONFIGS_DIR
from canary.plan.cell import Cell
from canary.targets.base import Deployment

COMMANDS: tuple[tuple[str, ...], ...] = (("plan",), ("run", "--dry-run"), ("run",))
COMMAND_IDS = ["plan", "dry-run", "run"]


def base_config(tmp_path: Path) -> dict[str, Any]:
    """configs/cpu-default.yaml as data, its results directory under tmp_path."""
    data = yaml.safe_load((CONFIGS_DIR / "cpu-default.yaml").read_text())
    assert isinstance(data, dict)
    data["export"]["results_dir"] = str(tmp_path / "results")
    return data


def write_config(tmp_path: Path, data: dict[str, Any], name: str = "bad.yaml") -> Path:
    """The config as a YAML file under tmp_path."""
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


class LoudTarget:
    """A target that records every call and fails the test's run if it is asked to deploy."""

    kind = "local"

    def __init__(self) -> None:
        self.calls: list[str] = []

    @contextmanager
    def deploy(self, cell: Cell, log_dir: Path) -> Iterator[Deployment]:
        self.calls.append(f"deploy {cell.id}")
        raise AssertionError(f"deploy of {cell.id} was called")
        yield  # pragma: no cover

    def describe(self, cell: Cell) -> dict[str, object]:
        self.calls.append(f"describe {cell.id}")
        return {}


def loud_target(monkeypatch: pytest.MonkeyPatch, *, real: bool = False) -> LoudTarget:
    """Install a LoudTarget wherever `canary run` creates its target; real: keep the real local target
    (and what it checks before a run) but make its deploy the LoudTarget's."""
    import canary.run.cells as runner
    import canary.run.orchestrate as orchestrate
    from canary.targets.local.target import LocalTarget

    target = LoudTarget()
    if real:
        monkeypatch.setattr(LocalTarget, "deploy", lambda _self, cell, log_dir: target.deploy(cell, log_dir))
        return target

    def create(_config: object, **_: object) -> LoudTarget:
        return target

    monkeypatch.setattr(runner, "create_target", create)
    monkeypatch.setattr(orchestrate, "create_target", create)
    return target


def run_cli(
    argv: list[str],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    results_dir: Path | None = None,
    *,
    real_target: bool = False,
) -> tuple[int, str]:
    """`canary ARGV` in process: (exit code, stderr), asserting that nothing was deployed, no child
    process appeared and (where given) results_dir holds no run directory. real_target: see loud_target."""
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    capsys.readouterr()
    with monkeypatch.context() as patches:  # undone on return: the next call installs its own
        target = loud_target(patches, real=real_target)
        code = cli.main(argv)
    err = capsys.readouterr().err
    after = {p.pid for p in psutil.Process().children(recursive=True)}
    assert not [c for c in target.calls if c.startswith("deploy")], target.calls
    assert after <= before, f"child processes appeared: {after - before}"
    if results_dir is not None and results_dir.is_dir():
        assert not [p for p in results_dir.iterdir() if p.is_dir()], list(results_dir.iterdir())
    assert "Traceback" not in err
    return code, err


def assert_refused(
    config: Path,
    key_path: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    command: tuple[str, ...],
    *extra: str,
    text: str = "",
    source: str = "",
) -> str:
    """`canary COMMAND CONFIG EXTRA` exits 2 naming the source (the file, or the `--set` override that
    wrote the key) and the key path (and text); returns stderr."""
    results = Path(yaml.safe_load(config.read_text())["export"]["results_dir"])
    code, err = run_cli([*command, str(config), *extra], monkeypatch, capsys, results)
    assert code == cli.EXIT_USAGE, err
    assert err.startswith(f"canary: error: {source or config}: {key_path}: "), err
    assert text in err, err
    return err
