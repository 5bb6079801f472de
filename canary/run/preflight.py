"""What `canary run` checks before it creates its run directory: that the results directory takes one.

`canary plan` and `canary run --dry-run` check it too (dry=True), so a config that could never record a
run is refused at the door, not after a night's deploy; they leave nothing behind (a directory the check
created is removed again). What a target needs of this machine (the local target:
every builtin model built) the target checks itself before its first deploy (`preflight`, called
by canary.run.cells.execute).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from canary.config import CanaryConfig
from canary.errors import ConfigError, UsageError

RESULTS_DIR_KEY = "export.results_dir"
RESULTS_DIR_FLAG = "--results-dir"


def check_results_dir(
    config: CanaryConfig, *, config_path: str, results_from: str = RESULTS_DIR_KEY, dry: bool = False
) -> None:
    """Refuse a run that could not record its results, before anything starts.

    results_from: where the results directory came from, RESULTS_DIR_KEY (the config) or RESULTS_DIR_FLAG.
    dry: plan or dry run, which write nothing (what the check creates is removed)."""
    why = results_dir_problem(Path(config.export.results_dir), keep=not dry)
    if why is not None:
        given, absolute = config.export.results_dir, Path(config.export.results_dir).absolute()
        where = given if Path(given) == absolute else f"{given} ({absolute})"
        message = f"results directory {where} cannot hold run directories: {why}"
        if results_from == RESULTS_DIR_FLAG:
            raise UsageError(f"{RESULTS_DIR_FLAG}: {message}")
        raise ConfigError(config_path, RESULTS_DIR_KEY, message)


def results_dir_problem(root: Path, *, keep: bool = True) -> str | None:
    """Why no run directory can be written under root (None: one can). Creates root if missing, as the run
    would; removes what it created when it then cannot write there, or (keep=False) in any case."""
    existing = next((p for p in (root, *root.absolute().parents) if p.exists()), None)
    if existing is not None and not existing.is_dir():
        return f"{existing} is not a directory" if existing == root else f"{existing} is a file, not a directory"
    created = [p for p in (root.absolute(), *root.absolute().parents) if not p.exists()]
    try:
        root.mkdir(parents=True, exist_ok=True)
        handle, probe = tempfile.mkstemp(dir=root, prefix=".canary-write-check-")
        os.close(handle)
        os.unlink(probe)
    except OSError as exc:
        _remove(created)
        return exc.strerror or str(exc)
    if not keep:
        _remove(created)
    return None


def _remove(created: list[Path]) -> None:
    """Remove the directories the check created, deepest first."""
    for path in created:
        try:
            path.rmdir()
        except OSError:
            break
