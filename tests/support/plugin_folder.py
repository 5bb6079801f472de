"""A throwaway plug-in folder for the "adding X touches only its own folder" tests (a check, a workload):
the folder's files written into a temporary root, and a probe script run in a fresh interpreter with that
root on the plug-in path; the probe prints JSON."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from canary.paths import REPO_ROOT


def probe_plugin_folder(
    root: Path, name: str, files: Mapping[str, str], probe: str, config: Mapping[str, Any]
) -> dict[str, Any]:
    """Write `files` into root/name, run `probe` (argv: root, the config as JSON) from the repository root,
    and return what it printed as JSON; a probe that fails fails the test with its stderr."""
    folder = root / name
    folder.mkdir()
    for file_name, text in files.items():
        (folder / file_name).write_text(textwrap.dedent(text).lstrip(), encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-c", probe, str(root), json.dumps(config)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    out: dict[str, Any] = json.loads(done.stdout)
    return out
