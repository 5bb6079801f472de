"""A real, throwaway PostgreSQL server: initdb + pg_ctl in a temp dir (Debian's postgresql package:
`make postgres-tools`), listening on a free port of 127.0.0.1 only with trust auth, stopped and
removed on the way out. As root the server runs as the `postgres` user (initdb refuses root).
Used by tests/history/conftest.py (once per session) and tests/bench/history_bench.py.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

from canary.core.ports import free_port


class ServerUnavailable(RuntimeError):
    """The server could not be found, initialised or started."""


START_TIMEOUT_S = 60
STOP_TIMEOUT_S = 30


def _bindir() -> Path:
    configured = os.environ.get("PG_BINDIR", "")
    if configured and (Path(configured) / "initdb").exists():
        return Path(configured)
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(Path(p).parts[-3]))
    if not found:
        raise ServerUnavailable(
            "PostgreSQL server binaries not found: run `make postgres-tools` (Debian package postgresql)"
        )
    return Path(found[-1]).parent


def _as_user(args: list[str], user: str | None) -> list[str]:
    return ["runuser", "-u", user, "--", *args] if user else args


def _run(args: list[str], user: str | None, timeout: float) -> None:
    result = subprocess.run(_as_user(args, user), capture_output=True, text=True, timeout=timeout, check=False)
    if result.returncode != 0:
        raise ServerUnavailable(f"{' '.join(args)} exited {result.returncode}:\n{result.stdout}\n{result.stderr}")


@contextlib.contextmanager
def throwaway_server() -> Iterator[str]:
    """Start a server; yield its URL (no database part: add /postgres or your own); stop and remove it."""
    bindir = _bindir()
    user = None
    if os.geteuid() == 0:
        user = os.environ.get("PG_TEST_OS_USER", "postgres")
        try:
            pwd.getpwnam(user)
        except KeyError:
            raise ServerUnavailable(
                f"running as root and there is no user {user!r} to run PostgreSQL as (set PG_TEST_OS_USER)"
            ) from None
    base = Path(tempfile.mkdtemp(prefix="canary-pg-"))
    data, log = base / "data", base / "server.log"
    if user:
        entry = pwd.getpwnam(user)
        os.chown(base, entry.pw_uid, entry.pw_gid)
    port = free_port()
    started = False
    try:
        _run(
            [str(bindir / "initdb"), "-D", str(data), "-U", "canary", "-A", "trust", "-E", "UTF8", "--no-sync"],
            user,
            timeout=120,
        )
        options = f"-p {port} -k {base} -c listen_addresses=127.0.0.1 -c fsync=off"
        _run(
            [
                str(bindir / "pg_ctl"),
                "-D",
                str(data),
                "-l",
                str(log),
                "-o",
                options,
                "-w",
                "-t",
                str(START_TIMEOUT_S),
                "start",
            ],
            user,
            timeout=START_TIMEOUT_S + 10,
        )
        started = True
        yield f"postgresql://canary@127.0.0.1:{port}"
    finally:
        if started:
            _run(
                [str(bindir / "pg_ctl"), "-D", str(data), "-m", "fast", "-w", "-t", str(STOP_TIMEOUT_S), "stop"],
                user,
                timeout=STOP_TIMEOUT_S + 10,
            )
        shutil.rmtree(base, ignore_errors=True)
