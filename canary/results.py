"""The result model: run -> cells -> checks, with verdicts, numbers and evidence.

Serialized as results.json (schema_version below; documented in README.md). Every writer and
exporter reads these models; nothing else defines what a result is.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from canary.matrix import Cell

SCHEMA_VERSION = 1

Verdict = Literal["pass", "fail", "expected-fail", "unexpected-pass", "unsupported", "skipped", "error", "invalid"]

# Worst first: a cell's verdict is the worst of its checks'.
VERDICT_SEVERITY: dict[str, int] = {
    "error": 0,
    "fail": 1,
    "unexpected-pass": 2,
    "invalid": 3,
    "expected-fail": 4,
    "pass": 5,
    "unsupported": 6,
    "skipped": 7,
}
# Verdicts that make `canary run` exit non-zero.
FAILING_VERDICTS = frozenset({"error", "fail", "unexpected-pass", "invalid"})


def utc_now() -> dt.datetime:
    """Timezone-aware now (UTC)."""
    return dt.datetime.now(dt.UTC)


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Gate(_Model):
    """One pass/fail rule and the numbers behind it."""

    name: str = Field(description="Gate name, e.g. wilson-lower-bound.")
    passed: bool = Field(description="Whether the gate passed.")
    observed: float | None = Field(None, description="The measured value.")
    threshold: float | None = Field(None, description="The limit it was compared with.")
    detail: str = Field("", description="One sentence with the numbers.")


class CheckResult(_Model):
    """The outcome of one check on one cell."""

    name: str = Field(description="Check name: startup, kv_transfer, accuracy, parity, throughput.")
    verdict: Verdict = Field(description="The check's verdict.")
    summary: str = Field("", description="One line for people.")
    metrics: dict[str, float] = Field(default_factory=dict, description="Numbers, with the unit in the key.")
    gates: list[Gate] = Field(default_factory=list, description="Rules applied and their numbers.")
    evidence: dict[str, Any] = Field(default_factory=dict, description="Log excerpts, classifications, samples.")
    started_at: dt.datetime = Field(default_factory=utc_now, description="Start time (UTC).")
    duration_s: float = Field(0.0, description="Wall time of the check.")


class CellResult(_Model):
    """Everything known about one cell after the run."""

    cell: Cell = Field(description="The planned cell.")
    verdict: Verdict = Field(description="Worst check verdict, adjusted by the cell's expectation.")
    reason: str = Field("", description="Why, in one line.")
    checks: list[CheckResult] = Field(default_factory=list, description="Check results in run order.")
    logs: dict[str, str] = Field(default_factory=dict, description="Log file per role, relative to the run dir.")
    started_at: dt.datetime = Field(default_factory=utc_now, description="Start time (UTC).")
    duration_s: float = Field(0.0, description="Wall time of the cell.")

    def check(self, name: str) -> CheckResult | None:
        """A check result by name."""
        return next((c for c in self.checks if c.name == name), None)


class RunResult(_Model):
    """One canary run."""

    schema_version: int = Field(SCHEMA_VERSION, description="results.json schema version.")
    run_id: str = Field(description="Unique run id: <UTC time>-<config name>.")
    config_name: str = Field(description="Config name.")
    config_path: str = Field("", description="Config file the run used.")
    platform: str = Field(description="Platform id.")
    target: str = Field(description="Target kind.")
    baseline_image: str = Field("", description="Image key the other images are compared with (config baseline).")
    started_at: dt.datetime = Field(default_factory=utc_now, description="Start (UTC).")
    finished_at: dt.datetime | None = Field(None, description="End (UTC).")
    duration_s: float = Field(0.0, description="Wall time.")
    cells: list[CellResult] = Field(default_factory=list, description="Cell results in plan order.")
    canary_version: str = Field("", description="vllm-canary version.")
    interrupted: bool = Field(False, description="The run was stopped by Ctrl-C before it finished.")

    def counts(self) -> dict[str, int]:
        """Cells per verdict."""
        out: dict[str, int] = {}
        for cell in self.cells:
            out[cell.verdict] = out.get(cell.verdict, 0) + 1
        return out

    @property
    def ok(self) -> bool:
        """Whether no cell has a failing verdict."""
        return not any(c.verdict in FAILING_VERDICTS for c in self.cells)


def worst(verdicts: Sequence[Verdict]) -> Verdict:
    """The worst verdict of a list (pass for an empty list)."""
    return min(verdicts, key=lambda v: VERDICT_SEVERITY[v]) if verdicts else "pass"
