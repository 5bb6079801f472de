"""The throughput check's settings (`checks.throughput`) and its parts (SLOs, per-request test, capacity search,
paired verdict, parity under load): imports only canary.config and canary.core."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from canary.config.base import CheckSection, PositiveInt, Probability, Strict
from canary.config.workloads import WorkloadShape, arrival_problem
from canary.core.words import listing


class SloConfig(Strict):
    """Service-level objectives for goodput."""

    ttft_ms: float | None = Field(None, gt=0, description="Max time to first token.")
    tpot_ms: float | None = Field(None, gt=0, description="Max time per output token.")
    e2e_ms: float | None = Field(None, gt=0, description="Max end-to-end latency.")


class PerRequestTestConfig(Strict):
    """Per-request regression test against the baseline cell (canary/core/request_stats.py)."""

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


class CapacityConfig(Strict):
    """An SLO capacity search after the throughput measurement (docs/methodology/capacity.md): off by default."""

    enabled: bool = Field(
        False, description="Search the highest open-loop rate at which the SLO below holds (informational: no gate)."
    )
    ttft_ms: float = Field(1000.0, gt=0, description="A request meets the SLO with a TTFT at most this long ...")
    itl_ms: float = Field(50.0, gt=0, description="... and its own inter-token gaps (itl_statistic) at most this.")
    itl_statistic: Literal["p99", "mean"] = Field(
        "p99", description="p99 of a request's gaps, or their mean (its TPOT), compared with itl_ms."
    )
    attainment: float = Field(0.9, gt=0, lt=1, description="Share of requests that must meet the SLO at a rate.")
    confidence: float = Field(0.95, gt=0, lt=1, description="Confidence of each rate's Wilson interval.")
    burstiness: float = Field(1.0, gt=0, description="Gamma shape of the probes' arrivals (1 = Poisson).")
    start_rate: float = Field(1.0, gt=0, description="First rate probed (requests/s).")
    growth: float = Field(2.0, gt=1, description="Factor between rates until the SLO fails (or holds).")
    max_rate: float = Field(1000.0, gt=0, description="Highest rate probed.")
    precision: float = Field(
        0.1,
        gt=0,
        description="Stop bisecting when the lowest failing rate is within this share above the highest passing.",
    )
    half_width: float = Field(
        0.1,
        gt=0,
        description="Then refine near the boundary until the capacity's interval is within +- this share "
        "((high - low) / (high + low)), or a budget is spent.",
    )
    seconds_per_probe: float = Field(20.0, gt=0, description="Requests per probe: rate x this (clamped to 40..600).")
    budget_requests: PositiveInt = Field(2000, description="Requests the search may send (one probe may overrun).")
    budget_s: float = Field(300.0, gt=0, description="Seconds the search may take (one probe may overrun).")
    max_probes: PositiveInt = Field(12, description="Rates the search may probe.")

    @model_validator(mode="after")
    def _rates_in_order(self) -> CapacityConfig:
        if self.start_rate > self.max_rate:
            raise ValueError(f"start_rate ({self.start_rate}) must not exceed max_rate ({self.max_rate})")
        return self


MAX_PAIRS_PER_ROUND = 1000
"""Window seeds of a round are 1000 apart (canary.checks.throughput.paired.SEED_OFFSET)."""


class PairedConfig(Strict):
    """The paired build-vs-build verdict (docs/methodology/throughput.md, "Paired verdict"): off by default."""

    enabled: bool = Field(
        False,
        description="A candidate cell with a baseline counterpart deploys that counterpart beside itself and "
        "measures both in alternating windows (A B B A ...); the ratio's interval against `margin` replaces the "
        "unpaired regression gates (regression_tolerance).",
    )
    cells: list[str] = Field(
        [],
        description="Only candidate cells whose id starts with one of these get the paired verdict (like --only); "
        "empty: every candidate cell with a baseline counterpart. Each paired cell costs a deployment and "
        "2 x pairs windows, so a small machine pairs the cells it cares about.",
    )
    margin: float = Field(
        0.15,
        gt=0,
        lt=1,
        description="Tolerated loss: pass when the ratio's low end >= 1 - margin, regress when "
        "its high end < 1 - margin, else inconclusive (the check is invalid, the run INCONCLUSIVE).",
    )
    confidence: float = Field(0.95, gt=0, lt=1, description="Confidence of the two-sided t interval of the ratio.")
    trim: float = Field(
        0.2,
        ge=0,
        lt=0.5,
        description="Share of the pairs' log ratios cut at each end (Yuen's trimmed-mean t interval; 0: plain t): "
        "a pair straddling a change of the machine's speed is an outlier.",
    )
    metric: Literal["requests_per_s", "output_tokens_per_s"] = Field(
        "requests_per_s", description="The throughput number of each window compared."
    )
    pairs: int = Field(
        32,
        ge=1,
        description="A/B window pairs per round (2 x pairs windows, ABBA order). A window's noise dominates on a "
        "small machine: 32 pairs of 16 requests gave a +-6-7% interval on 2 cores.",
    )
    max_pairs: PositiveInt | None = Field(
        None,
        description="A sequential check: while the verdict is inconclusive after `pairs`, measure `pairs` more on "
        "the same deployments, up to max_pairs in all. Each look's interval is at 1 - (1 - confidence) / looks, "
        "looks = ceil(max_pairs / pairs) (a Bonferroni split: the chance that any look's interval misses stays "
        "within 1 - confidence). null: one look of `pairs`. One deployment round only (redeploy_rounds 1).",
    )
    requests_per_window: PositiveInt = Field(
        16, description="Requests measured per window (closed loop at `concurrency`, or open loop at request_rate)."
    )
    warmup_requests: int = Field(2, ge=0, description="Requests sent first in each window and not measured.")
    fresh_candidate: bool = Field(
        False,
        description="Round 1 deploys the candidate afresh too (the cell's own deployment waits, idle), so both arms "
        "start from the same state; false: round 1 measures the cell's own deployment, which has already served the "
        "cell's checks (one deployment fewer).",
    )
    redeploy_rounds: PositiveInt = Field(
        1,
        description="Deployments per arm. 1: the candidate's own deployment and one of the baseline, the interval "
        "over the window pairs. N > 1: rounds 2..N deploy both cells afresh, the interval is over the rounds' "
        "mean log ratios (deployment-level modes then count as noise).",
    )

    @model_validator(mode="after")
    def _sequential(self) -> PairedConfig:
        if self.max_pairs is None:
            return self
        if self.max_pairs < self.pairs:
            raise ValueError(f"max_pairs ({self.max_pairs}) is below pairs ({self.pairs})")
        if self.max_pairs >= MAX_PAIRS_PER_ROUND:
            raise ValueError(f"max_pairs ({self.max_pairs}) must stay below {MAX_PAIRS_PER_ROUND}")
        if self.redeploy_rounds > 1:
            raise ValueError("max_pairs (a sequential check) needs redeploy_rounds 1: its looks add pairs, not rounds")
        return self

    @property
    def looks(self) -> int:
        """How many times the verdict may be read: 1, or ceil(max_pairs / pairs)."""
        return 1 if self.max_pairs is None else -(-self.max_pairs // self.pairs)


class LoadParityConfig(Strict):
    """Greedy parity prompts ridden inside the throughput check's load run, judged like parity
    (docs/methodology/load-parity.md)."""

    enabled: bool = Field(
        False,
        description="Send seeded parity prompts (greedy, top-k logprobs) while the load runs and compare their tokens "
        "with the control's reference against the null arm (the control's own samples under the same load). Needs "
        "a vLLM server (logprobs, return_tokens_as_token_ids) and the aggregated control in the same run.",
    )
    share: float = Field(
        0.25,
        gt=0,
        le=1,
        description="Parity samples as a share of the load: up to ceil(share x num_requests) samples, "
        "max(1, round(share x concurrency)) of them in flight at a time, while the load runs.",
    )
    prompt_lengths: list[PositiveInt] = Field(
        [257, 513],
        min_length=1,
        description="Sample prompt lengths in tokens, used in turn (each sample a distinct prompt: no prefix-cache "
        "hit on decode); long enough to load several KV blocks.",
    )
    start_wait_s: float = Field(
        10.0,
        ge=0,
        description="The longest wait, after the load process is started, for its first requests to show on the "
        "cell's engines (/metrics: requests running or waiting) before the first sample is sent; a sample that "
        "did not run entirely inside the load is left out.",
    )
    min_samples: PositiveInt = Field(
        3,
        description="Fewer samples that ran entirely inside the load (evidence prompts): the sub-verdict is invalid "
        "and no gate is added.",
    )

    @field_validator("prompt_lengths")
    @classmethod
    def _at_least_two(cls, values: list[int]) -> list[int]:
        if any(v < 2 for v in values):
            raise ValueError("prompt lengths must be at least 2 tokens")
        return values


class ThroughputCheckConfig(Strict):
    """Load test with locust: latency percentiles, tokens/s, goodput, regression vs baseline."""

    enabled: bool = Field(True, description="Run the load test.")
    endpoint: Literal["completions", "chat"] = Field("completions", description="API under load.")
    workload: WorkloadShape = Field(
        default_factory=WorkloadShape,
        description="The named workload: synthetic (default), shared_prefix, multi_turn, block_residues or trace "
        "(docs/methodology/throughput.md, Workloads).",
    )
    prompt_tokens: PositiveInt = Field(
        64, description="Prompt length in tokens (mean; shared_prefix: the suffix; multi_turn: new tokens a turn)."
    )
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
    open_loop: bool = Field(
        False,
        description="With request_rate: send every request at its scheduled time whatever is in flight "
        "(concurrency unused); false: `concurrency` users paced by the rate.",
    )
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
        "started elsewhere with `python -m canary.load.process --worker --master-host HOST --master-port PORT`.",
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
    capacity: CapacityConfig = Field(
        default_factory=CapacityConfig, description="SLO capacity search after the measurement (off by default)."
    )
    paired: PairedConfig = Field(
        default_factory=PairedConfig, description="Paired build-vs-build verdict against the baseline (off by default)."
    )
    load_parity: LoadParityConfig = Field(
        default_factory=LoadParityConfig,
        description="Parity under load: greedy parity prompts inside the load run, judged against the control.",
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
        "not the server's (canary/checks/throughput/hostload.py). null: measured and reported, not gated.",
    )

    @field_validator("regression_metrics")
    @classmethod
    def _known_regression_metrics(cls, values: list[str]) -> list[str]:
        known = {"requests_per_s", "output_tokens_per_s", "total_tokens_per_s", "goodput_requests_per_s"} | {
            f"{kind}_{stat}_s" for kind in ("ttft", "tpot", "itl", "e2e") for stat in ("mean", "p50", "p90", "p99")
        }
        unknown = [v for v in values if v not in known]
        if unknown:
            raise ValueError(f"unknown metrics {listing(unknown)}; known: {listing(sorted(known))}")
        return values

    @model_validator(mode="after")
    def _workers_have_users(self) -> ThroughputCheckConfig:
        for name in ("workers", "remote_workers"):
            if getattr(self, name) > self.concurrency:
                raise ValueError(f"{name} ({getattr(self, name)}) must not exceed concurrency ({self.concurrency})")
        if self.workers and self.remote_workers:
            raise ValueError("set workers (local processes) or remote_workers, not both")
        problem = arrival_problem(self.workload, self.open_loop, self.request_rate)
        if problem:
            raise ValueError(problem)
        if self.capacity.enabled and self.workload.kind in ("multi_turn", "trace"):
            raise ValueError(f"the capacity search does not run a {self.workload.kind} workload (rates of its own)")
        if self.open_loop and (self.workers or self.remote_workers):
            raise ValueError("open_loop runs in one load process (no workers)")
        return self


SECTION = CheckSection(ThroughputCheckConfig, "Load test.")
