"""The base of every config model and the small types every section shares."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field

from canary.core.yaml_model import StrictModel

Runner = Literal["v1", "v2"]
Topology = Literal["aggregated", "pd-nixl"]
Platform = Literal["cpu", "sm80", "sm90", "sm100"]
ExpectKind = Literal["startup-fail", "check-fail", "pass"]
PositiveInt = Annotated[int, Field(gt=0)]
NonNegativeInt = Annotated[int, Field(ge=0)]
Probability = Annotated[float, Field(ge=0.0, le=1.0)]


class Strict(StrictModel):
    """Base for every config model: unknown keys are errors, values are validated on assignment."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)


@dataclass(frozen=True)
class CheckSection:
    """A check's config section, `checks.<name>`: what its folder's `settings.py` declares as `SECTION`
    (the name is the folder's; canary.config.checks assembles ChecksConfig from every one)."""

    model: type[Strict]
    description: str


@dataclass(frozen=True)
class WorkloadSection:
    """A workload kind's fields of `checks.throughput.workload`: what its folder's `settings.py` declares as
    `WORKLOAD` (the kind is the folder's name; canary.config.workloads assembles WorkloadShape from every one)."""

    model: type[Strict]
    description: str
    """`<kind>: what its requests look like`, a clause of the `kind` field's description."""
    order: int = 100
    """Its place in the `kind` description and among WorkloadShape's fields (the default, synthetic, is 0)."""
    problem: Callable[[Any], str | None] | None = None
    """Why a shape of this kind is invalid (None: it is valid), checked when the config loads."""


@dataclass(frozen=True)
class TargetSection:
    """A target kind's config section, `target.<kind>`: what its folder's `settings.py` declares as `TARGET`
    (the kind is the folder's name; canary.config.targets assembles `target.kind` and TargetConfig from every
    one, canary.targets.create_target builds the class its `target.py` registers)."""

    model: type[Strict]
    description: str
    """The `target.<kind>` field's description."""
    order: int = 100
    """Its place among the kinds: in `target.kind`'s values (and the error naming them) and TargetConfig's fields."""
    required: bool = False
    """The section has no defaults (an endpoint's URL): unset it is null, and a config of this kind must set it."""
    engines_here: bool = False
    """It starts engines on this machine from model files here: `canary needs` then installs a builtin model."""
    problem: Callable[[Any], tuple[str, str] | None] | None = None
    """What in a whole config (CanaryConfig) this kind's settings cannot work with, as (key path, message), or
    None; checked when the config loads, whatever `target.kind` is (the settings are validated either way)."""
