"""The accuracy check's exported metrics: Prometheus name, help, unit and the CheckResult.metrics key each reads."""

from __future__ import annotations

from canary.core import metric_keys as k
from canary.core.metric_spec import Exported, cell_metric

ACCURACY = cell_metric(
    "gsm8k_accuracy_ratio", "GSM8K exact-match accuracy (flexible extract) of the questions evaluated.", "ratio"
)
ACCURACY_LOW = cell_metric(
    "gsm8k_accuracy_wilson_lower_ratio", "Lower bound of the Wilson interval of GSM8K accuracy.", "ratio"
)
ACCURACY_HIGH = cell_metric(
    "gsm8k_accuracy_wilson_upper_ratio", "Upper bound of the Wilson interval of GSM8K accuracy.", "ratio"
)
ACCURACY_THRESHOLD = cell_metric(
    "gsm8k_accuracy_threshold_ratio",
    "The absolute accuracy gate: a cell fails when its Wilson upper bound is below it.",
    "ratio",
)
ACCURACY_PAIRED_P = cell_metric(
    "gsm8k_paired_p_value",
    "Exact McNemar p-value of a P/D cell against its aggregated control on the same questions.",
)
ACCURACY_QUESTIONS = cell_metric("gsm8k_questions", "GSM8K questions evaluated (early stop may end before the limit).")

EXPORTED: tuple[Exported, ...] = (
    Exported(ACCURACY, k.ACCURACY),
    Exported(ACCURACY_LOW, k.ACCURACY_WILSON_LOW),
    Exported(ACCURACY_HIGH, k.ACCURACY_WILSON_HIGH),
    Exported(ACCURACY_THRESHOLD, k.ACCURACY_THRESHOLD),
    Exported(ACCURACY_QUESTIONS, k.QUESTIONS),
    Exported(ACCURACY_PAIRED_P, k.MCNEMAR_P_VALUE),
)
"""What this check exports, in order (its `register(metrics=...)`)."""
