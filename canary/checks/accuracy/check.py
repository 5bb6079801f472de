"""GSM8K accuracy through lm-eval, with an absolute Wilson gate, a paired McNemar gate against the
aggregated control, order buckets and a sequential early stop (canary/checks/accuracy/sequential.py runs it,
its rules are in canary/core/stats.py).

The threshold T of the absolute gate, first found wins:
1. checks.accuracy.min_accuracy (a floor, used as is);
2. the model's expected_gsm8k minus checks.accuracy.tolerance;
3. for a model the project built (builtin:<name>, or a directory holding canary-model.json): the
   held-out accuracy its build measured (`heldout.accuracy` on `heldout.n` questions), taken at
   the lower end of its own Wilson interval (the build's figure is an estimate too), minus
   tolerance. That figure is a teacher-forced exact match of the whole worked answer on the first
   questions of the same test split, close to what lm-eval's flexible-extract scores on them;
4. none: the absolute gate is not applied and the result says so.
The gated score is flexible-extract (what expected_gsm8k means); strict-match is reported too.

P/D cells are paired with their aggregated control: the control's per-question correctness and
prompt hashes are kept in its CheckResult evidence (`per_question`), the P/D cell runs the same
question ids in the same batches (so lm-eval builds byte-identical few-shot prompts) and only
questions whose prompt hashes agree are paired. Every question's output goes to
<cell dir>/accuracy_samples.jsonl.
"""

from __future__ import annotations

import itertools
import json
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from canary.checks.accuracy.estimate import estimate
from canary.checks.accuracy.exported import EXPORTED
from canary.checks.accuracy.gsm8k import (
    Gsm8kError,
    Gsm8kRunner,
    QuestionResult,
    mean_stderr,
    resolve_dataset,
    write_samples,
)
from canary.checks.accuracy.sequential import HASH_CHARS, SequentialOutcome, evaluate_sequentially
from canary.checks.base import CheckContext, register
from canary.config import AccuracyCheckConfig, CanaryConfig, ModelSpec
from canary.core import metric_keys as keys
from canary.core import stats
from canary.judge.results import CheckResult, Gate, Verdict
from canary.model.params import MANIFEST_NAME
from canary.model.ref import local_model_dir

SAMPLES_FILE = "accuracy_samples.jsonl"


# --------------------------------------------------------------------------- threshold


@dataclass(frozen=True)
class Threshold:
    """The absolute gate's threshold and where it came from."""

    value: float
    source: str


@dataclass(frozen=True)
class HeldOut:
    """The held-out accuracy a tiny-model build recorded, and on how many questions."""

    accuracy: float
    n: int


def manifest_heldout(model_source: str) -> HeldOut | None:
    """Held-out accuracy recorded by the tiny model's build, if the model has a manifest."""
    model_dir = local_model_dir(model_source)
    if model_dir is None or not (model_dir / MANIFEST_NAME).is_file():
        return None
    data = json.loads((model_dir / MANIFEST_NAME).read_text(encoding="utf-8"))
    heldout = data.get("heldout") if isinstance(data, dict) else None
    if not isinstance(heldout, dict) or not isinstance(heldout.get("accuracy"), (int, float)):
        return None
    n = heldout.get("n")
    return HeldOut(float(heldout["accuracy"]), int(n) if isinstance(n, int) and n > 0 else 0)


def resolve_threshold(settings: AccuracyCheckConfig, model: ModelSpec) -> Threshold | None:
    """T for the absolute gate (see the module docstring for the order)."""
    if settings.min_accuracy is not None:
        return Threshold(settings.min_accuracy, "checks.accuracy.min_accuracy")
    if model.expected_gsm8k is not None:
        return Threshold(
            max(0.0, model.expected_gsm8k - settings.tolerance),
            f"expected_gsm8k {model.expected_gsm8k:.3f} of {model.name} - tolerance {settings.tolerance:.3f}",
        )
    heldout = manifest_heldout(model.source)
    if heldout is None:
        return None
    # The build measured its accuracy on n questions: take that estimate's own Wilson lower bound
    # (same confidence), so the reference's sampling error does not fail healthy cells.
    reference = heldout.accuracy
    detail = f"held-out accuracy {heldout.accuracy:.3f}"
    if heldout.n:
        reference = stats.wilson_interval(round(heldout.accuracy * heldout.n), heldout.n, settings.confidence)[0]
        detail += f" on {heldout.n} (Wilson low {reference:.3f})"
    return Threshold(
        max(0.0, reference - settings.tolerance),
        f"{detail} in {MANIFEST_NAME} of {model.source} - tolerance {settings.tolerance:.3f}",
    )


def model_spec(config: CanaryConfig, name: str) -> ModelSpec:
    """The model of a cell by served name."""
    return next(m for m in config.models if m.name == name)


# --------------------------------------------------------------------------- control


@dataclass(frozen=True)
class ControlAnswers:
    """The aggregated control's per-question flexible-extract correctness and prompt hashes."""

    cell_id: str
    order: list[int]
    answers: dict[int, tuple[bool, str]]


def per_question_evidence(questions: Sequence[QuestionResult]) -> list[list[Any]]:
    """Compact per-question rows kept in the evidence: [doc_id, flexible ok, strict ok, prompt hash]."""
    return [[q.doc_id, int(q.flexible_correct), int(q.strict_correct), q.prompt_hash[:HASH_CHARS]] for q in questions]


def control_answers(ctx: CheckContext) -> tuple[ControlAnswers | None, str]:
    """The control's answers for a P/D cell (None and why when there are none)."""
    if ctx.cell.topology != "pd-nixl":
        return None, "aggregated cell: no paired comparison"
    control = ctx.control_for()
    if control is None:
        return None, "no aggregated control started"
    result = control.check("accuracy")
    rows = result.evidence.get("per_question") if result is not None else None
    if not isinstance(rows, list) or not rows:
        return None, f"control {control.cell.id} recorded no per-question accuracy"
    order = [int(r[0]) for r in rows]
    answers = {int(r[0]): (bool(r[1]), str(r[3])) for r in rows}
    return ControlAnswers(control.cell.id, order, answers), f"control {control.cell.id}"


# --------------------------------------------------------------------------- reporting


def order_buckets(questions: Sequence[QuestionResult], buckets: int) -> list[float]:
    """Flexible-extract accuracy per consecutive slice of run order."""
    n = len(questions)
    count = min(buckets, n)
    if count == 0:
        return []
    edges = [round(i * n / count) for i in range(count + 1)]
    return [sum(q.flexible_correct for q in questions[lo:hi]) / (hi - lo) for lo, hi in itertools.pairwise(edges)]


def build_result(
    outcome: SequentialOutcome[QuestionResult],
    settings: AccuracyCheckConfig,
    threshold: Threshold | None,
    paired_source: str,
    seconds: float,
    dataset: str,
    samples_path: Path,
) -> CheckResult:
    """Metrics, gates and evidence of a finished run."""
    qs = outcome.questions
    n = len(qs)
    flexible = [q.flexible_correct for q in qs]
    strict = [q.strict_correct for q in qs]
    accuracy = sum(flexible) / n if n else 0.0
    level = stats.look_confidence(settings.confidence, outcome.looks_planned)
    low, high = stats.wilson_interval(sum(flexible), n, level)
    metrics: dict[str, float] = {
        keys.ACCURACY: round(accuracy, 4),
        "accuracy_strict": round(sum(strict) / n, 4) if n else 0.0,
        "accuracy_stderr": round(mean_stderr(flexible), 4),
        "accuracy_strict_stderr": round(mean_stderr(strict), 4),
        keys.ACCURACY_WILSON_LOW: round(low, 4),
        keys.ACCURACY_WILSON_HIGH: round(high, 4),
        "unparseable_rate": round(sum(q.unparseable for q in qs) / n, 4) if n else 0.0,
        "strict_unparseable_rate": round(sum(q.strict_answer == "[invalid]" for q in qs) / n, 4) if n else 0.0,
        keys.QUESTIONS: float(n),
        "questions_planned": float(outcome.planned),
        "eval_seconds": round(seconds, 2),
    }
    for index, value in enumerate(order_buckets(qs, settings.order_buckets)):
        metrics[f"accuracy_bucket_{index}"] = round(value, 4)
    gates: list[Gate] = []
    if threshold is not None and outcome.absolute is not None:
        metrics[keys.ACCURACY_THRESHOLD] = round(threshold.value, 4)
        gates.append(
            Gate(
                name="wilson-vs-threshold",
                passed=outcome.absolute.decision != "fail",
                observed=round(high, 4),
                threshold=round(threshold.value, 4),
                detail=(
                    f"flexible-extract {accuracy:.3f} ({sum(flexible)}/{n}), Wilson [{low:.3f}, {high:.3f}] at "
                    f"{level:.2%} vs {threshold.value:.3f} ({threshold.source}): {outcome.absolute.reason}"
                ),
            )
        )
    if outcome.paired is not None:
        metrics.update(
            {
                keys.MCNEMAR_P_VALUE: round(outcome.paired.p_value, 6),
                "discordant_pd_wrong": float(outcome.control_right_pd_wrong),
                "discordant_pd_right": float(outcome.control_wrong_pd_right),
                "paired_questions": float(outcome.paired_count),
            }
        )
        gates.append(
            Gate(
                name="mcnemar-vs-control",
                passed=outcome.paired.decision != "fail",
                observed=round(outcome.paired.p_value, 6),
                threshold=outcome.paired.alpha,
                detail=f"{outcome.paired_count} questions paired with {paired_source}: {outcome.paired.reason}",
            )
        )
    failed = [g for g in gates if not g.passed]
    verdict: Verdict = "fail" if failed else "pass" if gates else "ungated"
    stop_note = f", stopped early after {n}/{outcome.planned}" if outcome.stopped_early else ""
    if failed:
        summary = "; ".join(g.detail for g in failed)
    elif gates:
        summary = f"GSM8K {accuracy:.3f} on {n} questions{stop_note}, gates passed"
    else:
        summary = (
            f"GSM8K {accuracy:.3f} on {n} questions, ungated: no threshold and no control to compare with "
            "(set models[].expected_gsm8k or checks.accuracy.min_accuracy, or run the aggregated control)"
        )
    wrong = [q for q in qs if not q.flexible_correct][:3]
    evidence: dict[str, Any] = {
        "dataset": dataset,
        "threshold_source": threshold.source if threshold else None,
        "confidence_per_look": level,
        "looks": [vars(look) for look in outcome.looks],
        "looks_planned": outcome.looks_planned,
        "stopped_early": outcome.stopped_early,
        "paired_with": paired_source,
        "prompt_mismatches": outcome.prompt_mismatches,
        "per_question": per_question_evidence(qs),
        "samples_file": str(samples_path),
        "wrong_examples": [{"doc_id": q.doc_id, "target": q.target, "output": q.output[:200]} for q in wrong],
    }
    return CheckResult(
        name="accuracy", verdict=verdict, summary=summary, metrics=metrics, gates=gates, evidence=evidence
    )


# --------------------------------------------------------------------------- the check


@register(
    "accuracy",
    order=2,
    settings=AccuracyCheckConfig,
    metrics=EXPORTED,
    estimate=estimate,
)
def accuracy_check(ctx: CheckContext) -> CheckResult:
    """GSM8K on the cell's endpoint (the router for P/D), gated and paired with the control."""
    settings = ctx.config.checks.accuracy
    model = model_spec(ctx.config, ctx.cell.model)
    threshold = resolve_threshold(settings, model)
    dataset = resolve_dataset(settings.dataset, model.source)
    control, paired_source = control_answers(ctx)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="canary-gsm8k-") as tmp:
        runner = Gsm8kRunner(
            base_url=ctx.deployment.base_url,
            model=ctx.deployment.served_model,
            include_dir=Path(tmp),
            dataset=dataset,
            num_fewshot=settings.num_fewshot,
            num_concurrent=settings.num_concurrent,
            max_gen_toks=settings.max_gen_toks,
            log_path=ctx.cell_dir / "logs" / "lm-eval.log",
        )
        if control is not None:
            question_ids = control.order[: settings.limit]
        else:
            available = runner.test_size()
            if settings.offset >= available:
                raise Gsm8kError(f"checks.accuracy.offset {settings.offset} >= {available} test questions")
            question_ids = list(range(settings.offset, min(settings.offset + settings.limit, available)))
        outcome = evaluate_sequentially(
            question_ids,
            runner.run,
            batch_size=settings.batch_size,
            early_stop=settings.early_stop,
            threshold=threshold.value if threshold else None,
            confidence=settings.confidence,
            paired_alpha=settings.paired_alpha,
            control=control.answers if control else None,
        )
    samples_path = ctx.cell_dir / SAMPLES_FILE
    write_samples(samples_path, outcome.questions)
    return build_result(
        outcome, settings, threshold, paired_source, time.monotonic() - started, dataset.description, samples_path
    )
