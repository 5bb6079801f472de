"""The base of every config model and the small types every section shares."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import ConfigDict, Field

from canary.core.yaml_model import StrictModel

Runner = Literal["v1", "v2"]
Topology = Literal["aggregated", "pd-nixl"]
Platform = Literal["cpu", "sm80", "sm90", "sm100"]
ExpectKind = Literal["startup-fail", "check-fail", "pass"]
CheckName = Literal["startup", "parity", "accuracy", "throughput", "kv_transfer"]
"""Every check, in the order the runner calls them (canary.checks.base.check_order, which is held to it)."""
PositiveInt = Annotated[int, Field(gt=0)]
Probability = Annotated[float, Field(ge=0.0, le=1.0)]


class Strict(StrictModel):
    """Base for every config model: unknown keys are errors, values are validated on assignment."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)
