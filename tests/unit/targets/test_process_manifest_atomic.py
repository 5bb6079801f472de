"""processes.json, the manifest a crashed controller's cleanup reads, is replaced atomically (issue 41): every
update is a new file renamed over the old one, so a crash mid-write leaves the previous manifest whole, never
half of one. Real processes (`sleep`), started and stopped by canary.targets.processes."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from canary.targets import processes


def test_each_update_replaces_the_manifest_whole(tmp_path: Path) -> None:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    sleep = [sys.executable, "-c", "import time; time.sleep(60)"]
    first = processes.start("prefill", sleep, env, tmp_path / "prefill.log")
    started = [first]
    try:
        manifest = tmp_path / "processes.json"
        inode = manifest.stat().st_ino
        started.append(processes.start("decode", sleep, env, tmp_path / "decode.log"))
        assert manifest.stat().st_ino != inode, "rewritten in place: a crash mid-write would leave half a manifest"
        assert {e["role"] for e in json.loads(manifest.read_text())} == {"prefill", "decode"}
        assert sorted(p.name for p in tmp_path.iterdir()) == ["decode.log", "prefill.log", "processes.json"]
    finally:
        processes.stop(started)
