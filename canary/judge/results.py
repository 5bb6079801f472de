"""The result model: run -> cells -> checks, with verdicts, numbers and evidence.

Serialized as results.json (schema_version below; the model below is its documentation). Every writer and
exporter reads these models; nothing else defines what a result is.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from pydantic import Field, computed_field, model_validator

from canary.core.yaml_model import StrictModel
from canary.judge.verdicts import FAILING_VERDICTS as FAILING_VERDICTS
from canary.judge.verdicts import INTERRUPTED_EXIT_CODE, OUTCOME_EXIT_CODE, Outcome, outcome_of
from canary.judge.verdicts import VERDICT_SEVERITY as VERDICT_SEVERITY
from canary.judge.verdicts import Verdict as Verdict
from canary.judge.verdicts import worst as worst
from canary.plan.cell import Cell

SCHEMA_VERSION = 1

CAUSE_KEY = "cause"
"""CheckResult.evidence key: why a check could not measure, in a few words ("client CPU-starved")."""

# The latencies the throughput check reports: CheckResult.metrics keys <kind>_<stat>_s with stat
# mean, p50, p90 or p99 (kind -> what it measures).
LATENCIES: dict[str, str] = {
    "ttft": "time to first token",
    "tpot": "time per output token (after the first)",
    "itl": "inter-token latency",
    "e2e": "end-to-end request latency",
}

# Verdicts, their severity (a cell's verdict is the worst of its checks') and which keep a run from
# passing are defined once, in canary.judge.verdicts; re-exported here for the result model's users.


def utc_now() -> dt.datetime:
    """Timezone-aware now (UTC)."""
    return dt.datetime.now(dt.UTC)


class _Model(StrictModel):
    """Result files are read back (history import, exporter): unknown keys are errors."""


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
    duration_s: float = Field(
        0.0, description="Wall time of the check; startup's includes the deployment it judged (launch to ready)."
    )


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


class CellCoverage(_Model):
    """Rolling coverage: when a planned cell was last checked (this run or an earlier one)."""

    cell: Cell = Field(description="The planned cell.")
    last_checked: dt.datetime | None = Field(None, description="Last time its checks ran (UTC); None: never.")
    last_verdict: str | None = Field(None, description="Its verdict then.")
    this_run: bool = Field(False, description="Whether this run checked it.")


DERIVED_KEYS = frozenset({"outcome", "exit_code"})
"""RunResult's keys in results.json that are computed from the cells, not read back."""


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
    coverage: list[CellCoverage] = Field(
        default_factory=list,
        description="Rotation (Kubernetes waves): every planned cell with its last check, run tonight or not.",
    )

    def counts(self) -> dict[str, int]:
        """Cells per verdict."""
        out: dict[str, int] = {}
        for cell in self.cells:
            out[cell.verdict] = out.get(cell.verdict, 0) + 1
        return out

    @property
    def ok(self) -> bool:
        """Whether no cell has a failing verdict (an inconclusive run is not ok either)."""
        return not any(c.verdict in FAILING_VERDICTS for c in self.cells)

    @computed_field(description="The run's outcome: ok, failed or inconclusive (derived from the cells).")  # type: ignore[prop-decorator]
    @property
    def outcome(self) -> Outcome:
        """failed (a cell has a definitive finding), inconclusive (the only non-passing cells could
        not be measured: invalid or error) or ok."""
        return outcome_of(c.verdict for c in self.cells)

    @computed_field(  # type: ignore[prop-decorator]
        description="`canary run`'s exit code for this run: 130 if interrupted, else 0 ok, 1 failed, 3 inconclusive."
    )
    @property
    def exit_code(self) -> int:
        """The exit code `canary run` returns for this run (written into results.json for scripts)."""
        return INTERRUPTED_EXIT_CODE if self.interrupted else OUTCOME_EXIT_CODE[self.outcome]

    @model_validator(mode="before")
    @classmethod
    def _derived_keys(cls, data: Any) -> Any:
        """results.json carries outcome and exit_code (derived): read back, they are recomputed."""
        if isinstance(data, dict) and DERIVED_KEYS & data.keys():
            return {k: v for k, v in data.items() if k not in DERIVED_KEYS}
        return data
