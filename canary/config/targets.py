"""The `target` section, assembled from the target folders: `target.kind` and one `target.<kind>` section per
`canary/targets/<kind>/settings.py`, plus what every kind shares (the GPU pool, the Hugging Face cache).

A target's settings live beside the target (its folder's `settings.py` defines the model and declares
`TARGET = TargetSection(...)`); that module imports only canary.config and canary.core, so canary.LAYERS puts
every `canary.targets.*.settings` in the config layer and the config stays below the targets, as for the checks
(canary.config.checks). This module finds the folders with a `settings.py` on `canary.targets.__path__` (whose
`__init__` imports only canary.errors at run time) and builds TargetConfig: `kind`, one of the folders' names in
their declared order, and one field per folder; canary.targets.create_target builds the class the kind's
`target.py` registers.

mypy sees the built-in kinds as typed attributes (the `TYPE_CHECKING` block, held to the folders by
tests/unit/targets/test_registry.py); a kind added later reads its section with `config.target.section(Model)`.
"""

from __future__ import annotations

import importlib
import importlib.util
import pkgutil
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from pydantic import Field, create_model, field_validator, model_validator

from canary.config.base import NonNegativeInt, Strict, TargetSection

if TYPE_CHECKING:
    from canary.targets.container.settings import ContainerTargetConfig
    from canary.targets.endpoint.settings import EndpointTargetConfig
    from canary.targets.kubernetes.settings import KubernetesTargetConfig
    from canary.targets.local.settings import LocalTargetConfig

TARGETS_PACKAGE = "canary.targets"
"""The package whose sub-packages with a `settings.py` are the target kinds (each with a `target.py` too)."""
SectionT = TypeVar("SectionT", bound=Strict)


def target_folders() -> list[str]:
    """The target kinds' folder names, sorted: the sub-packages on canary.targets' path that have a `settings.py`
    (canary/targets/engine_site and other helper packages have none)."""
    package = importlib.import_module(TARGETS_PACKAGE)
    return sorted(
        info.name
        for info in pkgutil.iter_modules(package.__path__)
        if info.ispkg and importlib.util.find_spec(f"{TARGETS_PACKAGE}.{info.name}.settings") is not None
    )


def discover() -> dict[str, TargetSection]:
    """Every kind's declaration (`TARGET` of its `settings.py`), by kind, in their declared order."""
    sections: dict[str, TargetSection] = {}
    for name in target_folders():
        module = importlib.import_module(f"{TARGETS_PACKAGE}.{name}.settings")
        section = getattr(module, "TARGET", None)
        if not isinstance(section, TargetSection):
            raise TypeError(
                f"{module.__name__} must declare TARGET = TargetSection(<its settings model>, <description>)"
            )
        sections[name] = section
    return dict(sorted(sections.items(), key=lambda item: (item[1].order, item[0])))


TARGET_SECTIONS: dict[str, TargetSection] = discover()
TARGET_KINDS: tuple[str, ...] = tuple(TARGET_SECTIONS)
"""The kinds `target.kind` takes, in their declared order (the local target, the default, first)."""


class DevicePoolConfig(Strict):
    """The GPUs of this machine the canary may give its engines, one cell at a time from the pool's start.

    Every engine gets `models[].tensor_parallel_size` of them, prefill and decode disjoint (prefill first);
    the local target and a container target on the same host read the same pool (canary.targets.devices)."""

    gpus: list[NonNegativeInt] | Literal["all"] = Field(
        "all",
        description="GPU indices (as nvidia-smi numbers them; engines get CUDA_DEVICE_ORDER=PCI_BUS_ID so CUDA "
        "numbers them alike) the engines may use, in the order they are handed out, e.g. [4, 5, 6, 7] to leave "
        "0-3 to others. all: every GPU nvidia-smi lists when the run starts (a dry run on a machine without "
        "GPUs renders indices from 0 and says so). The caller's CUDA_VISIBLE_DEVICES is not read, like the rest "
        "of its environment. A cell that needs more GPUs than the pool has stops the run before anything starts "
        "(exit 2). CPU platforms ignore the pool.",
    )

    @field_validator("gpus", mode="before")
    @classmethod
    def _list_or_all(cls, value: object) -> object:
        if isinstance(value, str) and value != "all":
            raise ValueError(f"expected a list of GPU indices, e.g. [0, 1], or all; got {value!r}")
        return value

    @field_validator("gpus")
    @classmethod
    def _distinct(cls, value: list[int] | str) -> list[int] | str:
        if isinstance(value, list):
            if not value:
                raise ValueError("empty GPU list: name at least one GPU index, or all")
            repeated = sorted({g for g in value if value.count(g) > 1})
            if repeated:
                raise ValueError(f"GPU(s) {repeated} listed twice in {value}")
        return value


class TargetConfig(Strict):
    """Where cells run."""

    if TYPE_CHECKING:
        kind: str = "local"
        local: LocalTargetConfig = Field(default_factory=LocalTargetConfig)
        container: ContainerTargetConfig = Field(default_factory=ContainerTargetConfig)
        kubernetes: KubernetesTargetConfig = Field(default_factory=KubernetesTargetConfig)
        endpoint: EndpointTargetConfig | None = None
    else:
        kind: str = Field("local", description="Target kind.")  # its values: TARGET_KINDS (below)
    devices: DevicePoolConfig = Field(
        default_factory=DevicePoolConfig,
        description="GPUs of this machine the engines may use (targets that start engines here: local, container).",
    )
    same_engine_ok: bool = Field(
        False,
        description="Whether two image keys may run the same engine (local: the same python and patch series; "
        "container: the same image and series), e.g. a run that measures the noise between two copies of one "
        "build. false: such a config is refused (exit 2), since its report would compare a build with itself "
        "under two names.",
    )
    hf_home: str | None = Field(
        None,
        description="Hugging Face cache of the engines (their HF_HOME) for hub-id model sources, on this machine. "
        "Unset: $HF_HOME of the canary's environment, else ~/.cache/huggingface. Nothing downloads: a run whose "
        "hub model is not in <hf_home>/hub stops before anything starts and names the `huggingface-cli download` "
        "that fetches it (a dry run warns instead); engines run with HF_HUB_OFFLINE=1.",
    )

    @model_validator(mode="after")
    def _kind_needs_its_settings(self) -> TargetConfig:
        if TARGET_SECTIONS[self.kind].required and getattr(self, self.kind) is None:
            raise ValueError(f"target.kind is {self.kind} but target.{self.kind} is not set")
        return self

    def section(self, model: type[SectionT]) -> SectionT:
        """The settings whose model is `model` (typed access for any kind, built-in or added)."""
        for name, section in TARGET_SECTIONS.items():
            if section.model is model:
                value = getattr(self, name)
                assert isinstance(value, model), f"target.{name} is not set"
                return value
        raise KeyError(f"no target kind declares {model.__name__} as its settings")


if not TYPE_CHECKING:  # at run time: `kind` takes the folders' names, one field per target folder

    def _fields(sections: dict[str, TargetSection]) -> dict[str, Any]:
        fields: dict[str, Any] = {
            "kind": (Literal[tuple(sections)], Field("local", description="Target kind.")),
        }
        for name, section in sections.items():
            if section.required:
                fields[name] = (section.model | None, Field(None, description=section.description))
            else:
                fields[name] = (section.model, Field(default_factory=section.model, description=section.description))
        return fields

    TargetConfig = create_model(
        "TargetConfig",
        __base__=TargetConfig,
        __module__=__name__,
        __doc__=TargetConfig.__doc__,
        **_fields(TARGET_SECTIONS),
    )
