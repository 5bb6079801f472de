"""The one parser and hash of a patch series (the docker/patches format).

A series file lists patch file names, one per line, relative to the series file's directory, in
the order they apply (-p1, `a/vllm/...` paths, no fuzz); `#` starts a comment. Every `*.patch`
next to the series file must be listed (an unlisted patch is almost always a forgotten one).

The series hash is sha256 over the lines "<sha256 of patch>  <name>\\n" in series order. It names a
patched image (canary.images.table: `<registry>/vllm-patched:v<base>-<hash[:12]>`), is the image label
dev.vllm.canary.patch-series-sha256 and keys the local overlays (canary.images.overlay).

Standard library only: docker/apply-series.sh runs this file with the image's own python3 inside
the vLLM image build, so the hash is computed one way everywhere.

    python3 canary/images/patchseries.py hash docker/patches/series
    python3 canary/images/patchseries.py list docker/patches/series
"""

from __future__ import annotations

import argparse
import hashlib
import re
import sys
from dataclasses import dataclass
from pathlib import Path

HASH_PREFIX_LEN = 12
"""Characters of the series hash that go into an image tag."""


class SeriesError(ValueError):
    """A series file that cannot be used: missing, empty, or naming files that are not there."""


@dataclass(frozen=True)
class Series:
    """A parsed series file."""

    path: Path
    patches: tuple[Path, ...]

    @property
    def names(self) -> list[str]:
        """Patch file names in order."""
        return [p.name for p in self.patches]


def read_series(path: str | Path) -> Series:
    """Parse and validate a series file; SeriesError names the file and the entry at fault."""
    series_path = Path(path)
    if not series_path.is_file():
        raise SeriesError(f"series file not found: {series_path}")
    entries: list[str] = []
    for line in series_path.read_text(encoding="utf-8").splitlines():
        entry = re.sub(r"\s", "", line.split("#", 1)[0])
        if not entry:
            continue
        if entry.startswith("/") or ".." in entry or "/" in entry:
            raise SeriesError(f"{series_path}: entry {entry!r} must be a file name inside {series_path.parent}")
        if entry in entries:
            raise SeriesError(f"{series_path}: {entry!r} is listed twice")
        if not (series_path.parent / entry).is_file():
            raise SeriesError(f"{series_path}: {entry!r} is listed but {series_path.parent / entry} does not exist")
        entries.append(entry)
    if not entries:
        raise SeriesError(f"{series_path} lists no patches")
    for unlisted in sorted(p.name for p in series_path.parent.glob("*.patch") if p.name not in entries):
        raise SeriesError(f"{series_path.parent / unlisted} is not listed in {series_path} (add it, or delete it)")
    return Series(path=series_path, patches=tuple(series_path.parent / e for e in entries))


def series_hash(series: Series) -> str:
    """sha256 of the lines "<sha256 of patch>  <name>\\n" in series order."""
    lines = "".join(f"{hashlib.sha256(p.read_bytes()).hexdigest()}  {p.name}\n" for p in series.patches)
    return hashlib.sha256(lines.encode()).hexdigest()


def main(argv: list[str] | None = None) -> int:
    """`hash SERIES` prints the series hash; `list SERIES` prints the patch names in order."""
    parser = argparse.ArgumentParser(prog="patchseries.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("action", choices=("hash", "list"))
    parser.add_argument("series", help="series file (docker/patches format)")
    args = parser.parse_args(argv)
    try:
        series = read_series(args.series)
    except SeriesError as exc:
        print(f"patchseries: {exc}", file=sys.stderr)
        return 1
    print(series_hash(series) if args.action == "hash" else "\n".join(series.names))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
