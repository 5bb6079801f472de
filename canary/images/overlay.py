"""Patch overlay: a patch series applied to a COPY of an engine venv's installed `vllm` package.

The local-target counterpart of docker/vllm-patched: a config names a series file
(`images.<key>.patches`, the docker/patches format) and the engine runs with the patched copy
first on its PYTHONPATH. This is how the selftest plants faults into the real engine, and how a
user canaries a patch on one machine before building an image. The base install is never
modified.

Series format and hash: canary.images.patchseries (the one parser, also what docker/apply-series.sh runs):
one patch file name per line, applied in order with -p1 (`a/vllm/...` paths) and no fuzz.

Overlays are cached under CACHE_ROOT/<key>/ where the key hashes (engine python, vllm package
location, vllm version, series hash). A build happens in a temporary directory next to it and is
renamed into place at the end, so a directory under CACHE_ROOT is always complete; concurrent
builders of the same key both succeed (the loser discards its copy).

    python -m canary.images.overlay --series tests/faults/01-nixl-layout/series   # prints the dir
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from canary.errors import CanaryError
from canary.images import patchseries
from canary.images.patchseries import Series, SeriesError, series_hash
from canary.paths import CACHE_DIR, DEFAULT_ENGINE_PYTHON

OVERLAY_FORMAT = 2
"""Bumped when the layout of an overlay directory changes (part of the cache key)."""
DEFAULT_CACHE_ROOT = CACHE_DIR / "overlays"
MANIFEST_NAME = "overlay.json"
PACKAGE = "vllm"
# Binary files are hard-linked (copied if that fails) instead of copied: the .so files are
# ~400 MB of the ~430 MB package. Patches may not touch them (checked before applying).
LINKED_SUFFIXES = (".so",)
PROBE_TIMEOUT_S = 120.0
PATCH_TIMEOUT_S = 120.0

# Asks the engine python where its vllm package is and which version it is, without importing
# vllm (that takes 5-10 s): importlib finds the spec, the metadata names the distribution.
_PROBE = r"""
import importlib.metadata as md, importlib.util, json, os, sys
spec = importlib.util.find_spec(sys.argv[1])
if spec is None or spec.origin is None:
    print(json.dumps({"error": "no package named " + sys.argv[1]})); raise SystemExit(0)
dists = md.packages_distributions().get(sys.argv[1], [])
versions = {d: md.version(d) for d in dists}
print(json.dumps({"dir": os.path.dirname(os.path.realpath(spec.origin)), "versions": versions}))
"""


class OverlayError(CanaryError):
    """The series is malformed, a patch does not apply, or the engine's vllm cannot be found."""


@dataclass(frozen=True)
class EnginePackage:
    """Where an engine python's vllm is installed, and which version."""

    engine_python: str
    package_dir: Path
    version: str


def read_series(path: str | Path) -> Series:
    """Parse and validate a series file (canary.images.patchseries, the one parser), as an OverlayError."""
    try:
        return patchseries.read_series(path)
    except SeriesError as exc:
        raise OverlayError(str(exc)) from None


def probe_engine(engine_python: str | Path, package: str = PACKAGE) -> EnginePackage:
    """Ask the engine python where `package` is installed and its distribution version."""
    python = _absolute_python(engine_python)
    try:
        done = subprocess.run(
            [python, "-c", _PROBE, package],
            capture_output=True,
            text=True,
            timeout=PROBE_TIMEOUT_S,
            env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONNOUSERSITE": "1"},
            check=False,
        )
    except FileNotFoundError:
        raise OverlayError(f"engine python not found: {python}") from None
    except subprocess.TimeoutExpired:
        raise OverlayError(f"engine python {python} did not answer within {PROBE_TIMEOUT_S:.0f}s") from None
    if done.returncode != 0:
        raise OverlayError(f"engine python {python} failed to locate {package}: {done.stderr.strip()[-500:]}")
    try:
        answer = json.loads(done.stdout.strip().splitlines()[-1])
    except (IndexError, json.JSONDecodeError):
        raise OverlayError(f"engine python {python} gave an unreadable answer: {done.stdout[-300:]!r}") from None
    if "error" in answer:
        raise OverlayError(f"engine python {python}: {answer['error']}")
    versions: dict[str, str] = answer["versions"]
    version = ",".join(f"{d}=={v}" for d, v in sorted(versions.items())) or "unknown"
    return EnginePackage(engine_python=python, package_dir=Path(answer["dir"]), version=version)


def _absolute_python(engine_python: str | Path) -> str:
    # Absolute but not resolved: a venv's python is a symlink to the system one, and two venvs
    # must not share a key.
    path = Path(engine_python)
    if path.parent == Path("."):
        found = shutil.which(str(path))
        return found or str(path)
    return str(path.absolute())


def cache_key(engine: EnginePackage, series: Series) -> str:
    """The overlay's cache key: (engine python, package location, version, series content)."""
    material = json.dumps(
        {
            "format": OVERLAY_FORMAT,
            "engine_python": engine.engine_python,
            "package_dir": str(engine.package_dir),
            "version": engine.version,
            "series_sha256": series_hash(series),
        },
        sort_keys=True,
    )
    return hashlib.sha256(material.encode()).hexdigest()[:20]


def build_overlay(
    series_path: str | Path,
    *,
    engine_python: str | Path = DEFAULT_ENGINE_PYTHON,
    cache_root: str | Path = DEFAULT_CACHE_ROOT,
    engine: EnginePackage | None = None,
) -> Path:
    """Return a directory holding the patched `vllm/` copy: put it FIRST on the engine's PYTHONPATH.

    Built once per cache key (reused afterwards). `engine` skips the probe (tests, callers that
    already know where the package is). Raises OverlayError naming the patch and hunk that fail.
    """
    series = read_series(series_path)
    engine = engine or probe_engine(engine_python)
    if not (engine.package_dir / "__init__.py").is_file():
        raise OverlayError(f"{engine.package_dir} is not a package directory (no __init__.py)")
    root = Path(cache_root)
    final = root / cache_key(engine, series)
    if (final / MANIFEST_NAME).is_file():
        return final.absolute()
    root.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=f".tmp-{final.name}-", dir=root))
    try:
        package_name = engine.package_dir.name
        _copy_package(engine.package_dir, scratch / package_name)
        for patch in series.patches:
            _apply_patch(patch, scratch, package_name)
        manifest = {
            "format": OVERLAY_FORMAT,
            "engine_python": engine.engine_python,
            "package_dir": str(engine.package_dir),
            "version": engine.version,
            "series": str(series.path.absolute()),
            "patches": series.names,
            "series_sha256": series_hash(series),
        }
        (scratch / MANIFEST_NAME).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
        try:
            scratch.rename(final)
        except OSError as exc:
            # Another builder won the race: its overlay is complete (renames are atomic).
            if not (final / MANIFEST_NAME).is_file():
                raise OverlayError(
                    f"cannot move the overlay into {final} ({exc.strerror}); delete it and retry"
                ) from None
    finally:
        if scratch.exists():
            shutil.rmtree(scratch, ignore_errors=True)
    return final.absolute()


def _copy_package(source: Path, dest: Path) -> None:
    """Copy the package; hard-link binaries (copy if linking fails).

    Bytecode caches are copied too, with their sources' mtimes (copy2): a .pyc records its
    source's mtime and size, so it stays valid for every unchanged module and is recompiled for
    every patched one. Without them each engine would first compile all of vLLM (minutes on a
    busy 2-core machine)."""

    def copy_or_link(src: str, dst: str) -> object:
        if src.endswith(LINKED_SUFFIXES):
            try:
                os.link(src, dst)
                return dst
            except OSError:
                pass
        return shutil.copy2(src, dst)

    shutil.copytree(
        source,
        dest,
        copy_function=copy_or_link,
        symlinks=True,
    )


_TARGET = re.compile(r"^\+\+\+ (?:b/)?(\S+)", re.MULTILINE)
_HUNK_FAILED = re.compile(r"Hunk #(\d+) FAILED at (\d+)")
_CHECKING = re.compile(r"^(?:checking|patching) file (\S+)", re.MULTILINE)


def _patch_targets(text: str) -> list[str]:
    """Paths (after -p1) the patch writes, in order."""
    return [t for t in _TARGET.findall(text) if t != "/dev/null"]


def _hunk_headers(text: str) -> dict[str, list[str]]:
    """`@@ ... @@` header lines of each target file, in order."""
    headers: dict[str, list[str]] = {}
    current: str | None = None
    for line in text.splitlines():
        target = _TARGET.match(line)
        if target:
            current = target.group(1)
            headers.setdefault(current, [])
        elif line.startswith("@@") and current is not None:
            headers[current].append(line.strip())
    return headers


def _apply_patch(patch: Path, tree: Path, package_name: str) -> None:
    """Apply one patch to TREE (which holds the package dir) with -p1 and no fuzz, or raise naming
    the patch, the file and the hunk that fails. A dry run first, so a failure changes nothing."""
    text = patch.read_text(encoding="utf-8", errors="replace")
    if "GIT binary patch" in text:
        raise OverlayError(f"{patch.name}: binary patches are not supported")
    targets = _patch_targets(text)
    if not targets:
        raise OverlayError(f"{patch.name}: no file changes found (is it a unified diff with a/ b/ paths?)")
    for target in targets:
        if target.split("/", 1)[0] != package_name:
            raise OverlayError(f"{patch.name}: changes {target}, outside the {package_name}/ package")
        path = tree / target
        if path.exists() and path.stat().st_nlink > 1:
            raise OverlayError(f"{patch.name}: changes {target}, a binary shared with the base install")
    base = ["patch", "-p1", "--forward", "--batch", "--fuzz=0", "--no-backup-if-mismatch", "-d", str(tree), "-i"]
    dry = _run_patch([*base, str(patch.absolute()), "--dry-run"])
    if dry.returncode != 0:
        raise OverlayError(_describe_failure(patch, text, dry.stdout + dry.stderr))
    done = _run_patch([*base, str(patch.absolute()), "--silent"])
    if done.returncode != 0:
        raise OverlayError(f"{patch.name} passed the dry run but did not apply: {(done.stdout + done.stderr)[-500:]}")


def _run_patch(argv: list[str]) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=PATCH_TIMEOUT_S, check=False)
    except FileNotFoundError:
        raise OverlayError("GNU patch is not installed (apt-get install patch)") from None


def _describe_failure(patch: Path, text: str, output: str) -> str:
    """'<patch>: hunk #N of FILE (@@ header @@) FAILED at line L' from patch's own report."""
    headers = _hunk_headers(text)
    problems: list[str] = []
    current_file = ""
    for line in output.splitlines():
        checking = _CHECKING.match(line)
        if checking:
            current_file = checking.group(1)
            continue
        failed = _HUNK_FAILED.search(line)
        if failed:
            number, at = int(failed.group(1)), failed.group(2)
            file_headers = headers.get(current_file, [])
            header = file_headers[number - 1] if 0 < number <= len(file_headers) else "?"
            problems.append(f"hunk #{number} of {current_file} ({header}) FAILED at line {at}")
        elif "can't find file" in line or "No such file" in line:
            problems.append(line.strip())
        elif "Reversed (or previously applied) patch detected" in line:
            problems.append(f"{current_file}: already applied (reversed patch detected)")
    detail = "; ".join(problems) if problems else output.strip()[-500:]
    return f"patch {patch.name} (from {patch.parent}) does not apply: {detail}"


def main(argv: list[str] | None = None) -> int:
    """Build (or reuse) an overlay and print its directory."""
    parser = argparse.ArgumentParser(prog="python -m canary.images.overlay", description=__doc__.split("\n\n")[0])
    parser.add_argument("--series", required=True, help="series file (docker/patches format)")
    parser.add_argument("--engine-python", default=str(DEFAULT_ENGINE_PYTHON), help="python of the engine venv")
    parser.add_argument("--cache-root", default=str(DEFAULT_CACHE_ROOT), help="where overlays are cached")
    args = parser.parse_args(argv)
    try:
        print(build_overlay(args.series, engine_python=args.engine_python, cache_root=args.cache_root))
    except OverlayError as exc:
        print(f"overlay: {exc}", file=sys.stderr)
        return exc.exit_code
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
