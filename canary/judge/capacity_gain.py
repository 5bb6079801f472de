"""The disaggregation gain: a P/D cell's SLO capacity over its aggregated control's, at equal engine count.

A P/D pair runs two engines (prefill and decode, each on the model's tensor_parallel_size devices); its
aggregated control runs one. No two-engine aggregated deployment is built, so the control's capacity
is scaled linearly by the ratio of engine units (engines x tensor parallel), `scale` (2 for a pair
against one server): the **linear-scaling assumption** (two aggregated replicas behind a balancer
carry twice one's rate; in practice they carry at most that, so the gain is, if anything, understated).

    gain = capacity(P/D) / (scale x capacity(control))

1 means the pair carries what the same engines would carry aggregated. The interval is the
conservative ratio of the two capacity intervals' ends: low = pd_low / (scale x control_high),
high = pd_high / (scale x control_low); an end missing on either side leaves that end missing.
It is computed only when both searches produced an estimate, against a control of the same
backend, KV-cache dtype and runner (`CheckContext.control_for`'s best match), and it is
informational: it never changes a verdict. docs/methodology/capacity.md has the reasoning.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from canary.core import metric_keys as k
from canary.judge.results import CellResult, CheckResult
from canary.plan.cell import Cell

EVIDENCE_KEY = "disaggregation_gain"
"""The throughput check's evidence key of a P/D cell's gain (or why there is none)."""
CAPACITY_EVIDENCE_KEY = "capacity"
"""The throughput check's evidence key of the capacity search (canary.checks.throughput.check.add_capacity)."""


def assumption(scale: float) -> str:
    """The words every place that shows a gain says with it."""
    return (
        f"aggregated control scaled x{scale:g}, linear-scaling assumption: no {scale:g}-engine aggregated "
        "deployment is measured"
    )


@dataclass(frozen=True)
class Capacity:
    """A cell's capacity estimate with its confident interval (req/s); None: not established."""

    estimate: float | None
    low: float | None
    high: float | None

    @classmethod
    def of(cls, check: CheckResult | None) -> Capacity | None:
        """From a throughput check's metrics; None when no capacity search ran on it."""
        if check is None or k.CAPACITY_REQUESTS_USED not in check.metrics:
            return None
        metrics = check.metrics
        return cls(
            metrics.get(k.CAPACITY_REQUESTS_PER_S),
            metrics.get(k.CAPACITY_LOW_REQUESTS_PER_S),
            metrics.get(k.CAPACITY_HIGH_REQUESTS_PER_S),
        )

    def text(self) -> str:
        """'3.2 req/s [2.8, 4.1]' ('below' / 'above' for a missing end, 'none' without an estimate)."""
        low = "below" if self.low is None else f"{self.low:.3g}"
        high = "above" if self.high is None else f"{self.high:.3g}"
        estimate = "none" if self.estimate is None else f"{self.estimate:.3g} req/s"
        return f"{estimate} [{low}, {high}]"


def _ratio(top: float | None, bottom: float | None, scale: float) -> float | None:
    return None if top is None or bottom is None or bottom <= 0 else top / (scale * bottom)


def gain_of(pd: Capacity, control: Capacity, scale: float) -> tuple[float | None, float | None, float | None]:
    """(gain, low, high) of two capacities; the gain is None unless both have an estimate."""
    if scale <= 0:
        raise ValueError(f"engine scale must be positive, got {scale}")
    estimate = _ratio(pd.estimate, control.estimate, scale)
    if estimate is None:
        return None, None, None
    return estimate, _ratio(pd.low, control.high, scale), _ratio(pd.high, control.low, scale)


@dataclass(frozen=True)
class Gain:
    """What evidence.disaggregation_gain of a P/D cell's throughput check holds."""

    control_cell: str
    engines_pd: int
    engines_control: int
    pd: Capacity
    control: Capacity | None
    gain: float | None = None
    low: float | None = None
    high: float | None = None
    skipped: str = ""
    """Why there is no gain ('' when there is one)."""

    @property
    def scale(self) -> float:
        """The factor the control's capacity is multiplied by."""
        return self.engines_pd / self.engines_control

    def text(self) -> str:
        """'1.31 [0.92, 1.80] vs agg... (aggregated control scaled x2, linear-scaling assumption: ...)'."""
        if self.gain is None:
            return f"no disaggregation gain: {self.skipped}"
        low = "below" if self.low is None else f"{self.low:.3g}"
        high = "above" if self.high is None else f"{self.high:.3g}"
        return f"disaggregation gain {self.gain:.3g} [{low}, {high}] vs {self.control_cell} ({assumption(self.scale)})"

    def metrics(self) -> dict[str, float]:
        """The numbers the exporters read (a missing end: no key)."""
        if self.gain is None:
            return {}
        values = {k.DISAGG_GAIN: self.gain, k.DISAGG_GAIN_LOW: self.low, k.DISAGG_GAIN_HIGH: self.high}
        return {key: v for key, v in values.items() if v is not None} | {k.DISAGG_ENGINE_SCALE: self.scale}

    def to_json(self) -> dict[str, Any]:
        """JSON-ready (the evidence)."""
        return {
            "control_cell": self.control_cell,
            "engines_pd": self.engines_pd,
            "engines_control": self.engines_control,
            "scale": self.scale,
            "assumption": assumption(self.scale),
            "pd": asdict(self.pd),
            "control": asdict(self.control) if self.control is not None else None,
            "gain": self.gain,
            "low": self.low,
            "high": self.high,
            "skipped": self.skipped,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Gain:
        """Back from the evidence (what the reports read)."""
        control = data.get("control")
        return cls(
            control_cell=str(data.get("control_cell", "")),
            engines_pd=int(data["engines_pd"]),
            engines_control=int(data["engines_control"]),
            pd=Capacity(**data["pd"]),
            control=Capacity(**control) if isinstance(control, dict) else None,
            gain=data.get("gain"),
            low=data.get("low"),
            high=data.get("high"),
            skipped=str(data.get("skipped", "")),
        )


def _same_config(cell: Cell, control: Cell) -> bool:
    return (
        control.backend == cell.backend
        and control.kv_cache_dtype == cell.kv_cache_dtype
        and control.runner == cell.runner
        and control.model == cell.model
    )


def judge_gain(
    cell: Cell, check: CheckResult, control: CellResult | None, engines_pd: int, engines_control: int
) -> Gain | None:
    """A P/D cell's gain over its control, written into its throughput check (metrics, evidence, summary).

    None (nothing written) when the cell is not P/D or no capacity search ran on it; otherwise the
    Gain, with `skipped` saying why there is no number (no control of the same backend, KV dtype and
    runner, no search or no estimate on a side). Never touches the verdict or the gates."""
    pd = Capacity.of(check)
    if cell.topology != "pd-nixl" or pd is None:
        return None
    if control is not None and not _same_config(cell, control.cell):
        control = None  # another backend, dtype or runner: no control for this comparison
    found = control.check("throughput") if control is not None else None
    theirs = Capacity.of(found)
    skipped = ""
    if control is None:
        skipped = "no aggregated control of the same model, backend, KV-cache dtype and runner ran"
    elif theirs is None:
        skipped = f"the control {control.cell.id} ran no capacity search"
    elif pd.estimate is None or theirs.estimate is None:
        side = "this cell" if pd.estimate is None else f"the control {control.cell.id}"
        skipped = f"the capacity search of {side} found no rate at which the SLO held"
    values: tuple[float | None, float | None, float | None] = (None, None, None)
    if not skipped and theirs is not None:
        values = gain_of(pd, theirs, engines_pd / engines_control)
    gain = Gain(
        control_cell=control.cell.id if control is not None else "",
        engines_pd=engines_pd,
        engines_control=engines_control,
        pd=pd,
        control=theirs,
        gain=values[0],
        low=values[1],
        high=values[2],
        skipped=skipped,
    )
    check.metrics.update(gain.metrics())
    check.evidence[EVIDENCE_KEY] = gain.to_json()
    if gain.gain is not None:
        check.summary = f"{check.summary}; {gain.text()}"
    return gain


def gains(cells: list[CellResult]) -> list[tuple[CellResult, Gain]]:
    """Every P/D cell of a run with a gain block (computed or skipped), in run order."""
    out = []
    for result in cells:
        check = result.check("throughput")
        data = check.evidence.get(EVIDENCE_KEY) if check is not None else None
        if not isinstance(data, dict):
            continue
        if "engines_pd" not in data:  # the engines could not be counted: only why
            mine = Capacity.of(check) or Capacity(None, None, None)
            data = {"engines_pd": 0, "engines_control": 1, "pd": asdict(mine), "skipped": data.get("skipped", "")}
        out.append((result, Gain.from_json(data)))
    return out
