"""The canary's configuration: one strict pydantic root model loaded from YAML.

Every model forbids unknown keys and describes every field. `canary.config_load.load_config` turns
any problem (unreadable file, YAML syntax, unknown key, wrong type, impossible value, unknown
backend) into a `ConfigError` that names the file, the key path and what was expected.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field, field_validator, model_validator

from canary.yaml_model import StrictModel

Runner = Literal["v1", "v2"]
Topology = Literal["aggregated", "pd-nixl"]
Platform = Literal["cpu", "sm80", "sm90", "sm100"]
ExpectKind = Literal["startup-fail", "check-fail", "pass"]
CheckName = Literal["startup", "parity", "accuracy", "throughput", "kv_transfer"]
"""Every check, in the order the runner calls them (canary.checks.base.CHECK_ORDER)."""
PositiveInt = Annotated[int, Field(gt=0)]
Probability = Annotated[float, Field(ge=0.0, le=1.0)]


class Strict(StrictModel):
    """Base for every config model: unknown keys are errors, values are validated on assignment."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)


# --------------------------------------------------------------------------- models and images


class CompressedCache(Strict):
    """A compressed KV cache (DeepSeek-V4's compressor / indexer caches): one stored entry per
    `compress_ratio` logical tokens, so a logical block of B tokens is stored in a storage block of
    B / compress_ratio slots (vLLM 0.22.1 vllm/v1/kv_cache_interface.py:350-351 `storage_block_size`)."""

    compress_ratio: PositiveInt = Field(
        description="Logical tokens per stored entry; storage block = block size / compress_ratio (DeepSeek-V4's "
        "heavily compressed layers: 128, so --block-size 256 is stored in 2-slot blocks)."
    )

    def storage_block_size(self, block_size: int) -> int | None:
        """Slots per storage block for a logical block size (None: not a whole number of slots)."""
        if block_size % self.compress_ratio:
            return None
        return block_size // self.compress_ratio


class ModelSpec(Strict):
    """A model the matrix is run against."""

    name: str = Field(min_length=1, description="Served model name (what requests ask for).")
    source: str = Field(
        min_length=1,
        description="HF model id, local directory, or `builtin:tiny` for the model the project builds.",
    )
    attention: Literal["mha", "mla"] = Field("mha", description="Attention kind; MLA models need MLA backends.")
    compressed_cache: CompressedCache | None = Field(None, description="Set for models with a compressed KV cache.")
    max_model_len: PositiveInt = Field(2048, description="--max-model-len passed to every server.")
    tensor_parallel_size: PositiveInt = Field(1, description="--tensor-parallel-size per server.")
    expected_gsm8k: Probability | None = Field(
        None, description="Expected GSM8K flexible-extract accuracy of a healthy deployment (the absolute gate)."
    )
    extra_args: list[str] = Field(default_factory=list, description="Extra engine CLI args for this model.")


class ImageSpec(Strict):
    """A vLLM build under test: a container image on Kubernetes, an engine venv locally."""

    ref: str = Field(
        min_length=1,
        description="Container image reference (Kubernetes target) or a label locally. With `base`, derived "
        "(canary.images: <registry>/vllm-patched:v<release>-<series hash[:12]>); a ref given too must equal it.",
    )
    base: str | None = Field(
        None,
        description="Upstream image of a release in docker/images.yaml (e.g. vllm/vllm-openai:v0.21.0) that "
        "`patches` apply to: the ref is derived from both, so it is the tag `make images` builds.",
    )
    engine_python: str | None = Field(
        None, description="Local target: python of the engine venv (default: .venv-engine/bin/python)."
    )
    patches: str | None = Field(
        None, description="Patch series file (docker/patches format) applied on top of this image's vLLM."
    )
    description: str = Field("", description="What this image is (shown in reports).")

    @model_validator(mode="before")
    @classmethod
    def _derive_ref(cls, data: Any) -> Any:
        if not isinstance(data, dict) or data.get("base") is None:
            return data
        from canary.images import ImageError, derived_ref

        base, patches, given = data["base"], data.get("patches"), data.get("ref")
        try:
            derived = derived_ref(str(base), None if patches is None else str(patches))
        except ImageError as exc:
            raise ValueError(str(exc)) from None
        if given is not None and given != derived:
            raise ValueError(
                f"ref {given!r} is not the image of base {base!r} + patches {patches!r}: that is {derived}"
            )
        return {**data, "ref": derived}

    kernel_block_sizes: dict[str, list[PositiveInt]] = Field(
        default_factory=dict,
        description="Backend -> the kernel block sizes this build advertises where it differs from the catalog "
        "(e.g. {CPU_ATTN: [32]} for the CPU kernel-split build); the planner and the layout gates use it.",
    )


# --------------------------------------------------------------------------- matrix


class CellMatch(Strict):
    """Selects cells by their axis values; unset fields match anything."""

    model: str | None = Field(None, description="Served model name.")
    backend: str | None = Field(None, description="Attention backend name.")
    block_size: PositiveInt | None = Field(None, description="Matches a prefill OR decode block size.")
    prefill_block_size: PositiveInt | None = Field(None, description="Prefill (or aggregated) block size.")
    decode_block_size: PositiveInt | None = Field(None, description="Decode block size.")
    kv_cache_dtype: str | None = Field(None, description="KV cache dtype.")
    runner: Runner | None = Field(None, description="Model runner.")
    topology: Topology | None = Field(None, description="aggregated or pd-nixl.")
    image: str | None = Field(None, description="Image key (of prefill, in a mixed pair).")
    decode_runner: Runner | None = Field(None, description="Decode's model runner (P/D; == runner unless mixed).")
    decode_image: str | None = Field(None, description="Decode's image key (P/D; == image unless mixed).")


class Expectation(Strict):
    """A known outcome for matching cells (like vLLM's xfail configs): reported as expected."""

    match: CellMatch = Field(description="Which cells this expectation covers.")
    expect: ExpectKind = Field(description="startup-fail, check-fail, or pass.")
    reason: str = Field(min_length=1, description="Why (an issue link or a sentence); shown in every report.")
    failure_class: str | None = Field(
        None, description="For startup-fail: the signature id the failure must be classified as."
    )
    failing_checks: list[CheckName] | None = Field(
        None,
        min_length=1,
        description="For check-fail: the checks that must all fail (e.g. [parity, accuracy]); any other "
        "check failing still fails the cell, and a named check that passes makes it unexpected-pass. A named "
        "check that does not run (disabled) or cannot judge (invalid, skipped) counts neither way; when none "
        "of them judged, the cell is skipped (invalid if one was). Unset: any failing check meets the expectation.",
    )

    @model_validator(mode="after")
    def _fields_fit_the_kind(self) -> Expectation:
        if self.failing_checks is not None and self.expect != "check-fail":
            raise ValueError(f"failing_checks applies to expect: check-fail, not {self.expect}")
        if self.failure_class is not None and self.expect != "startup-fail":
            raise ValueError(f"failure_class applies to expect: startup-fail, not {self.expect}")
        return self


class ExtraCell(Strict):
    """A cell added by hand on top of the cross product (e.g. one P/D block-size mismatch)."""

    backend: str = Field(description="Attention backend name.")
    prefill_block_size: PositiveInt = Field(description="Prefill block size.")
    decode_block_size: PositiveInt = Field(description="Decode block size.")
    kv_cache_dtype: str = Field("auto", description="KV cache dtype.")
    runner: Runner = Field("v1", description="Model runner.")
    topology: Topology = Field("pd-nixl", description="Topology.")
    image: str | None = Field(None, description="Image key (default: every image).")
    model: str | None = Field(None, description="Served model name (default: every model).")
    decode_runner: Runner | None = Field(
        None,
        description="pd-nixl only: decode's model runner when it differs from prefill's (a mixed pair, as in a "
        "rolling upgrade; unset: the same).",
    )
    decode_image: str | None = Field(
        None,
        description="pd-nixl only: decode's image key when it differs from prefill's (a rolling upgrade that "
        "reached one side first; unset: the same).",
    )

    @model_validator(mode="after")
    def _mixed_pairs_are_pd(self) -> ExtraCell:
        if self.topology != "pd-nixl" and (self.decode_runner is not None or self.decode_image is not None):
            raise ValueError("decode_runner / decode_image make a mixed P/D pair: they need topology: pd-nixl")
        return self


class MatrixSpec(Strict):
    """The axes of the matrix; their cross product (filtered by the capability catalog) is the plan."""

    attention_backends: list[str] = Field(min_length=1, description="Backends by vLLM enum name.")
    prefill_block_sizes: list[PositiveInt] = Field(
        min_length=1, description="Logical block sizes of prefill servers (and of aggregated servers)."
    )
    decode_block_sizes: list[PositiveInt] | None = Field(
        None, description="Decode block sizes. Unset: decode uses the prefill block size (P == D only)."
    )
    kv_cache_dtypes: list[str] = Field(["auto"], min_length=1, description="--kv-cache-dtype values.")
    runners: list[Runner] = Field(["v1"], min_length=1, description="v1 or v2 (VLLM_USE_V2_MODEL_RUNNER).")
    topologies: list[Topology] = Field(
        ["aggregated", "pd-nixl"], min_length=1, description="aggregated control and/or P/D over NIXL."
    )
    images: list[str] | None = Field(None, description="Image keys to run (default: every image).")
    include: list[ExtraCell] = Field(default_factory=list, description="Cells added by hand.")
    exclude: list[CellMatch] = Field(default_factory=list, description="Cells removed from the plan.")
    expectations: list[Expectation] = Field(default_factory=list, description="Known outcomes (xfail).")
    reduction: Literal["full", "pairwise"] = Field(
        "full", description="full cross product, or pairwise covering (always keeps high-risk cells)."
    )
    run_unsupported: bool = Field(
        False, description="Run cells the platform cannot honour anyway (to prove fallback detection)."
    )

    @field_validator("attention_backends", "kv_cache_dtypes")
    @classmethod
    def _no_duplicates(cls, values: list[str]) -> list[str]:
        if len(set(values)) != len(values):
            raise ValueError(f"duplicate entries in {values}")
        return values

    @field_validator("attention_backends")
    @classmethod
    def _upper_backends(cls, values: list[str]) -> list[str]:
        return [v.upper() for v in values]


# --------------------------------------------------------------------------- checks


class StartupCheckConfig(Strict):
    """Startup: time to ready, failure classification, live-config verification."""

    enabled: bool = Field(True, description="Run the startup check (other checks need a started cell).")
    timeout_s: PositiveInt = Field(600, description="Deadline for a server to become ready.")
    poll_interval_s: float = Field(0.5, gt=0, description="How often /health is polled.")
    verify_live_config: bool = Field(True, description="Fail when the engine runs another config than asked.")
    layout_probe: bool = Field(
        True,
        description="Load the read-only KV layout probe into every engine (canary/targets/engine_site/"
        "layout_probe.py) and judge its record with the layout gates.",
    )


class KvTransferCheckConfig(Strict):
    """KV transfer proof for P/D cells from the decode server's NIXL counters."""

    enabled: bool = Field(True, description="Run the KV-transfer check on pd-nixl cells (aggregated: skipped).")
    min_bytes: int = Field(1, ge=0, description="Bytes that must have moved during the checks (at least 1).")
    probe_requests: int = Field(
        2, ge=0, description="Short requests the check sends itself, so the proof never depends on other checks."
    )
    max_recompute_share: Probability = Field(
        0.5,
        description="Largest share of decode's uncached prompt tokens it may compute itself (the rest must come "
        "over NIXL); a decode that silently recomputes the prefill computes all of them.",
    )


class DatasetConfig(Strict):
    """Where GSM8K comes from."""

    source: Literal["hub", "local", "builtin"] = Field(
        "builtin", description="hub: openai/gsm8k; local: jsonl files; builtin: the project's tiny dataset."
    )
    hub_id: str = Field("openai/gsm8k", description="Dataset id on the hub (source: hub).")
    path: str | None = Field(
        None,
        description="source local: a directory with train.jsonl and test.jsonl, or a mirror of the hub "
        "repository (main/train-*.parquet, main/test-*.parquet). Takes precedence over train_path/test_path.",
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


class ParityCheckConfig(Strict):
    """KV fidelity of P/D against the aggregated control, calibrated against the control's own noise."""

    enabled: bool = Field(True, description="Run parity (aggregated cells record the reference and null arm).")
    prompt_lengths: list[PositiveInt] = Field(
        [8], description="Prompt lengths in tokens, besides the block-relative ones."
    )
    block_relative: bool = Field(
        True,
        description="Also B/2, B-1, B, B+1, 2B, 2B+1 and 4B+1 tokens for every block size B of the planned cells "
        "(logical and kernel, prefill and decode), and the longest prompt that fits.",
    )
    max_tokens: PositiveInt = Field(32, description="Greedy tokens generated per prompt (ignore_eos).")
    top_logprobs: PositiveInt = Field(5, le=20, description="Top-k logprobs per position (both arms).")
    prompt_text: Literal["auto", "gsm8k", "natural", "mixed"] = Field(
        "auto",
        description=(
            "Text the prompts are cut from: gsm8k (held-out GSM8K-format items), natural (the project's "
            "prose paragraphs, canary/checks/parity_text.py), mixed (both, interleaved); auto: gsm8k for a "
            "builtin model (trained on arithmetic only), mixed for any other."
        ),
    )
    item_offset: int = Field(0, ge=0, description="Index of the held-out item the first prompt starts at.")
    dependence_min_nats: float = Field(
        0.01,
        gt=0,
        description="A prompt is evidence only if altering its first block changes the control's greedy tokens "
        "or moves a generated token's logprob by at least this much (and beyond the null arm).",
    )
    dependence_tokens: PositiveInt = Field(
        16, description="Greedy tokens generated for a prompt's altered-first-block twin (the evidence check)."
    )
    min_evidence_prompts: PositiveInt = Field(
        3, description="Fewer evidence prompts than this: the check is invalid (inconclusive), never pass."
    )
    null_concurrency: PositiveInt = Field(
        8, description="Requests in flight in the control's concurrent wave (the batch-composition null arm)."
    )
    margin: float = Field(
        2.0, ge=1.0, description="A P/D prompt exceeds the noise floor above margin x the largest null value."
    )
    alpha: Probability = Field(
        0.01, description="Significance of the exceedance (binomial) and token (Fisher) gates vs the null arm."
    )
    kl_tolerance: float = Field(1e-4, ge=0, description="Nats added to the KL threshold (float arithmetic).")
    logprob_tolerance: float = Field(
        1e-3, ge=0, description="Nats added to the absolute delta-logprob threshold (float arithmetic)."
    )
    request_timeout_s: float = Field(120.0, gt=0, description="Deadline of one parity request.")


class SloConfig(Strict):
    """Service-level objectives for goodput."""

    ttft_ms: float | None = Field(None, gt=0, description="Max time to first token.")
    tpot_ms: float | None = Field(None, gt=0, description="Max time per output token.")
    e2e_ms: float | None = Field(None, gt=0, description="Max end-to-end latency.")


class PerRequestTestConfig(Strict):
    """Per-request regression test against the baseline cell (canary/stats_requests.py)."""

    enabled: bool = Field(True, description="Compare per-request TTFT, ITL and E2E with the baseline cell.")
    alpha: Probability = Field(
        0.05, description="Family-wise error rate over every cell x metric of a run (Holm's step-down)."
    )
    confidence: Probability = Field(0.95, description="Confidence of the Hodges-Lehmann shift interval.")
    tolerance: Probability = Field(
        0.1, description="Least Hodges-Lehmann shift, relative to the baseline median, that counts as a regression."
    )
    min_samples: int = Field(
        20, ge=2, description="Fewer successful requests on either side: inconclusive (invalid), never a pass."
    )


class ThroughputCheckConfig(Strict):
    """Load test with locust: latency percentiles, tokens/s, goodput, regression vs baseline."""

    enabled: bool = Field(True, description="Run the load test.")
    endpoint: Literal["completions", "chat"] = Field("completions", description="API under load.")
    prompt_tokens: PositiveInt = Field(64, description="Prompt length in tokens (mean).")
    output_tokens: PositiveInt = Field(32, description="Output length in tokens (exact: ignore_eos).")
    length_distribution: Literal["fixed", "uniform", "normal"] = Field("fixed", description="Length spread.")
    length_spread: float = Field(
        0.25, ge=0, lt=1, description="uniform: half-width, normal: standard deviation, relative to the mean."
    )
    concurrency: PositiveInt = Field(
        4, description="Closed loop: concurrent users. Open loop: the most requests in flight."
    )
    request_rate: float | None = Field(None, gt=0, description="Open loop: requests/s (Poisson).")
    burstiness: float = Field(1.0, gt=0, description="Gamma shape of arrivals (1 = Poisson).")
    num_requests: PositiveInt = Field(200, description="Requests measured (after warm-up).")
    warmup_requests: int = Field(8, ge=0, description="Requests sent first and not measured.")
    max_duration_s: PositiveInt = Field(120, description="Hard time bound of one load run.")
    request_timeout_s: float = Field(60.0, gt=0, description="Network timeout of one request (per read).")
    repeats: PositiveInt = Field(1, description="Runs per cell; medians are compared.")
    seed: int = Field(0, description="Seed of prompts, lengths and arrivals (repeat i uses seed + i).")
    workers: int = Field(0, ge=0, description="0: one load process; N: a locust master with N local worker processes.")
    remote_workers: int = Field(
        0,
        ge=0,
        description="N > 0: instead of local workers, the load process is a locust master that waits for N workers "
        "started elsewhere with `python -m canary.load.run --worker --master-host HOST --master-port PORT`.",
    )
    master_bind_host: str = Field("127.0.0.1", description="remote_workers: interface the master listens on.")
    master_bind_port: int = Field(5557, gt=0, lt=65536, description="remote_workers: port the master listens on.")
    slo: SloConfig = Field(default_factory=SloConfig, description="Goodput SLOs.")
    min_requests_per_s: float | None = Field(None, ge=0, description="Absolute floor.")
    min_output_tokens_per_s: float | None = Field(None, ge=0, description="Absolute floor.")
    min_goodput_ratio: Probability | None = Field(
        None, description="Absolute floor on the share of requests that met every SLO."
    )
    max_error_rate: Probability = Field(
        0.0, description="Largest share of failed requests (failures never count as fast samples)."
    )
    regression_tolerance: Probability = Field(
        0.2, description="Allowed relative drop of the candidate vs the baseline image's cell."
    )
    regression_windows: int = Field(
        4,
        ge=0,
        description="A change beyond regression_tolerance fails only when every one of the candidate's windows "
        "(each run split into this many groups of consecutive requests) is worse than every one of the baseline's: "
        "the runs' own spread. 0: the tolerance alone decides.",
    )
    regression_metrics: list[str] = Field(
        ["requests_per_s", "output_tokens_per_s", "ttft_p50_s", "tpot_p50_s"],
        min_length=1,
        description="Metrics compared with the baseline (medians over repeats); *_per_s must not drop, "
        "latencies (*_s) must not rise by more than regression_tolerance.",
    )
    max_client_cpu_ratio: float = Field(
        0.9, gt=0, description="Load-generator CPU (core-seconds per second) above which the result is invalid."
    )
    max_client_lag_p99_ms: float = Field(
        50.0, gt=0, description="p99 gevent loop lag of the load generator above which the result is invalid."
    )
    per_request: PerRequestTestConfig = Field(
        default_factory=PerRequestTestConfig, description="Per-request Mann-Whitney / Hodges-Lehmann gate."
    )
    max_attempts: PositiveInt = Field(
        3,
        description="Measurements per cell while the result is invalid (the client, not the server, limited it: "
        "CPU, event-loop lag); the first valid one is judged, every attempt is recorded in evidence.attempts. "
        "Still invalid after the last: the check is invalid and the run inconclusive.",
    )
    retry_backoff_s: float = Field(
        5.0, ge=0, le=600, description="Wait before the second attempt; doubles before each further one."
    )
    max_foreign_cpu_cores: float | None = Field(
        None,
        gt=0,
        description="Local target: a load run during which processes outside the cell and the canary used more "
        "CPU than this many cores on average is invalid (measured again): its numbers are the machine's load, "
        "not the server's (canary/hostload.py). null: measured and reported, not gated.",
    )

    @field_validator("regression_metrics")
    @classmethod
    def _known_regression_metrics(cls, values: list[str]) -> list[str]:
        known = {"requests_per_s", "output_tokens_per_s", "total_tokens_per_s", "goodput_requests_per_s"} | {
            f"{kind}_{stat}_s" for kind in ("ttft", "tpot", "itl", "e2e") for stat in ("mean", "p50", "p90", "p99")
        }
        unknown = [v for v in values if v not in known]
        if unknown:
            raise ValueError(f"unknown metrics {unknown}; known: {sorted(known)}")
        return values

    @model_validator(mode="after")
    def _workers_have_users(self) -> ThroughputCheckConfig:
        for name in ("workers", "remote_workers"):
            if getattr(self, name) > self.concurrency:
                raise ValueError(f"{name} ({getattr(self, name)}) must not exceed concurrency ({self.concurrency})")
        if self.workers and self.remote_workers:
            raise ValueError("set workers (local processes) or remote_workers, not both")
        return self


class ChecksConfig(Strict):
    """Per-check settings."""

    startup: StartupCheckConfig = Field(default_factory=StartupCheckConfig, description="Startup check.")
    kv_transfer: KvTransferCheckConfig = Field(default_factory=KvTransferCheckConfig, description="KV proof.")
    accuracy: AccuracyCheckConfig = Field(default_factory=AccuracyCheckConfig, description="GSM8K.")
    parity: ParityCheckConfig = Field(default_factory=ParityCheckConfig, description="KV-fidelity parity.")
    throughput: ThroughputCheckConfig = Field(default_factory=ThroughputCheckConfig, description="Load test.")


# --------------------------------------------------------------------------- export


class PushgatewayConfig(Strict):
    """Push results to a Prometheus Pushgateway."""

    url: str | None = Field(None, description="Pushgateway URL; env PUSHGATEWAY_URL is used when unset.")
    job: str = Field("vllm-canary", description="Job name of the grouping key.")
    scope: str = Field("default", description="Second grouping-key label, so several canaries coexist.")
    retries: int = Field(3, ge=0, description="Retries before spooling to disk.")
    timeout_s: float = Field(10.0, gt=0, description="Per-request timeout.")


class HistoryConfig(Strict):
    """The run history (canary/history) and its change points."""

    enabled: bool = Field(True, description="Record every run in the history and look for change points.")
    path: str = Field(
        "history.sqlite", description="SQLite file, relative to results_dir unless absolute (used when url is unset)."
    )
    url: str | None = Field(
        None, description="postgresql://user:password@host:port/db: one history for several canaries instead of SQLite."
    )
    alpha: Probability = Field(0.05, description="Permutation-test level of an E-Divisive change point.")
    permutations: int = Field(499, ge=19, description="Permutations per significance test.")
    min_size: int = Field(3, ge=2, description="Least runs on each side of a change point.")
    min_relative_change: Probability = Field(
        0.1, description="Least change of the mean, relative to the earlier mean, that is reported."
    )
    recent_runs: int = Field(
        5, ge=1, description="A worse change point is exported (and alerts) while it lies within the last N runs."
    )
    window_runs: int = Field(
        60, ge=6, description="Change points are searched in the last N judged runs of a series (bounds the cost)."
    )


class ExportConfig(Strict):
    """Where results go."""

    results_dir: str = Field("results", description="Run directories land in RESULTS_DIR/<run-id>/.")
    pushgateway: PushgatewayConfig = Field(default_factory=PushgatewayConfig, description="Pushgateway.")
    textfile: str | None = Field(None, description="Also write a node-exporter textfile here.")
    junit: bool = Field(True, description="Write junit.xml.")
    html: bool = Field(True, description="Write summary.html.")
    history: HistoryConfig = Field(default_factory=HistoryConfig, description="Run history and change points.")


# --------------------------------------------------------------------------- targets


class LocalTargetConfig(Strict):
    """Start real vLLM processes on this machine."""

    engine_python: str = Field(".venv-engine/bin/python", description="Default engine venv python.")
    entrypoint: list[str] = Field(
        ["-m", "vllm.entrypoints.openai.api_server"], description="Args after python that start a server."
    )
    router: list[str] = Field([".venv-engine/bin/vllm-router"], description="P/D router command (vllm-router).")
    host: str = Field("127.0.0.1", description="Bind address; loopback unless you know why.")
    enforce_eager: bool = Field(True, description="--enforce-eager (CPU: saves ~1 min per start).")
    env: dict[str, str] = Field(default_factory=dict, description="Extra env for every engine process.")
    extra_args: list[str] = Field(default_factory=list, description="Extra args for every engine.")
    cpu_kvcache_space_gib: PositiveInt = Field(1, description="VLLM_CPU_KVCACHE_SPACE (CPU only).")
    nice: int = Field(
        10,
        ge=0,
        le=19,
        description="Run engines and the router this many nice steps below the canary, so the load client "
        "sharing their cores is not starved by what it measures (its lag check would mark the cell invalid). "
        "0: same priority. Each server's session (its scheduler autogroup) gets this nice too: with autogroups on, a "
        "process nice alone does not rank the server against the client, whose lag p99 beside a P/D pair on 2 cores "
        "fell from 30-140 ms to 13-20 ms with it.",
    )
    nixl_progress_delay_us: PositiveInt | None = Field(
        1000,
        description="CPU only: the least sleep (microseconds) of the NIXL agent's progress thread between "
        "polls. nixl 1.5.1 hard-codes 0, a busy loop that costs one core per engine: an idle P/D pair "
        "burned both cores of a 2-core machine and served 0.5 req/s. null leaves NIXL as shipped.",
    )


class EndpointTargetConfig(Strict):
    """Check an existing OpenAI-compatible server or P/D router; start nothing."""

    url: str = Field(description="Base URL of the server or router, e.g. http://127.0.0.1:8000.")
    model: str | None = Field(None, description="Model name (default: the first listed by /v1/models).")
    metrics_url: str | None = Field(None, description="/metrics of an aggregated server.")
    prefill_metrics_url: str | None = Field(None, description="/metrics of the prefill server (P/D).")
    decode_metrics_url: str | None = Field(None, description="/metrics of the decode server (P/D).")
    topology: Topology = Field("aggregated", description="What sits behind the URL.")


Placement = Literal["same-node", "cross-node"]
"""Where a P/D cell's decode pod runs relative to its prefill pod (vllm-pd renders pod (anti-)affinity)."""

UCX_NETWORK_TRANSPORTS = frozenset(
    {"rc", "rc_v", "rc_x", "rc_mlx5", "dc", "dc_x", "dc_mlx5", "ud", "ud_v", "ud_x", "ud_mlx5", "ib", "tcp"}
)
"""UCX transports (and the `ib` alias) that reach another node."""
UCX_CUDA_TRANSPORTS = frozenset({"cuda_copy", "cuda"})
"""UCX transports that handle GPU memory: UCX moves CUDA buffers only when one of them is listed."""
UCX_TRANSPORTS = (
    UCX_NETWORK_TRANSPORTS
    | UCX_CUDA_TRANSPORTS
    | frozenset({"cuda_ipc", "gdr_copy", "sm", "shm", "mm", "posix", "sysv", "xpmem", "cma", "knem", "self"})
)
"""UCX_TLS names the canary accepts (UCX 1.x transport names and aliases)."""
DEFAULT_UCX_TLS: dict[Placement, str] = {"same-node": "cuda_copy,cuda_ipc,rc", "cross-node": "rc,cuda_copy"}
"""UCX_TLS when a config names only the placement: CUDA IPC between GPUs of one node, RDMA across."""


class NixlTransportConfig(Strict):
    """How the NIXL connector of a P/D cell moves KV blocks on Kubernetes: placement and UCX_TLS."""

    placement: Placement = Field(
        "same-node",
        description="same-node: decode is scheduled onto prefill's node (pod affinity); cross-node: never "
        "onto it (pod anti-affinity). Both are required scheduling rules, so a cell that cannot be "
        "placed stays Pending instead of running elsewhere.",
    )
    ucx_tls: str | None = Field(
        None,
        description="UCX_TLS of prefill and decode, comma-separated, e.g. cuda_copy,cuda_ipc,rc (same "
        "node) or rc,cuda_copy / tcp,cuda_copy (across nodes). Unset: the placement's default "
        f"({DEFAULT_UCX_TLS}). GPU platforms must list cuda_copy (UCX moves no GPU memory without it); "
        "cross-node also a transport that leaves the node.",
    )

    @field_validator("ucx_tls")
    @classmethod
    def _known_transports(cls, value: str | None) -> str | None:
        if value is None:
            return None
        names = [name.strip() for name in value.split(",")]
        if any(not name for name in names):
            raise ValueError(f"empty transport name in {value!r} (comma-separated names, e.g. rc,cuda_copy)")
        if any(name in ("all", "^") or name.startswith("^") for name in names):
            raise ValueError(f"{value!r}: name the transports (no 'all', no '^' exclusions)")
        unknown = [name for name in names if name not in UCX_TRANSPORTS]
        if unknown:
            raise ValueError(f"unknown UCX transport(s) {unknown}; known: {sorted(UCX_TRANSPORTS)}")
        if len(set(names)) != len(names):
            raise ValueError(f"duplicate transports in {value!r}")
        return ",".join(names)

    @model_validator(mode="after")
    def _transport_reaches_the_peer(self) -> NixlTransportConfig:
        if self.placement == "cross-node" and not UCX_NETWORK_TRANSPORTS & set(self.transports):
            raise ValueError(
                f"placement cross-node but ucx_tls {self.tls!r} has no transport that leaves the node "
                f"(one of {sorted(UCX_NETWORK_TRANSPORTS)})"
            )
        return self

    @property
    def tls(self) -> str:
        """The UCX_TLS value the cells get (the placement's default when unset)."""
        return self.ucx_tls or DEFAULT_UCX_TLS[self.placement]

    @property
    def transports(self) -> list[str]:
        """UCX_TLS as a list."""
        return self.tls.split(",")


class RotationConfig(Strict):
    """Rolling coverage of a matrix larger than one run (Kubernetes target with a GPU budget)."""

    every_night: list[CellMatch] | None = Field(
        None,
        description="Cells that run every night (with the aggregated controls of their P/D cells). Unset: every "
        "high-risk cell. The other cells fill the rest of the window, least recently checked first.",
    )
    state_file: str | None = Field(
        None,
        description="JSON file with each cell's last check time (written atomically after every cell). "
        "Unset: RESULTS_DIR/rotation-<config name>.json. Keep it on a persistent volume.",
    )


class KubernetesTargetConfig(Strict):
    """Check cells deployed by the vllm-pd Helm chart, or deploy them in waves (gpu_budget)."""

    namespace: str = Field("vllm-canary", description="Namespace of the cells.")
    release: str = Field("vllm-pd", description="Helm release name of the vllm-pd chart.")
    in_cluster: bool = Field(True, description="Use the pod's service account (CronJob).")
    kubeconfig: str | None = Field(None, description="Kubeconfig path when not in cluster.")
    ready_timeout_s: PositiveInt = Field(1800, description="Deadline for pods to become Ready.")
    gpu_budget: PositiveInt | None = Field(
        None,
        description="GPUs the canary may hold at once. Set: the controller deploys the cells itself in waves that "
        "fit (helm template of `chart`), tearing each wave down before the next. Unset: Helm deployed every cell.",
    )
    job_deadline_s: PositiveInt = Field(
        14400,
        description="Wall-time limit of one run: the helm/canary CronJob's activeDeadlineSeconds is rendered from "
        "this key. `canary plan` refuses a plan that does not fit; a run starts no wave that would overrun it.",
    )
    typical_start_s: PositiveInt = Field(
        600, description="Typical seconds from creating a wave to its cells being ready (image pull, weights, JIT)."
    )
    teardown_timeout_s: PositiveInt = Field(
        600, description="Deadline for a torn-down wave's pods to disappear before the next wave starts."
    )
    chart: str = Field("helm/vllm-pd", description="The vllm-pd chart the waves are rendered from (gpu_budget).")
    chart_values: list[str] = Field(
        default_factory=list, description="Values files for the chart (GPU resources, node selectors, model cache)."
    )
    rotation: RotationConfig = Field(default_factory=RotationConfig, description="Rolling coverage.")
    nixl: NixlTransportConfig = Field(
        default_factory=NixlTransportConfig,
        description="Placement of prefill and decode and the UCX transports NIXL may use (P/D cells).",
    )


class TargetConfig(Strict):
    """Where cells run."""

    kind: Literal["local", "kubernetes", "endpoint"] = Field("local", description="Target kind.")
    local: LocalTargetConfig = Field(default_factory=LocalTargetConfig, description="Local settings.")
    endpoint: EndpointTargetConfig | None = Field(None, description="Endpoint settings (kind: endpoint).")
    kubernetes: KubernetesTargetConfig = Field(
        default_factory=KubernetesTargetConfig, description="Kubernetes settings."
    )

    @model_validator(mode="after")
    def _endpoint_needs_settings(self) -> TargetConfig:
        if self.kind == "endpoint" and self.endpoint is None:
            raise ValueError("target.kind is endpoint but target.endpoint is not set")
        return self


# --------------------------------------------------------------------------- root


class CanaryConfig(Strict):
    """The root of a canary config file."""

    version: Literal[1] = Field(1, description="Config schema version.")
    name: str = Field(min_length=1, pattern=r"^[a-z0-9][a-z0-9-]*$", description="Config name (lowercase-dash).")
    platform: Platform = Field(description="Where it runs: cpu, sm80, sm90 (H100/H200) or sm100.")
    models: list[ModelSpec] = Field(min_length=1, description="Models under test.")
    images: dict[str, ImageSpec] = Field(min_length=1, description="Images by key, e.g. baseline, candidate.")
    baseline_image: str | None = Field(None, description="Image the others are compared with (default: first).")
    matrix: MatrixSpec = Field(description="Matrix axes.")
    checks: ChecksConfig = Field(default_factory=ChecksConfig, description="Per-check settings.")
    export: ExportConfig = Field(default_factory=ExportConfig, description="Result export.")
    target: TargetConfig = Field(default_factory=TargetConfig, description="Where cells run.")

    @model_validator(mode="after")
    def _cross_references(self) -> CanaryConfig:
        image_keys = set(self.images)
        for index, image in enumerate(self.matrix.images or []):
            if image not in image_keys:
                raise _RefError(f"matrix.images.{index}", f"unknown image {image!r}; defined: {sorted(image_keys)}")
        if self.baseline_image is not None and self.baseline_image not in image_keys:
            raise _RefError("baseline_image", f"unknown image {self.baseline_image!r}; defined: {sorted(image_keys)}")
        model_names = [m.name for m in self.models]
        if len(set(model_names)) != len(model_names):
            raise _RefError("models", f"duplicate model names {model_names}")
        for index, extra in enumerate(self.matrix.include):
            if extra.image is not None and extra.image not in image_keys:
                raise _RefError(f"matrix.include.{index}.image", f"unknown image {extra.image!r}")
            if extra.decode_image is not None and extra.decode_image not in image_keys:
                raise _RefError(f"matrix.include.{index}.decode_image", f"unknown image {extra.decode_image!r}")
            if extra.model is not None and extra.model not in model_names:
                raise _RefError(f"matrix.include.{index}.model", f"unknown model {extra.model!r}")
        return self

    @model_validator(mode="after")
    def _nixl_transport_moves_gpu_memory(self) -> CanaryConfig:
        nixl = self.target.kubernetes.nixl
        if self.platform != "cpu" and not UCX_CUDA_TRANSPORTS & set(nixl.transports):
            raise _RefError(
                "target.kubernetes.nixl.ucx_tls",
                f"{nixl.tls!r} lists no cuda_copy: on {self.platform} the KV cache is GPU memory, which UCX "
                "moves only with a CUDA transport (e.g. rc,cuda_copy)",
            )
        return self

    @property
    def baseline(self) -> str:
        """The baseline image key."""
        return self.baseline_image or next(iter(self.images))

    def image_keys(self) -> list[str]:
        """Image keys the matrix runs."""
        return list(self.matrix.images or self.images)


class _RefError(ValueError):
    """A cross-reference error that knows its key path."""

    def __init__(self, key_path: str, message: str) -> None:
        super().__init__(message)
        self.key_path = key_path
