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
