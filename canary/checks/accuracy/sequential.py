"""The sequential early-stop engine of the accuracy check (the rules are in canary.core.stats).

Questions run in batches; after each batch (a "look") the absolute gate (`stats.absolute_look`)
and, for a P/D cell, the paired gate against the aggregated control (`stats.paired_look`) decide
pass, fail or continue. The run stops at the first look whose verdict is certain; with early stop
off only the final look decides. The engine knows answers only by their question id, whether the
flexible-extract answer was right and the hash of the prompt (a control's answer pairs with a
question only when the prompts were byte-identical).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar

from canary.core import stats

HASH_CHARS = 16
"""Characters of a prompt's hash a control keeps per question (and pairing compares)."""


class Answer(Protocol):
    """What the engine reads of one answered question."""

    @property
    def doc_id(self) -> int: ...

    @property
    def flexible_correct(self) -> bool: ...

    @property
    def prompt_hash(self) -> str: ...


A = TypeVar("A", bound=Answer)


@dataclass
class LookRecord:
    """What one look saw and decided (kept in the evidence)."""

    look: int
    seen: int
    correct: int
    seconds: float
    absolute: str | None
    paired: str | None


@dataclass
class SequentialOutcome(Generic[A]):
    """Everything the sequential run produced."""

    questions: list[A]
    planned: int
    looks_planned: int
    looks: list[LookRecord] = field(default_factory=list)
    absolute: stats.AbsoluteLook | None = None
    paired: stats.PairedLook | None = None
    control_wrong_pd_right: int = 0
    control_right_pd_wrong: int = 0
    paired_count: int = 0
    prompt_mismatches: int = 0
    stopped_early: bool = False


def paired_counts(questions: Sequence[Answer], control: Mapping[int, tuple[bool, str]]) -> tuple[int, int, int, int]:
    """(control right & P/D wrong, control wrong & P/D right, paired, prompt mismatches).

    control: question id -> (the control's answer was right, the first HASH_CHARS of its prompt hash)."""
    b = c = paired = mismatched = 0
    for q in questions:
        ref = control.get(q.doc_id)
        if ref is None:
            continue
        if ref[1] != q.prompt_hash[:HASH_CHARS]:
            mismatched += 1
            continue
        paired += 1
        b += ref[0] and not q.flexible_correct
        c += (not ref[0]) and q.flexible_correct
    return b, c, paired, mismatched


def evaluate_sequentially(
    question_ids: Sequence[int],
    run_batch: Callable[[Sequence[int]], list[A]],
    *,
    batch_size: int,
    early_stop: bool,
    threshold: float | None,
    confidence: float,
    paired_alpha: float,
    control: Mapping[int, tuple[bool, str]] | None,
    clock: Callable[[], float] = time.monotonic,
) -> SequentialOutcome[A]:
    """Run the questions batch by batch; stop at the first look whose verdict is certain."""
    planned = len(question_ids)
    looks = stats.planned_looks(planned, batch_size, early_stop)
    outcome: SequentialOutcome[A] = SequentialOutcome(questions=[], planned=planned, looks_planned=looks)
    started = clock()
    batches = [list(question_ids[i : i + batch_size]) for i in range(0, planned, batch_size)]
    for number, batch in enumerate(batches, start=1):
        outcome.questions.extend(run_batch(batch))
        seen = len(outcome.questions)
        correct = sum(q.flexible_correct for q in outcome.questions)
        final = number == len(batches)
        if not early_stop and not final:
            continue
        decisions: list[str] = []
        if threshold is not None:
            outcome.absolute = stats.absolute_look(correct, seen, planned, threshold, confidence, looks)
            decisions.append(outcome.absolute.decision)
        if control is not None:
            b, c, paired, mismatched = paired_counts(outcome.questions, control)
            remaining = sum(1 for i in question_ids[seen:] if i in control)
            outcome.paired = stats.paired_look(b, c, remaining, paired_alpha, looks)
            outcome.control_right_pd_wrong, outcome.control_wrong_pd_right = b, c
            outcome.paired_count, outcome.prompt_mismatches = paired, mismatched
            decisions.append(outcome.paired.decision)
        outcome.looks.append(
            LookRecord(
                look=number,
                seen=seen,
                correct=correct,
                seconds=round(clock() - started, 2),
                absolute=outcome.absolute.decision if outcome.absolute else None,
                paired=outcome.paired.decision if outcome.paired else None,
            )
        )
        certain = decisions and ("fail" in decisions or all(d == "pass" for d in decisions))
        if early_stop and certain and not final:
            outcome.stopped_early = True
            break
    return outcome
