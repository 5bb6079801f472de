"""The command line of a page generated from the code (the config and metrics references): print it, or write it."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

from canary.core.atomic import write_atomic


def page_main(argv: list[str] | None, *, description: str, page: Callable[[], str], default: Path) -> int:
    """Print the page, or `--write PATH` it atomically (normally `default`, which a test keeps current)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--write", type=Path, metavar="PATH", help=f"write the page to this file (normally {default})")
    args = parser.parse_args(argv)
    if args.write:
        write_atomic(args.write, page())
    else:
        sys.stdout.write(page())
    return 0
