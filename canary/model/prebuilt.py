"""The tiny model as `make model` builds it, shipped in the repository (issue 42: a fresh clone's first run in
6 minutes; training it takes ~2 minutes of 2 cores and needs the engine venv's torch first).

Stdlib only, like canary.model.params, so `make model` can unpack it before any venv exists::

    python -m canary.model.prebuilt --out-root .cache/models --seed 0 --link tiny   # unpack + link, or exit 1
    python -m canary.model.prebuilt --pack --out-root .cache/models --seed 0        # refresh the shipped archive
    python -m canary.model.prebuilt --shipped --out-root .cache/models               # is one shipped? (exit 0/1)

The archive is named by the build's cache key (canary.model.params: the builder's sources and every
parameter), so an edit of the recipe makes the shipped archive stale: `make model` then builds from source
as before, and tests/unit/model/test_prebuilt.py fails until `make model-prebuilt` ships the new build.
Only the default seed is shipped. The manifest's files_sha256 is checked after unpacking.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import shutil
import sys
import tarfile
import tempfile
from collections.abc import Sequence
from pathlib import Path

from canary.model.params import KEY_LENGTH, MANIFEST_NAME, cache_key, default_params, is_complete, model_dir

PREBUILT_DIR = Path(__file__).resolve().parent / "prebuilt"
"""Where the shipped archives live (one per shipped cache key)."""
ARCHIVE_PREFIX = "tiny-"


class PrebuiltError(RuntimeError):
    """A shipped archive that does not unpack to the build its name promises."""


def archive_path(seed: int = 0) -> Path:
    """The archive that would hold the build of `seed` for the current sources."""
    return PREBUILT_DIR / f"{ARCHIVE_PREFIX}{cache_key(default_params(seed))[:KEY_LENGTH]}.tar.xz"


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def verify(directory: Path, key: str) -> None:
    """The unpacked directory is the build of `key`: its manifest says so and every file hashes as listed."""
    manifest = json.loads((directory / MANIFEST_NAME).read_text(encoding="utf-8"))
    if manifest.get("cache_key") != key:
        raise PrebuiltError(f"manifest cache_key {manifest.get('cache_key')!r} is not {key!r}")
    files: dict[str, str] = manifest.get("files_sha256", {})
    if not files:
        raise PrebuiltError("manifest lists no files_sha256")
    for name, expected in files.items():
        found = _sha256(directory / name) if (directory / name).is_file() else "missing"
        if found != expected:
            raise PrebuiltError(f"{name}: sha256 {found} is not the manifest's {expected}")


def unpack(out_root: Path, seed: int = 0) -> Path | None:
    """The model directory under `out_root`, unpacked from the shipped archive (already there: reused); None
    when no archive matches the current sources. Atomic: a staging directory renamed into place."""
    params = default_params(seed)
    final = model_dir(out_root, params)
    if is_complete(final):
        return final
    archive = archive_path(seed)
    if not archive.is_file():
        return None
    out_root.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".prebuilt-", dir=out_root))
    try:
        with tarfile.open(archive, "r:xz") as tar:
            tar.extractall(staging, filter="data")
        verify(staging, cache_key(params))
        for path in [staging, *staging.rglob("*")]:
            path.chmod(0o755 if path.is_dir() else 0o644)
        if final.exists():  # an incomplete earlier attempt
            shutil.rmtree(final)
        os.replace(staging, final)
    finally:
        if staging.exists():
            shutil.rmtree(staging)
    return final


def link(out_root: Path, name: str, target: Path) -> None:
    """Point `out_root/name` at `target` (relative symlink, swapped in atomically), as the builder's --link."""
    staging = out_root / f".{name}.link"
    staging.unlink(missing_ok=True)
    staging.symlink_to(os.path.relpath(target, out_root))
    os.replace(staging, out_root / name)


def pack(out_root: Path, seed: int = 0) -> Path:
    """Write the built model of `seed` (complete, verified) as the shipped archive; drop older archives.
    Reproducible: sorted names, zero times and owners."""
    params = default_params(seed)
    source = model_dir(out_root, params)
    if not is_complete(source):
        raise PrebuiltError(f"{source} is not a complete build: run `make model` first")
    verify(source, cache_key(params))
    PREBUILT_DIR.mkdir(parents=True, exist_ok=True)
    target = archive_path(seed)
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:xz") as tar:
        for path in sorted(p for p in source.rglob("*") if p.is_file()):
            info = tar.gettarinfo(str(path), arcname=str(path.relative_to(source)))
            info.mtime, info.uid, info.gid, info.uname, info.gname, info.mode = 0, 0, 0, "", "", 0o644
            with path.open("rb") as handle:
                tar.addfile(info, handle)
    staging = target.with_suffix(".partial")
    staging.write_bytes(buffer.getvalue())
    os.replace(staging, target)
    for old in PREBUILT_DIR.glob(f"{ARCHIVE_PREFIX}*.tar.xz"):
        if old != target:
            old.unlink()
    return target


def main(argv: Sequence[str] | None = None) -> int:
    """Unpack (and link) the shipped build, exit 1 when none matches; or --pack it; or say if one --shipped."""
    parser = argparse.ArgumentParser(description="The tiny model shipped with the repository.")
    parser.add_argument("--out-root", type=Path, required=True, help="model cache root (.cache/models)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--link", metavar="NAME", help="point OUT_ROOT/NAME at the model")
    parser.add_argument("--pack", action="store_true", help="ship the built model as the repository's archive")
    parser.add_argument("--shipped", action="store_true", help="print the matching archive; exit 1 if none ships")
    args = parser.parse_args(argv)
    if args.shipped:
        print(archive_path(args.seed))
        return 0 if archive_path(args.seed).is_file() else 1
    try:
        if args.pack:
            print(pack(args.out_root, args.seed))
            return 0
        found = unpack(args.out_root, args.seed)
    except (PrebuiltError, OSError, tarfile.TarError, ValueError) as exc:
        print(f"canary.model.prebuilt: {exc}", file=sys.stderr)
        return 2
    if found is None:
        print(f"canary.model.prebuilt: no shipped build for these sources ({archive_path(args.seed).name})")
        return 1
    if args.link:
        link(args.out_root, args.link, found)
    print(found.resolve())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
