"""The accuracy check's settings (`checks.accuracy`): imports only canary.config and canary.core."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from canary.config.base import CheckSection, PositiveInt, Probability, Strict


class DatasetConfig(Strict):
    """Where GSM8K comes from."""

    source: Literal["hub", "local", "builtin"] = Field(
        "builtin", description="hub: openai/gsm8k; local: jsonl files; builtin: the project's tiny dataset."
    )
    hub_id: str = Field("openai/gsm8k", description="Dataset id on the hub (source: hub).")
    path: str | None = Field(
        None,
        description="source local: a directory with train.jsonl and test.jsonl, or a mirror of the hub "
        "repository (main/train-*.parquet, main/test-*.parquet). Takes precedence over train_path/test_path. "
        "Set with another source: a config error (it would be ignored).",
    )
    train_path: str | None = Field(None, description="Few-shot source jsonl (source: local).")
    test_path: str | None = Field(None, description="Evaluation jsonl (source: local).")


class AccuracyCheckConfig(Strict):
    """GSM8K through lm-eval with a Wilson absolute gate, a paired McNemar gate and early stop."""

    enabled: bool = Field(True, description="Run GSM8K.")
    dataset: DatasetConfig = Field(default_factory=DatasetConfig, description="GSM8K data source.")
    num_fewshot: int = Field(5, ge=0, description="Few-shot examples, as lm-eval's gsm8k task.")
    limit: PositiveInt = Field(200, description="Questions evaluated at most.")
    offset: int = Field(
        0, ge=0, description="Index of the first test question (P/D cells with a control use the control's)."
    )
    batch_size: PositiveInt = Field(50, description="Questions per sequential batch (early stop granularity).")
    early_stop: bool = Field(True, description="Stop as soon as the verdict is certain either way.")
    num_concurrent: PositiveInt = Field(4, description="Concurrent requests lm-eval sends.")
    max_gen_toks: PositiveInt = Field(64, description="Max generated tokens per answer.")
    confidence: Probability = Field(
        0.95,
        description="Confidence of the two-sided Wilson interval; with early_stop it is split evenly over the "
        "planned looks (Bonferroni).",
    )
    min_accuracy: Probability | None = Field(
        None,
        description="Absolute threshold T used as is. Unset: the model's expected_gsm8k - tolerance, else the "
        "held-out accuracy in the tiny model's canary-model.json - tolerance.",
    )
    tolerance: Probability = Field(
        0.0,
        description="Subtracted from the expected accuracy to get T. The gate fails when the Wilson upper bound "
        "< T (accuracy significantly below T); it passes early when the lower bound >= T.",
    )
    paired_alpha: Probability = Field(
        0.01, description="Significance of the exact McNemar test vs the control; fails only when P/D is worse."
    )
    order_buckets: PositiveInt = Field(4, description="Accuracy per consecutive slice of request order.")


SECTION = CheckSection(AccuracyCheckConfig, "GSM8K.")
