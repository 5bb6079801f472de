"""The base of every config model and the small types every section shares."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Literal

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
