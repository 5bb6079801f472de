"""Baseline deployments kept past their cell, frozen, for a later cell's paired check.

A candidate's paired throughput verdict (canary.checks.throughput.paired) measures its baseline
counterpart cell beside it. When that counterpart ran earlier in the same run, deploying it again
costs a P/D start (22-28 s on the 2-core machine, ~55 s in a slow hour, when it starts beside the
candidate's live pair). So the runner keeps such a deployment after its cell's checks, frozen
(canary.targets.base.Freezes: the local target SIGSTOPs its process groups, the container target
`pause`s its containers; they keep memory and ports and take no CPU, so the cells run meanwhile start
and measure as if it were gone), and hands it
to the paired check, thawed, instead of a new one. The check then compares two deployments that have
both served their own cell's checks.

A held deployment is stopped right after the check that used it, after the last cell that could
want it, when the run ends, on Ctrl-C, and on a crash (the runner's ExitStack; the target's own
process cleanup is the backstop, and it continues a frozen group before it stops it). One that does
not answer within THAW_READY_S of its thaw is stopped and the cell deployed afresh; the check's
evidence says which happened (Deployment.evidence["held"]). A target that cannot freeze (Kubernetes;
a container CLI whose `pause` fails) gets no holding: its baseline is deployed again.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from canary.checks.throughput.paired import HELD_KEY, counterparts_in_order
from canary.config import CanaryConfig
from canary.plan.cell import Cell
from canary.targets.base import Deployment, Freezes, Target
from canary.targets.readiness import wait_ready

THAW_READY_S = 30.0
"""How long a thawed deployment gets to answer /v1/models again before it is replaced by a fresh one."""


@dataclass
class _Held:
    deployment: Deployment
    stack: ExitStack
    consumers: set[str]
    frozen_at: float = field(default_factory=time.monotonic)


class HeldDeployments:
    """The runner's deploys for one run: `deploy_cell` for each cell, `deploy` for the checks (what
    CheckContext.deploy calls), `finished` after each cell, and `close` at the end (or use `with`)."""

    def __init__(
        self, target: Target, config: CanaryConfig, cells: Sequence[Cell], progress: Callable[[str], None]
    ) -> None:
        self.target = target
        self.progress = progress
        self.wanted = counterparts_in_order(config, cells) if isinstance(target, Freezes) else {}
        self._held: dict[str, _Held] = {}
        self._finished: set[str] = set()

    def __enter__(self) -> HeldDeployments:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def held(self) -> list[str]:
        """Ids of the cells whose deployments are held now."""
        return list(self._held)

    @contextmanager
    def deploy_cell(self, cell: Cell, log_dir: Path) -> Iterator[Deployment]:
        """Deploy a cell for its own checks. One a later cell's paired check wants is frozen and kept at
        the end instead of stopped (when it started and the target froze it)."""
        consumers = self.wanted.get(cell.id, set()) - self._finished
        if not consumers:
            with self.target.deploy(cell, log_dir) as deployment:
                yield deployment
            return
        stack = ExitStack()
        try:
            deployment = stack.enter_context(self.target.deploy(cell, log_dir))
            yield deployment
            assert isinstance(self.target, Freezes)  # wanted is empty otherwise
            if deployment.started and self.target.freeze(deployment):
                self._held[cell.id] = _Held(deployment, stack, consumers)
                self.progress(f"{cell.id}: kept, frozen, for the paired check of {', '.join(sorted(consumers))}")
                return
        except BaseException:
            stack.close()
            raise
        stack.close()

    @contextmanager
    def deploy(self, cell: Cell, log_dir: Path) -> Iterator[Deployment]:
        """A check's deploy of another cell (canary.checks.base.DeployFn): the held deployment thawed when
        there is one that answers, else a fresh one. Either is stopped when the check is done with it."""
        held = self._held.pop(cell.id, None)
        note: dict[str, object] | None = None
        if held is not None:
            try:
                note = self._thaw(cell, held)
            except BaseException:  # no longer held: nothing else would stop it before the run's end
                held.stack.close()
                raise
            if "discarded" not in note:
                held.deployment.evidence[HELD_KEY] = note
                with held.stack:
                    yield held.deployment
                return
            held.stack.close()
        with self.target.deploy(cell, log_dir) as deployment:
            if note is not None:
                deployment.evidence[HELD_KEY] = note
            yield deployment

    def _thaw(self, cell: Cell, held: _Held) -> dict[str, object]:
        assert isinstance(self.target, Freezes)
        frozen_s = round(time.monotonic() - held.frozen_at, 1)
        self.target.thaw(held.deployment)
        thawed = time.monotonic()
        deployment = held.deployment
        probe = wait_ready(deployment.base_url, deployment.served_model, thawed + THAW_READY_S, interval_s=0.2)
        note: dict[str, object] = {"from_cell": cell.id, "frozen_s": frozen_s}
        if probe.ready:
            note["ready_after_thaw_s"] = round(time.monotonic() - thawed, 2)
            self.progress(f"{cell.id}: thawed after {frozen_s:.0f} s frozen for the paired check")
        else:
            note["discarded"] = f"no answer {THAW_READY_S:.0f} s after its thaw ({probe.detail}); deployed afresh"
            self.progress(f"{cell.id}: the held deployment {note['discarded']}")
        return note

    def finished(self, cell_id: str) -> None:
        """A cell has run: stop every held deployment no cell still to run wants."""
        self._finished.add(cell_id)
        for held_id in [h for h, held in self._held.items() if held.consumers <= self._finished]:
            self._held.pop(held_id).stack.close()

    def close(self) -> None:
        """Stop every held deployment (the run ended, or was interrupted)."""
        with ExitStack() as stops:  # each is stopped even when another's stop raises
            for held in self._held.values():
                stops.callback(held.stack.close)
            self._held.clear()
