"""Named load workloads: the shape of the requests a load run sends, assembled from the workload kinds.

A kind is a folder `canary/load/workloads/<kind>/`: its `settings.py` declares its fields (`WORKLOAD`,
in the config layer like a check's settings) beside its `requests.py` (the generator, registered with
canary.load.shapes). WorkloadShape is one flat model, `kind` plus every kind's fields (a config sets
those of its kind), used by the throughput check's config (checks.throughput.workload) and by the load
client's WorkloadSpec (canary.load.workload); docs/methodology/throughput.md ("Workloads") explains
each kind. mypy sees the built-in kinds' fields (the `TYPE_CHECKING` class); a kind added later reads
its own with `getattr`.
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import TYPE_CHECKING, Literal

from pydantic import Field, create_model, model_validator

from canary.config.base import Strict, WorkloadSection

if TYPE_CHECKING:
    from canary.load.workloads.block_residues.settings import BlockResiduesSettings
    from canary.load.workloads.multi_turn.settings import MultiTurnSettings
    from canary.load.workloads.shared_prefix.settings import SharedPrefixSettings
    from canary.load.workloads.trace.settings import TraceSettings

WORKLOADS_PACKAGE = "canary.load.workloads"
"""The package whose sub-packages are the workload kinds."""


def workload_folders() -> list[str]:
    """The workload kinds' folder names, sorted: the sub-packages on canary.load.workloads' path."""
    package = importlib.import_module(WORKLOADS_PACKAGE)
    return sorted(info.name for info in pkgutil.iter_modules(package.__path__) if info.ispkg)


def discover() -> dict[str, WorkloadSection]:
    """Every kind's declaration (`WORKLOAD` of its `settings.py`), by kind, in their declared order."""
    kinds: dict[str, WorkloadSection] = {}
    for name in workload_folders():
        module = importlib.import_module(f"{WORKLOADS_PACKAGE}.{name}.settings")
        section = getattr(module, "WORKLOAD", None)
        if not isinstance(section, WorkloadSection):
            raise TypeError(f"{module.__name__} must declare WORKLOAD = WorkloadSection(<fields model>, <description>)")
        kinds[name] = section
    return dict(sorted(kinds.items(), key=lambda item: (item[1].order, item[0])))


KINDS: dict[str, WorkloadSection] = discover()
KIND_DESCRIPTION = "; ".join(section.description for section in KINDS.values()) + "."


class _Kind(Strict):
    """The kind of a shape, and the check its kind declares."""

    kind: str = Field("synthetic", description=KIND_DESCRIPTION)

    @model_validator(mode="after")
    def _kind_problem(self) -> _Kind:
        problem = KINDS[self.kind].problem
        message = problem(self) if problem is not None else None
        if message:
            raise ValueError(message)
        return self


if TYPE_CHECKING:

    class WorkloadShape(SharedPrefixSettings, MultiTurnSettings, BlockResiduesSettings, TraceSettings, _Kind):
        """What each request of a load run looks like (seeded: the same seed gives the same requests)."""

    WorkloadKind = str
else:
    WorkloadKind = Literal[tuple(KINDS)]
    WorkloadShape = create_model(
        "WorkloadShape",
        __base__=(*(section.model for section in reversed(KINDS.values())), _Kind),
        __module__=__name__,
        __doc__="What each request of a load run looks like (seeded: the same seed gives the same requests).",
        kind=(WorkloadKind, Field("synthetic", description=KIND_DESCRIPTION)),
    )


def arrival_problem(shape: WorkloadShape, open_loop: bool, request_rate: float | None) -> str | None:
    """Why this workload cannot run with these arrivals (None: it can)."""
    if open_loop and request_rate is None and shape.kind != "trace":
        return "open_loop needs a request_rate (or a trace workload, whose arrivals come from the file)"
    if not open_loop and shape.kind == "multi_turn" and shape.think_time_s > 0:
        return "multi_turn think_time_s needs open_loop (the closed loop's users send the next turn at once)"
    return None
