"""Errors that reach the user as one clear line and a non-zero exit, never a traceback."""

from __future__ import annotations

import sys


def warn_stderr(message: str) -> None:
    """A warning line on stderr, `canary: warning: ...` (stdout stays a command's own output, such as JSON)."""
    print(f"canary: warning: {message}", file=sys.stderr, flush=True)


class CanaryError(Exception):
    """A user-facing error. The CLI prints it on one line and exits with `exit_code`."""

    exit_code = 1


class UsageError(CanaryError):
    """A command-line argument the command cannot use (argparse's own errors also exit 2). Exits 2."""

    exit_code = 2


class ConfigError(CanaryError):
    """The configuration (file, --set override or catalog) is invalid. Exits 2."""

    exit_code = 2

    def __init__(self, source: str, key_path: str, message: str) -> None:
        self.source = source
        self.key_path = key_path
        self.message = message
        where = f"{source}: {key_path}" if key_path else source
        super().__init__(f"{where}: {message}")
