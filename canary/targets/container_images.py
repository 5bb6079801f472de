"""Which image each image key runs on the container target, pulled or built before the first engine starts.

`target.container.images[key]`, else `images.<key>.base` when the key derives its ref from a base and a
patch series, else `images.<key>.ref` when it is an image reference, else
`target.container.engine_image` (default: the CPU engine image this project builds) with
`images.<key>.patches` applied inside a derived image that is built once and cached by the hash of the
base image and the series. A key under `target.container.images` that `images` does not define is a
config error (canary.config.root). Every image is found (or pulled, per `pull`) before the first engine
starts; a missing one is an error that names it.
"""

from __future__ import annotations

import hashlib
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

from canary.config import CanaryConfig
from canary.images.patchseries import read_series, series_hash
from canary.images.table import cpu_engine_ref, is_image_reference, router_ref
from canary.paths import PACKAGE_DIR, REPO_ROOT
from canary.targets.container_cli import SOURCE_HASH_LABEL, ContainerCli, ContainerError
from canary.targets.engine_plan import as_absolute

DERIVED_CONTAINERFILE = """\
ARG BASE_IMAGE
FROM ${BASE_IMAGE}
USER root
COPY series/ /tmp/vllm-canary-series/
COPY apply-series.sh patchseries.py /tmp/vllm-canary-tools/
ARG SERIES_SHA256
# The series applies inside the image's own site-packages (the vllm package's parent), no fuzz.
RUN site="$(python3 -c 'import importlib.util as u, os.path as p; \\
      print(p.dirname(p.dirname(u.find_spec("vllm").origin)))')" \\
 && PATCHSERIES_PY=/tmp/vllm-canary-tools/patchseries.py bash /tmp/vllm-canary-tools/apply-series.sh \\
      --apply --series /tmp/vllm-canary-series/series --tree "$site" --tool patch --expect-hash "$SERIES_SHA256" \\
 && rm -rf /tmp/vllm-canary-series /tmp/vllm-canary-tools
ARG RUN_AS=0
USER ${RUN_AS}
"""


class ContainerImages:
    """The images of one run: references as configured, then as resolved (pulled, derived) and their digests."""

    def __init__(self, config: CanaryConfig, cli: Callable[[], ContainerCli], cache_dir: Path) -> None:
        self.config = config
        self.settings = config.target.container
        self._cli = cli
        self.cache_dir = cache_dir
        self.resolved: dict[str, str] = {}
        self.digests: dict[str, str] = {}

    def ref(self, image_key: str) -> str:
        """The reference a key runs before any derived build (see the module doc)."""
        if image_key in self.settings.images:
            return self.settings.images[image_key]
        spec = self.config.images[image_key]
        if spec.base is not None and spec.patches is not None:
            return spec.base  # its ref names base + patches (what `make images` pushes): here derived from base
        if is_image_reference(spec.ref):
            return spec.ref
        return self.settings.engine_image or cpu_engine_ref()

    def derived(self, image_key: str) -> bool:
        """Whether the key runs its patch series in a derived image (an explicit image is taken as is)."""
        return self.config.images[image_key].patches is not None and image_key not in self.settings.images

    def identity(self, image_key: str) -> tuple[str, str | None]:
        """What a key runs, before anything is pulled: its image and the series derived from it."""
        patches = self.config.images[image_key].patches if self.derived(image_key) else None
        return self.ref(image_key), str(as_absolute(patches)) if patches else None

    def router(self) -> str:
        """The P/D router's image."""
        return self.settings.router_image or router_ref()

    @staticmethod
    def _derived_tag(base: str, base_id: str, series: Path) -> tuple[str, str]:
        digest = hashlib.sha256(f"{base_id}\n{series_hash(read_series(series))}".encode()).hexdigest()
        repository = base.split("@")[0].rsplit(":", 1)[0] if ":" in base.rsplit("/", 1)[-1] else base.split("@")[0]
        return f"{repository}-patched:{digest[:12]}", digest

    def ensure(self, ref: str, what: str) -> None:
        """The image is in local storage, pulled per target.container.pull (a ContainerError naming it if not)."""
        cli = self._cli()
        policy = self.settings.pull
        present = cli.image_inspect(ref) is not None
        if policy == "always" or (policy == "missing" and not present):
            try:
                cli.pull(ref)
            except ContainerError as exc:
                if present:
                    return
                local = ref.startswith("localhost/")
                hint = "build it first (`make images-cpu`)" if local else "check the reference and the registry's login"
                raise ContainerError(f"{what}: image {ref} is not here and cannot be pulled ({exc}); {hint}") from None
        elif not present:
            raise ContainerError(f"{what}: image {ref} is not in local storage and target.container.pull is never")

    def resolve(self, image_key: str, log_dir: Path | None = None) -> str:
        """The image a key runs, pulled or built as needed; cached for the run."""
        if image_key in self.resolved:
            return self.resolved[image_key]
        base = self.ref(image_key)
        self.ensure(base, f"image {image_key!r}")
        ref = base
        series_text = self.config.images[image_key].patches
        if series_text is not None and self.derived(image_key):
            ref = self._derive(image_key, base, as_absolute(series_text), log_dir or self.cache_dir / "logs")
        inspect = self._cli().image_inspect(ref) or {}
        digests = [d for d in inspect.get("RepoDigests") or [] if isinstance(d, str)]
        self.digests[image_key] = digests[0].split("@")[-1] if digests else str(inspect.get("Id", ""))
        self.resolved[image_key] = ref
        return ref

    def _derive(self, image_key: str, base: str, series: Path, log_dir: Path) -> str:
        """`base` with the series applied inside it, built once per (base image id, series hash)."""
        if not series.is_file():
            raise ContainerError(f"images.{image_key}.patches: series {series} not found")
        cli = self._cli()
        base_record = cli.image_inspect(base) or {}
        tag, digest = self._derived_tag(base, str(base_record.get("Id", base)), series)
        existing = cli.image_inspect(tag)
        if existing is not None and (existing.get("Config") or {}).get("Labels", {}).get(SOURCE_HASH_LABEL) == digest:
            return tag
        user = str((base_record.get("Config") or {}).get("User") or "0")
        with tempfile.TemporaryDirectory(prefix="canary-derive-") as scratch:
            context = Path(scratch)
            shutil.copytree(series.parent, context / "series")
            if series.name != "series":
                shutil.copy(series, context / "series" / "series")
            shutil.copy(REPO_ROOT / "docker" / "apply-series.sh", context / "apply-series.sh")
            shutil.copy(PACKAGE_DIR / "images" / "patchseries.py", context / "patchseries.py")
            (context / "Containerfile").write_text(DERIVED_CONTAINERFILE, encoding="utf-8")
            cli.build(
                context,
                context / "Containerfile",
                tag,
                build_args={"BASE_IMAGE": base, "SERIES_SHA256": series_hash(read_series(series)), "RUN_AS": user},
                labels={SOURCE_HASH_LABEL: digest, "dev.vllm-canary.base-image": base},
                log_path=log_dir / f"build-{image_key}.log",
            )
        return tag
