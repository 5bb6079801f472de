"""What a load run sends: the workload spec, request lengths, arrival times and request bodies.

Everything here is deterministic for a seed, so the master and every worker of a distributed run
build the same plan and each takes its own share of it.

Prompts for `/v1/completions` are lists of token ids (`prompt` accepts them), so the prompt is
exactly `prompt_tokens` long on the server without the controller holding a tokenizer: the ids are
drawn from a pool the server itself produced (`/tokenize` of a plain text, see `launch`). Chat
requests need text: they get words, and the count the server reports in `usage` is the truth.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from canary.config.workloads import WorkloadShape, arrival_problem
from canary.load.material import LengthDistribution, sample_lengths, text_prompt
from canary.load.schedule import schedule
from canary.load.shapes import ShapedRequest, ShapeInputs, shape_requests

Endpoint = Literal["completions", "chat"]

ENDPOINT_PATHS: dict[str, str] = {"completions": "/v1/completions", "chat": "/v1/chat/completions"}


class WorkloadSpec(BaseModel):
    """One load run: target, request shape, arrival process, bounds and client self-check limits."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    base_url: str = Field(description="Server root, e.g. http://127.0.0.1:8000 (the router for P/D).")
    model: str = Field(description="Served model name sent in every request.")
    endpoint: Endpoint = Field("completions", description="completions (/v1/completions) or chat.")
    workload: WorkloadShape = Field(
        default_factory=WorkloadShape, description="The named workload (synthetic: fixed/uniform/normal lengths)."
    )
    prompt_tokens: int = Field(
        64,
        gt=0,
        description="Prompt length in tokens (mean of the distribution; shared_prefix: the suffix; "
        "multi_turn: the new user tokens of a turn).",
    )
    output_tokens: int = Field(32, gt=0, description="Output length in tokens (exact: ignore_eos).")
    length_distribution: LengthDistribution = Field("fixed", description="fixed, uniform or normal lengths.")
    length_spread: float = Field(
        0.25, ge=0, lt=1, description="uniform: half-width, normal: standard deviation, relative to the mean."
    )
    concurrency: int = Field(
        4, gt=0, description="Closed loop: users; paced by request_rate: the users, so the most requests in flight."
    )
    request_rate: float | None = Field(None, gt=0, description="Paced or open loop: mean requests/s; None: closed.")
    burstiness: float = Field(1.0, gt=0, description="Gamma shape of inter-arrival times (1: Poisson).")
    ramp_s: float = Field(0.0, ge=0, description="Raise the rate linearly from 0 over this many seconds (0: none).")
    open_loop: bool = Field(
        False,
        description="True: one dispatcher sends every request at its scheduled time whatever is in flight "
        "(request_rate required; `concurrency` unused); False: `concurrency` locust users.",
    )
    max_in_flight: int | None = Field(
        None, gt=0, description="Open loop: requests wait for a free slot beyond this many in flight (None: no cap)."
    )
    abort_in_flight: int | None = Field(
        None,
        gt=0,
        description="Open loop: stop sending once this many requests are in flight (over-saturation; the rest "
        "count as not sent). None: never.",
    )
    max_send_lateness_p99_s: float = Field(
        0.05,
        gt=0,
        description="Open loop: p99 of (actual - scheduled send, less any wait for a slot) above which the client "
        "did not keep its schedule and the result is invalid.",
    )
    num_requests: int = Field(200, gt=0, description="Measured requests (after the warm-up ones).")
    warmup_requests: int = Field(0, ge=0, description="Requests sent first and left out of the statistics.")
    max_duration_s: float = Field(120.0, gt=0, description="Hard bound on the whole run, warm-up included.")
    request_timeout_s: float = Field(60.0, gt=0, description="Network timeout of one request (per read).")
    seed: int = Field(0, description="Seed of lengths, prompts and arrivals.")
    arrival_seed: int | None = Field(
        None, description="Seed of the arrival schedule alone (None: `seed`); fresh prompts, the same schedule."
    )
    token_pool: list[int] | None = Field(
        None, description="Token ids to build prompts from (completions); None: text prompts."
    )
    words_per_token: float = Field(1.0, gt=0, description="Text prompts: words per prompt token (calibrated).")
    ignore_eos: bool = Field(True, description="Send ignore_eos so the output length is exact.")
    extra_body: dict[str, Any] = Field(default_factory=dict, description="Extra request fields (temperature...).")
    max_client_cpu_ratio: float = Field(
        0.9, gt=0, description="Client CPU seconds per wall second above which the result is invalid."
    )
    max_client_lag_p99_s: float = Field(
        0.02, gt=0, description="p99 of the gevent loop's scheduling lag above which the result is invalid."
    )
    lag_probe_interval_s: float = Field(0.01, gt=0, description="How often the loop-lag probe wakes up.")
    workers: int = Field(0, ge=0, description="0: one process; N: locust master + N local worker processes.")
    client_cpus: list[int] | None = Field(
        None,
        description="Cores the load process runs on (the target's helper cores, canary.targets.affinity); "
        "None: wherever the scheduler puts it.",
    )
    request_id_prefix: str = Field(
        "canary",
        pattern=r"^[A-Za-z0-9._-]{1,40}$",
        description="Request ids are <prefix>-<index>: sent as X-Request-Id and, with tag_requests, in the body.",
    )
    tag_requests: bool = Field(
        True,
        description="Also send the request id in the body as vllm_xargs.canary_request_id: the P/D router "
        "replaces X-Request-Id with its own but forwards the body, so both engines' timing records carry it.",
    )

    @model_validator(mode="after")
    def _check(self) -> WorkloadSpec:
        if self.workers and self.concurrency < self.workers:
            raise ValueError(f"concurrency {self.concurrency} is below workers {self.workers}: some would idle")
        if self.token_pool is not None and not self.token_pool:
            raise ValueError("token_pool is empty")
        problem = arrival_problem(self.workload, self.open_loop, self.request_rate)
        if problem:
            raise ValueError(problem)
        if self.workload.kind == "block_residues" and self.workload.block_sizes is None:
            raise ValueError(
                "workload block_residues needs block_sizes in a load spec (the throughput check fills in the cell's)"
            )
        if self.open_loop and self.workers:
            raise ValueError("open_loop runs in one process (workers must be 0)")
        return self

    @property
    def total_requests(self) -> int:
        """Warm-up plus measured requests."""
        return self.warmup_requests + self.num_requests

    @property
    def path(self) -> str:
        """URL path of the endpoint under load."""
        return ENDPOINT_PATHS[self.endpoint]


@dataclass(frozen=True)
class PlannedRequest:
    """One request of the plan, body already serialized (no JSON work while timing)."""

    index: int
    request_id: str
    warmup: bool
    prompt_tokens: int
    max_tokens: int
    offset_s: float | None
    body: bytes
    after: int | None = None
    """multi_turn: the index of the request that must have finished before this one is sent."""
    group: int | None = None
    """shared_prefix: the prefix group; multi_turn: the conversation (None: synthetic)."""
    think_s: float | None = None
    """Open-loop multi_turn: sent this long after its predecessor (`after`) finished (None: on its offset)."""


CLIENT_ID_KEY = "canary_request_id"
"""The key of the request id in the body's vllm_xargs (the engines' timing recorder reads it:
canary/targets/engine_site/timing_probe.py CLIENT_ID_KEY)."""


def request_id(spec: WorkloadSpec, index: int) -> str:
    """The id of planned request `index`."""
    return f"{spec.request_id_prefix}-{index}"


def request_body(
    spec: WorkloadSpec, prompt: list[int] | str, max_tokens: int, rid: str | None = None
) -> dict[str, Any]:
    """The JSON body of one streaming request."""
    body: dict[str, Any] = {"model": spec.model}
    if spec.endpoint == "chat":
        content = prompt if isinstance(prompt, str) else " ".join(str(t) for t in prompt)
        body["messages"] = [{"role": "user", "content": content}]
    else:
        body["prompt"] = prompt
    body.update(
        max_tokens=max_tokens,
        stream=True,
        stream_options={"include_usage": True},
    )
    if spec.ignore_eos:
        body["ignore_eos"] = True
    if spec.tag_requests and rid is not None:
        body["vllm_xargs"] = {CLIENT_ID_KEY: rid}
    body.update(spec.extra_body)
    return body


def shape_inputs(spec: WorkloadSpec) -> ShapeInputs:
    """What the named workloads read of a spec."""
    return ShapeInputs(
        shape=spec.workload,
        total=spec.total_requests,
        prompt_tokens=spec.prompt_tokens,
        output_tokens=spec.output_tokens,
        distribution=spec.length_distribution,
        spread=spec.length_spread,
        seed=spec.seed,
        token_pool=spec.token_pool if spec.endpoint == "completions" else None,
        words_per_token=spec.words_per_token,
    )


def build_plan(spec: WorkloadSpec) -> list[PlannedRequest]:
    """Every request of the run, in send order (warm-up first)."""
    rng = random.Random(spec.seed)
    total = spec.total_requests
    shaped = None
    if spec.workload.kind == "synthetic":  # the draws of the default workload stay exactly as they were
        prompt_lengths = sample_lengths(spec.prompt_tokens, spec.length_distribution, spec.length_spread, total, rng)
        output_lengths = sample_lengths(spec.output_tokens, spec.length_distribution, spec.length_spread, total, rng)
    else:
        shaped = shape_requests(shape_inputs(spec), rng)
        prompt_lengths = [r.prompt_tokens for r in shaped]
        output_lengths = [r.max_tokens for r in shaped]
    offsets: list[float | None]
    thinks: list[float | None] = [None] * total
    if shaped is not None and spec.workload.kind == "trace":
        offsets = [r.offset_s for r in shaped]
    elif spec.request_rate is None:
        offsets = [None] * total
    else:  # its own generator: the same seed gives the same schedule whatever the lengths
        seed = spec.seed if spec.arrival_seed is None else spec.arrival_seed
        offsets = list(schedule(total, spec.request_rate, spec.burstiness, seed, spec.ramp_s))
        if shaped is not None and spec.open_loop and spec.workload.kind == "multi_turn":
            offsets, thinks = _conversation_times(spec, shaped, offsets)
    plan: list[PlannedRequest] = []
    for index in range(total):
        prompt: list[int] | str
        if shaped is not None:
            prompt = shaped[index].prompt
        elif spec.token_pool is not None and spec.endpoint == "completions":
            prompt = [rng.choice(spec.token_pool) for _ in range(prompt_lengths[index])]
        else:
            prompt = text_prompt(prompt_lengths[index], spec.words_per_token, rng)
        rid = request_id(spec, index)
        body = request_body(spec, prompt, output_lengths[index], rid)
        plan.append(
            PlannedRequest(
                index=index,
                request_id=rid,
                warmup=index < spec.warmup_requests,
                prompt_tokens=prompt_lengths[index],
                max_tokens=output_lengths[index],
                offset_s=offsets[index],
                body=json.dumps(body, separators=(",", ":")).encode(),
                after=None if shaped is None else shaped[index].after,
                group=None if shaped is None else shaped[index].group,
                think_s=thinks[index],
            )
        )
    return plan


def _conversation_times(
    spec: WorkloadSpec, shaped: list[ShapedRequest], offsets: list[float | None]
) -> tuple[list[float | None], list[float | None]]:
    """Open-loop multi_turn: conversation c starts at the schedule's c-th time (its first turn's offset);
    a later turn has no offset but a think time after its predecessor's end (exponential of mean
    think_time_s from its own generator, seeded; 0 without one)."""
    think = spec.workload.think_time_s
    rng = random.Random(f"canary-think-{spec.seed}")
    starts: list[float | None] = []
    thinks: list[float | None] = []
    for request in shaped:
        if request.after is None:
            starts.append(offsets[request.group or 0])
            thinks.append(None)
        else:
            starts.append(None)
            thinks.append(rng.expovariate(1.0 / think) if think > 0 else 0.0)
    return starts, thinks


def share_of_plan(plan: list[PlannedRequest], worker_index: int, num_workers: int) -> list[PlannedRequest]:
    """The requests one worker of a distributed run sends: every num_workers-th, from its index.

    A plan with ordered requests (multi_turn) is shared by conversation instead: every turn of one
    conversation goes to the same worker, which sends each only after the previous one finished."""
    if not 0 <= worker_index < num_workers:
        raise ValueError(f"worker index {worker_index} outside 0..{num_workers - 1}")
    if any(r.after is not None for r in plan):
        return [r for r in plan if (r.group or 0) % num_workers == worker_index]
    return plan[worker_index::num_workers]
