"""`target.container`: the container target's settings (the config layer: imports only canary.config and
canary.core)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from canary.config.base import PositiveInt, Strict, TargetSection
from canary.core.words import listing

PullPolicy = Literal["never", "missing", "always"]


class ContainerTargetConfig(Strict):
    """Run every engine and router of a cell from its image through a Docker-compatible CLI, host network.

    The cell's commands are the local target's (`target.local` settings: host, enforce_eager, env,
    extra_args, NIXL progress delay, CPU KV space apply here too); what differs is where they run."""

    cli: str | None = Field(
        None, description="docker, podman, or a path to either (default: podman if on PATH, else docker)."
    )
    images: dict[str, str] = Field(
        default_factory=dict,
        description="Image key (one of `images`; another key is an error) -> image reference to run (a tag or "
        "digest, any registry, or a local tag), run as is. Default: `images.<key>.base` for a key with a base, "
        "else `images.<key>.ref` when it is an image reference, else (the CPU default's pip-spec refs) "
        "`engine_image`; `images.<key>.patches` are applied in a derived image built and cached here.",
    )
    engine_image: str | None = Field(
        None,
        description="The engine image for image keys whose ref is no image reference (default: the CPU engine "
        "image `make images-cpu` builds, canary.images.table.cpu_engine_ref).",
    )
    router_image: str | None = Field(
        None, description="Image of the P/D router (default: the router image of docker/images.yaml)."
    )
    engine_command: list[str] = Field(
        ["python3", "-m", "vllm.entrypoints.openai.api_server"],
        min_length=1,
        description="The engine's command inside its image (replaces the image's entrypoint).",
    )
    router_command: list[str] = Field(
        ["vllm-router"], min_length=1, description="The router's command inside its image."
    )
    pull: PullPolicy = Field(
        "missing", description="Pull an image before the run: never (must exist locally), missing, or always."
    )
    shm: str = Field(
        "host",
        pattern=r"^(host|[1-9][0-9]*[kmg]?)$",
        description="Shared memory of each engine container (vLLM's workers and NCCL use /dev/shm; a container's "
        "default 64 MB is too small for tensor parallelism): host: `--ipc=host`, the host's IPC namespace and "
        "/dev/shm, as vLLM's container docs advise; a size such as 16g: `--shm-size=16g`, a private one.",
    )
    run_args: list[str] = Field(
        default_factory=list, description="Extra arguments of every `run` (e.g. --ulimit memlock=-1)."
    )
    stop_timeout_s: PositiveInt = Field(15, description="Seconds a container gets between SIGTERM and SIGKILL.")
    compile_cache: bool = Field(
        True,
        description="Mount a host folder per image (under the canary's cache, `container-home/<image id>`) as each "
        "engine's HOME, XDG, vLLM and TorchInductor cache, so what an engine compiles at start (TorchInductor's C++ "
        "kernels, vLLM's compile cache) is reused by the next container of the same image instead of compiled "
        "again. false: every container starts with an empty cache.",
    )


def _images_are_known(config: Any) -> tuple[str, str] | None:
    """An image key of target.container.images that `images` lacks (config: the CanaryConfig)."""
    for key in config.target.container.images:
        if key not in config.images:
            return (
                f"target.container.images.{key}",
                f"unknown image key {key!r}; the keys of images: {listing(sorted(config.images))}",
            )
    return None


TARGET = TargetSection(
    ContainerTargetConfig,
    "Container settings (kind: container).",
    order=1,
    engines_here=True,
    problem=_images_are_known,
)
