"""The GPUs this machine shows, by nvidia-smi index (what `target.devices.gpus: all` resolves to)."""

from __future__ import annotations

import shutil
import subprocess

from canary.targets.engine_env import SYSTEM_PATH

QUERY = ["--query-gpu=index", "--format=csv,noheader,nounits"]
TIMEOUT_S = 20.0
"""nvidia-smi answers in well under a second; a hung driver must not hang the canary."""


def parse_indices(text: str) -> tuple[int, ...] | None:
    """nvidia-smi's index column as ints (None: not such a listing)."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if not all(line.isdigit() for line in lines):
        return None
    return tuple(int(line) for line in lines)


def listed_gpus(timeout_s: float = TIMEOUT_S) -> tuple[int, ...] | None:
    """The indices nvidia-smi lists; None when there is no nvidia-smi or it fails (no driver, no GPU)."""
    program = shutil.which("nvidia-smi") or shutil.which("nvidia-smi", path=SYSTEM_PATH)
    if program is None:
        return None
    try:
        done = subprocess.run(
            [program, *QUERY], capture_output=True, text=True, timeout=timeout_s, check=False, env={"PATH": SYSTEM_PATH}
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if done.returncode != 0:
        return None
    gpus = parse_indices(done.stdout)
    return gpus or None
