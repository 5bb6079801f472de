"""Parity under load: greedy parity prompts ridden inside the throughput check's load run.

The parity check compares greedy outputs of P/D with the control's, a prompt at a time or in one
small wave of parity prompts. A KV path that breaks only under sustained traffic (a race between
transfers in flight, a pool exhausted under pressure, block reuse, batch-dependent numerics) passes
it. Here a share of the load run's requests are parity prompts (the parity check's prompts and
client, canary/checks/parity/), sent from threads of the controller beside the load process while
it runs, and judged after it with the parity check's comparator and gates:

- **Prompts.** `checks.throughput.load_parity.prompt_lengths` in turn, each sample a distinct
  prompt cut from the parity items after the parity check's own (no shared first block with any
  parity prompt or other sample: a P/D decode never serves one from its prefix cache).
- **Share.** up to ceil(share x num_requests) samples, max(1, round(share x concurrency)) in flight,
  from when the load's first requests show on the cell's engines (their /metrics: requests running
  or waiting; at most `start_wait_s`) until it ends, on the first run of the first
  attempt only (a re-measurement would send the same prompts into a warm prefix cache). A sample
  counts only if it ran entirely inside the load window (the first load request's send to the last
  one's end); the others are recorded and left out.
- **Reference and null arm.** An aggregated cell measures the reference of every sample prompt with
  the parity check's `measure_reference` before its load (miss alone; the concurrent wave: prefix
  hit, altered twin, teacher-forced), then rides its samples: each sample vs its own miss is the
  `load` null arm (what an honest engine's batch-dependent numerics do under this load). A P/D cell
  takes that reference from its control's throughput result (else measures it on its prefill server,
  without a `load` arm, and says so), rides its samples through the router, re-scores each on its
  prefill server teacher-forced after the load, and is judged by the parity check's `judge_pd`: the
  same gates, margins and localization, against every null arm the control recorded.
- **Verdict.** A sub-result of the throughput check (evidence.load_parity, metrics load_parity_*)
  and, when it judged, its gate `load-parity`: failing turns the check `fail`. Too few samples inside
  the load: the sub-verdict is `invalid` and no gate is added (the throughput numbers stand). A cell
  whose own parity check already failed gets the numbers and no gate: one finding, reported once.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from canary.checks.base import CheckContext
from canary.checks.parity.check import block_sides, judge_pd, measure_reference
from canary.checks.parity.client import ParityError, generate, rescore, tokenize
from canary.checks.parity.fidelity import Fidelity, Series, compare
from canary.checks.parity.prompts import STRIDE, ParityPrompt, PromptError, build_prompts, source_items
from canary.checks.parity.reference import LOAD_NULL_ARM, Reference, reference_from_evidence
from canary.config import CanaryConfig, LoadParityConfig
from canary.core import metric_keys as keys
from canary.core import promtext
from canary.errors import CanaryError
from canary.judge.results import CheckResult, Gate
from canary.judge.verdicts import VERDICT_CODES, Verdict
from canary.load.stats import Sample as LoadSample
from canary.plan.parity_lengths import block_sizes, max_prompt_length, prompt_lengths

EVIDENCE_KEY = "load_parity"
"""Where the sub-result lives in the throughput check's evidence."""
GATE = "load-parity"
"""The gate it adds to the throughput check when it judged."""


def sample_budget(cfg: LoadParityConfig, num_requests: int, concurrency: int) -> tuple[int, int]:
    """(samples at most, samples in flight at a time) for a load of `num_requests` at `concurrency`."""
    count = max(1, math.ceil(cfg.share * num_requests))
    in_flight = max(1, round(cfg.share * concurrency))
    return count, min(in_flight, count)


def sample_lengths(cfg: LoadParityConfig, count: int, limit: int) -> list[int]:
    """The configured lengths in turn, `count` of them, none beyond the model's parity limit."""
    return [min(cfg.prompt_lengths[i % len(cfg.prompt_lengths)], limit) for i in range(count)]


def first_item(config: CanaryConfig) -> int:
    """The item the first sample prompt starts at: after every parity prompt's (prompt i starts at
    offset + i x STRIDE), so no sample shares a first block with a parity prompt."""
    return config.checks.parity.item_offset + len(prompt_lengths(config, block_sizes(config))) * STRIDE


def build_sample_prompts(ctx: CheckContext, count: int) -> tuple[list[ParityPrompt], str]:
    """The sample prompts (the same ids in every cell of a model) and where their text came from."""
    config, model = ctx.config, ctx.deployment.served_model
    settings = config.checks.parity
    spec = next((m for m in config.models if m.name == ctx.cell.model), config.models[0])
    items, where = source_items(config, spec.source)
    url = ctx.engine_url()
    lengths = sample_lengths(config.checks.throughput.load_parity, count, max_prompt_length(config))
    prompts = build_prompts(
        items,
        lengths,
        min(block_sizes(config), default=16),
        first_item(config),
        lambda text: tokenize(url, model, text, settings.request_timeout_s),
    )
    return prompts, where


@dataclass
class Ridden:
    """One sample: its prompt, what the server generated (None on an error) and when (epoch seconds)."""

    prompt: ParityPrompt
    series: Series | None
    sent_at: float
    ended_at: float
    error: str | None = None

    def inside(self, window: tuple[float, float] | None) -> bool:
        """Whether it ran entirely inside the load window."""
        return window is not None and window[0] <= self.sent_at and self.ended_at <= window[1]

    def to_json(self, window: tuple[float, float] | None) -> dict[str, Any]:
        """Evidence row."""
        row: dict[str, Any] = {
            "length": self.prompt.length,
            "prompt_sha": self.prompt.sha,
            "sent_at": round(self.sent_at, 3),
            "seconds": round(self.ended_at - self.sent_at, 3),
            "inside_load": self.inside(window),
        }
        if self.error is not None:
            row["error"] = self.error
        return row


def load_window(samples: Sequence[LoadSample]) -> tuple[float, float] | None:
    """From the first load request's send to the last one's end (epoch seconds); None without requests."""
    if not samples:
        return None
    return min(s.sent_at for s in samples), max(s.ended_at for s in samples)


POLL_S = 0.05
"""How often the rider asks whether the load has reached the server."""
LOAD_GAUGES = ("vllm:num_requests_running", "vllm:num_requests_waiting")
"""An engine's gauges that show the load has arrived."""


def load_started(metrics_urls: Sequence[str], timeout_s: float = 1.0) -> Callable[[], bool]:
    """Whether any of these engines (their /metrics) has a request running or waiting: the load's first
    requests have arrived (the rider has sent nothing yet). An engine that does not answer counts as idle."""

    def started() -> bool:
        for url in metrics_urls:
            try:
                samples = promtext.scrape(url, timeout_s)
            except CanaryError:
                continue
            if any(s.name in LOAD_GAUGES and s.value > 0 for s in samples):
                return True
        return False

    return started


Send = Callable[[ParityPrompt], Series]
"""A greedy generation of a sample prompt (through the cell's endpoint)."""
Rescorer = Callable[[ParityPrompt, Series], Series]
"""Teacher-forced scoring of a sample's output after its prompt (the P/D cell's prefill server)."""


@dataclass
class Rider:
    """Sends sample prompts from `in_flight` threads, from when the load shows (`load_started`, at most
    `start_wait_s` after start()) until stop().

    Each thread takes the next unsent prompt, sends it with `send` (a greedy generation), records it
    and takes the next, until the prompts run out or stop() is called (a sample in flight then
    finishes: stop() waits for it). Used as a context manager around a load run."""

    send: Send
    prompts: Sequence[ParityPrompt]
    in_flight: int
    start_wait_s: float = 0.0
    """The longest wait for `load_started` before the first sample (without it: the wait itself)."""
    load_started: Callable[[], bool] | None = None
    """Whether the load is on the server yet (polled every POLL_S)."""
    clock: Callable[[], float] = time.time
    ridden: list[Ridden] = field(default_factory=list)
    window: tuple[float, float] | None = None
    """The load window, set by whoever ran the load (load_window of its samples)."""
    _next: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _stop: threading.Event = field(default_factory=threading.Event)
    _go: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)

    def _take(self) -> ParityPrompt | None:
        with self._lock:
            if self._stop.is_set() or self._next >= len(self.prompts):
                return None
            prompt = self.prompts[self._next]
            self._next += 1
            return prompt

    def _await_load(self) -> None:
        """Until the load shows on the server (or start_wait_s passed): then every thread may send."""
        deadline = time.monotonic() + self.start_wait_s
        if self.load_started is None:
            self._stop.wait(self.start_wait_s)
        else:
            while not self._stop.is_set() and time.monotonic() < deadline and not self.load_started():
                self._stop.wait(POLL_S)
        self._go.set()

    def _loop(self, first: bool) -> None:
        if first:
            self._await_load()
        while not self._go.wait(POLL_S):
            if self._stop.is_set():
                return
        while (prompt := self._take()) is not None:
            sent = self.clock()
            try:
                series: Series | None = self.send(prompt)
                error = None
            except ParityError as exc:
                series, error = None, str(exc)
            with self._lock:
                self.ridden.append(Ridden(prompt, series, sent, self.clock(), error))

    def start(self) -> None:
        """Start the sending threads."""
        for index in range(self.in_flight):
            thread = threading.Thread(target=self._loop, args=(index == 0,), name=f"load-parity-{index}", daemon=True)
            self._threads.append(thread)
            thread.start()

    def stop(self, timeout_s: float | None = None) -> None:
        """Send nothing more; wait for the samples in flight."""
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout_s)

    def __enter__(self) -> Rider:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def inside(self) -> list[Ridden]:
        """Samples that ran entirely inside the load window and answered, in send order."""
        return sorted(
            (r for r in self.ridden if r.series is not None and r.inside(self.window)), key=lambda r: r.sent_at
        )


@dataclass
class Prepared:
    """What a cell needs before its load: the sample prompts, the reference and where it came from."""

    prompts: list[ParityPrompt]
    refs: list[Reference]
    source: str
    in_flight: int
    seconds: float
    evidence: dict[str, Any] = field(default_factory=dict)

    def rider(self, ctx: CheckContext) -> Rider:
        """A rider sending this cell's samples through the cell's endpoint."""
        settings, model = ctx.config.checks.parity, ctx.deployment.served_model
        url = ctx.deployment.base_url

        def send(prompt: ParityPrompt) -> Series:
            return generate(
                url, model, prompt.ids, settings.max_tokens, settings.top_logprobs, settings.request_timeout_s
            )

        cfg = ctx.config.checks.throughput.load_parity
        engines = [
            server.metrics_url
            for role, server in ctx.deployment.servers.items()
            if role != "router" and server.metrics_url is not None
        ]
        return Rider(send, self.prompts, self.in_flight, cfg.start_wait_s, load_started(engines) if engines else None)


@dataclass
class Outcome:
    """The sub-result: a verdict, one line, numbers, a gate when it judged, evidence."""

    verdict: Verdict
    summary: str
    metrics: dict[str, float] = field(default_factory=dict)
    gate: Gate | None = None
    evidence: dict[str, Any] = field(default_factory=dict)


def _control_reference(ctx: CheckContext, prompts: Sequence[ParityPrompt]) -> tuple[list[Reference], str] | None:
    control = ctx.control_for()
    recorded = None if control is None else control.check("throughput")
    found = None if recorded is None else recorded.evidence.get(EVIDENCE_KEY)
    if control is None or not isinstance(found, dict) or not found.get("reference"):
        return None
    refs = reference_from_evidence(found["reference"], prompts)
    return (refs, f"control {control.cell.id}") if refs else None


def prepare(ctx: CheckContext) -> Prepared | Outcome:
    """Sample prompts and their reference (see the module doc); an Outcome when it cannot (error)."""
    started = time.monotonic()
    tp = ctx.config.checks.throughput
    count, in_flight = sample_budget(tp.load_parity, tp.num_requests, tp.concurrency)
    try:
        prompts, where = build_sample_prompts(ctx, count)
        if ctx.cell.topology != "pd-nixl":
            refs, load = measure_reference(
                ctx.deployment.base_url, ctx.deployment.served_model, prompts, ctx.config.checks.parity
            )
            source = "this cell (its own reference and null arm)"
        else:
            found = _control_reference(ctx, prompts)
            load = {}
            if found is not None:
                refs, source = found
                prompts = [r.prompt for r in refs]  # only what the control has a reference for
            else:
                prefill = ctx.deployment.server("prefill")
                if prefill is None:
                    raise ParityError(
                        "no control recorded a load-parity reference, and no prefill server to measure one"
                    )
                refs, load = measure_reference(
                    prefill.base_url, ctx.deployment.served_model, prompts, ctx.config.checks.parity
                )
                source = "this cell's prefill server directly (no control recorded one: no null arm under load)"
    except (ParityError, PromptError) as exc:
        return Outcome("error", f"parity under load: {exc}")
    evidence = {"prompt_source": where, "reference_source": source, "reference_wave": load}
    return Prepared(list(prompts), refs, source, in_flight, time.monotonic() - started, evidence)


def _base(prepared: Prepared, rider: Rider | None) -> tuple[dict[str, Any], list[Ridden]]:
    window = None if rider is None else rider.window
    ridden = [] if rider is None else sorted(rider.ridden, key=lambda r: r.sent_at)
    evidence = {
        **prepared.evidence,
        "planned_samples": len(prepared.prompts),
        "in_flight": prepared.in_flight,
        "load_window": None if window is None else [round(window[0], 3), round(window[1], 3)],
        "samples": [r.to_json(window) for r in ridden],
    }
    return evidence, [] if rider is None else rider.inside()


def _null_under_load(refs: Sequence[Reference]) -> tuple[int, int]:
    arms = [r.null[LOAD_NULL_ARM] for r in refs if LOAD_NULL_ARM in r.null]
    return len(arms), sum(a.token_diff > 0 for a in arms)


def judge_control(cfg: LoadParityConfig, prepared: Prepared, rider: Rider | None) -> Outcome:
    """An aggregated cell: each sample under load vs its own miss becomes the reference's `load` null arm."""
    evidence, inside = _base(prepared, rider)
    by_sha = {r.prompt.sha: r for r in prepared.refs}
    for sample in inside:
        ref = by_sha[sample.prompt.sha]
        assert sample.series is not None
        ref.null[LOAD_NULL_ARM] = compare(ref.miss, sample.series)
    evidence["reference"] = [r.to_json() for r in prepared.refs]
    judged = [by_sha[s.prompt.sha] for s in inside if by_sha[s.prompt.sha].evidence]
    null_n, null_flips = _null_under_load(prepared.refs)
    metrics = {
        keys.LOAD_PARITY_SAMPLES: float(len(judged)),
        keys.LOAD_PARITY_MATCH_RATE: _rate([r.null[LOAD_NULL_ARM] for r in judged]),
        keys.LOAD_PARITY_NULL_SAMPLES: float(null_n),
        keys.LOAD_PARITY_NULL_TOKEN_FLIPS: float(null_flips),
    }
    floor = max((r.null[LOAD_NULL_ARM].max_kl for r in judged), default=0.0)
    if len(judged) < cfg.min_samples:
        return Outcome("invalid", _too_few(cfg, judged, inside, evidence), metrics, None, evidence)
    summary = (
        f"parity under load: reference of {len(prepared.refs)} prompts, {len(judged)} sampled inside the load; "
        f"null arm under load: {null_flips} token flips, KL max {floor:.3g}"
    )
    return Outcome("pass", summary, metrics, None, evidence)


def judge_pair(ctx: CheckContext, prepared: Prepared, rider: Rider | None, rescorer: Rescorer) -> Outcome:
    """A P/D cell: the samples under load against the control's reference, by the parity check's gates."""
    cfg = ctx.config.checks.throughput.load_parity
    evidence, inside = _base(prepared, rider)
    by_sha = {r.prompt.sha: r for r in prepared.refs}
    rows: list[tuple[Reference, Series, Fidelity, Fidelity]] = []
    try:
        for sample in inside:
            ref, series = by_sha[sample.prompt.sha], sample.series
            assert series is not None
            rows.append(
                (ref, series, compare(ref.miss, series), compare(series, rescorer(sample.prompt, series), True))
            )
    except ParityError as exc:
        return Outcome("error", f"parity under load: re-scoring: {exc}", {}, None, evidence)
    null_n, null_flips = _null_under_load(prepared.refs)
    used = [row for row in rows if row[0].evidence]
    metrics = {
        keys.LOAD_PARITY_SAMPLES: float(len(used)),
        keys.LOAD_PARITY_MATCH_RATE: _rate([g for _, _, g, _ in used]),
        keys.LOAD_PARITY_NULL_SAMPLES: float(null_n),
        keys.LOAD_PARITY_NULL_TOKEN_FLIPS: float(null_flips),
    }
    if len(used) < cfg.min_samples:
        return Outcome("invalid", _too_few(cfg, [r for r, *_ in used], inside, evidence), metrics, None, evidence)
    judged = judge_pd(block_sides(ctx), ctx.config.checks.parity, prepared.refs, rows, prepared.source, evidence)
    metrics[keys.LOAD_PARITY_FAILING] = judged.metrics.get(keys.PARITY_FAILING_PROMPTS, 0.0)
    if keys.PARITY_KL_OVER_FLOOR in judged.metrics:
        metrics[keys.LOAD_PARITY_KL_OVER_FLOOR] = judged.metrics[keys.PARITY_KL_OVER_FLOOR]
    evidence["gates"] = [g.model_dump(mode="json") for g in judged.gates]
    verdict: Verdict = "pass" if judged.verdict == "pass" else "fail"
    summary = f"parity under load ({len(used)} samples, {null_n} under load on the control): {judged.summary}"
    sent = [s.sent_at for s, row in zip(inside, rows, strict=True) if row[0].evidence]
    onset = _onset(evidence.get("per_prompt", []), sent, None if rider is None else rider.window)
    if onset is not None:
        evidence["first_failing_sample"] = onset
        summary += (
            f"; first beyond the floor: sample {onset['sample']} of {len(used)}, {onset['into_load_s']} s into the load"
        )
    gate = Gate(
        name=GATE,
        passed=verdict == "pass",
        observed=metrics[keys.LOAD_PARITY_FAILING],
        threshold=0.0,
        detail=summary,
    )
    return Outcome(verdict, summary, metrics, gate, evidence)


def _onset(
    rows: Sequence[dict[str, Any]], sent: Sequence[float], window: tuple[float, float] | None
) -> dict[str, Any] | None:
    """The first failing sample in send order (1-based) and when it was sent after the load began: a
    fault that needs load shows clean samples first, a fault of every transfer fails from the first."""
    for index, (row, at) in enumerate(zip(rows, sent, strict=True)):
        if row.get("beyond_noise"):
            start = window[0] if window is not None else at
            return {"sample": index + 1, "into_load_s": round(at - start, 2)}
    return None


def _rate(fidelities: Sequence[Fidelity]) -> float:
    if not fidelities:
        return 0.0
    return round(sum(f.first_token_diff is None for f in fidelities) / len(fidelities), 4)


def _too_few(
    cfg: LoadParityConfig, judged: Sequence[Reference], inside: Sequence[Ridden], evidence: dict[str, Any]
) -> str:
    sent = len(evidence["samples"])
    return (
        f"parity under load inconclusive: {len(judged)} evidence samples inside the load (need {cfg.min_samples}; "
        f"{sent} sent, {len(inside)} inside the load window)"
    )


def finish(
    ctx: CheckContext,
    prepared: Prepared | Outcome,
    rider: Rider | None,
    result: CheckResult,
    rescorer: Rescorer | None = None,
) -> None:
    """Judge the samples and fold the sub-result into the throughput check's result (see the module doc).
    `rescorer`: the P/D cell's prefill server unless given."""
    started = time.monotonic()
    if isinstance(prepared, Outcome):
        outcome, spent = prepared, 0.0
    else:
        if ctx.cell.topology != "pd-nixl":
            outcome = judge_control(ctx.config.checks.throughput.load_parity, prepared, rider)
        else:
            outcome = judge_pair(ctx, prepared, rider, rescorer or _rescorer(ctx))
        spent = prepared.seconds
    outcome.metrics[keys.LOAD_PARITY_STATUS] = float(VERDICT_CODES[outcome.verdict])
    outcome.metrics[keys.LOAD_PARITY_SECONDS] = round(spent + time.monotonic() - started, 2)
    result.metrics.update(outcome.metrics)
    evidence = {"verdict": outcome.verdict, "summary": outcome.summary, **outcome.evidence}
    result.evidence[EVIDENCE_KEY] = evidence
    result.summary = f"{result.summary}; {outcome.summary}"
    parity = ctx.checked.get("parity")
    if outcome.gate is None:
        return
    if parity is not None and parity.verdict == "fail":
        evidence["gate_skipped"] = "the cell's own parity check already fails: one finding, reported there"
        return
    result.gates.append(outcome.gate)
    if not outcome.gate.passed:
        result.verdict = "fail"


def _rescorer(ctx: CheckContext) -> Rescorer:
    settings, model = ctx.config.checks.parity, ctx.deployment.served_model
    prefill = ctx.deployment.server("prefill")

    def score(prompt: ParityPrompt, series: Series) -> Series:
        if prefill is None:
            raise ParityError("a pd-nixl deployment without a prefill server")
        tokens = [p.token for p in series]
        return rescore(prefill.base_url, model, prompt.ids, tokens, settings.top_logprobs, settings.request_timeout_s)

    return score
