"""Import recorded runs (results/<run>/results.json) into the history."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from pydantic import ValidationError

from canary.export.history.rows import flatten
from canary.export.history.store import HistoryError, HistoryStore
from canary.judge.bisection import read_file
from canary.judge.results import RunResult


def results_files(paths: Iterable[Path]) -> list[Path]:
    """results.json files: given directly, in a run directory, or in run directories under a root."""
    found: list[Path] = []
    for path in paths:
        if path.is_file():
            found.append(path)
        elif (path / "results.json").is_file():
            found.append(path / "results.json")
        elif path.is_dir():
            found.extend(sorted(p for p in path.glob("*/results.json") if not p.parent.is_symlink()))
        else:
            raise HistoryError(f"{path}: no such file or directory")
    return found


def load_run(path: Path) -> RunResult:
    """A results.json as a RunResult, with a clear error naming the file."""
    try:
        return RunResult.model_validate_json(path.read_bytes())
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise HistoryError(f"{path}: not a canary results.json ({where}: {first['msg']})") from exc
    except OSError as exc:
        raise HistoryError(f"{path}: cannot read: {exc}") from exc


def import_paths(store: HistoryStore, paths: Iterable[Path]) -> list[str]:
    """Import every results.json found (with the bisect.json beside it, if any); returns the run ids
    in import order."""
    given = list(paths)
    files = results_files(given)
    if not files:
        raise HistoryError(f"no results.json under {', '.join(str(p) for p in given)}")
    imported: list[str] = []
    for path in files:
        run = load_run(path)
        store.write(flatten(run, read_file(path.parent)))
        imported.append(run.run_id)
    return imported
