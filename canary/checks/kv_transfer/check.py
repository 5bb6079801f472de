"""KV-transfer proof for P/D cells, from the decode server's /metrics.

Before the other checks run (a `before_checks` hook) the decode server's NIXL and prompt-token
counters are snapshotted into ctx.scratch; this check runs last, sends a few probe requests of
its own through the cell's endpoint (so the proof never depends on which other checks ran), reads
the counters again and judges the difference:

- `vllm:nixl_bytes_transferred` (histogram: _sum = bytes, _count = transfers) must grow by at
  least checks.kv_transfer.min_bytes;
- `vllm:nixl_num_failed_transfers` must not grow;
- of the prompt tokens decode did not find in its own prefix cache, the share it computed itself
  (`vllm:prompt_tokens_by_source`: local_compute / (local_compute + external_kv_transfer)) must
  stay at or below max_recompute_share. A healthy decode computes none (all came over NIXL); one
  that silently recomputes the prefill (a router that drops `kv_transfer_params`, a connector
  that falls back) computes all of them. Cache hits are left out on purpose: lm-eval's few-shot
  prompts share long prefixes, so most of decode's prompt tokens are local cache hits either
  way. This also catches partial recompute, which growing bytes alone would not.

Every P/D cell also sends its reuse probe: one prompt of prose of at least two of decode's blocks, twice,
greedy, a few tokens each. With prefix caching on (vLLM's default) decode finds the first send's blocks in its
own cache on the second send and pulls only the prompt's tail over NIXL: the KV it then holds is the same
bytes as the first time, so the second answer must be the first one (`reuse-same-output`; a tail pulled into
the wrong blocks changes it). The parity check cannot see this path: its teacher-forced scoring asks for
prompt logprobs, which vLLM computes without the prefix cache. A cell that asks for prefix caching on or off
(matrix.prefix_caching) also gets a gate on decode's own cache: on, the second send must find at least one
full block there (`local_cache_hit` grows by a block or more: the tail-only path ran); off, no prompt token
may come from decode's cache during the checks (the engine honoured off).

Aggregated cells move no KV: they get a `skipped` result ("not applicable"), which never changes
a cell's verdict. Missing evidence is never a zero: a counter a gate reads that decode does not
export (before or after the checks), or no snapshot before the checks (the hook failed: its error is
named), makes the check `invalid`, naming what was missing; it is not compared with zero (totals
since the decode process started would include traffic of earlier cells).
"""

from __future__ import annotations

import json
import re
import urllib.request
from collections import Counter
from dataclasses import asdict, dataclass

from canary.checks.base import CheckContext, before_checks, register
from canary.checks.kv_transfer.estimate import estimate
from canary.checks.kv_transfer.exported import EXPORTED
from canary.checks.parity.client import generate, tokenize
from canary.checks.parity.fidelity import Series, near_tie_gap
from canary.checks.parity.text import PARAGRAPHS
from canary.checks.startup.layout import judge_transfers
from canary.config import KvTransferCheckConfig
from canary.core import metric_keys as keys
from canary.core import promtext
from canary.errors import CanaryError
from canary.judge.results import CheckResult, Gate

SCRATCH_KEY = "kv_transfer.before"
PROBE_WORDS = "the quick brown fox jumps over the lazy dog and counts seven red apples "


@dataclass(frozen=True)
class KvCounters:
    """The decode-side counters the proof reads (cumulative since the process started)."""

    bytes_transferred: float
    transfers: float
    failed_transfers: float
    prompt_tokens: float
    prompt_tokens_local_compute: float
    prompt_tokens_external: float
    prompt_tokens_cache_hit: float
    requests: float

    def minus(self, other: KvCounters) -> KvCounters:
        """Counter deltas (self - other)."""
        return KvCounters(**{k: v - getattr(other, k) for k, v in asdict(self).items()})


ZERO = KvCounters(0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)


def read_counters(samples: list[promtext.Sample]) -> KvCounters:
    """The counters from one scrape (absent ones read as 0: missing_counters names those the gates need)."""
    return KvCounters(
        bytes_transferred=promtext.total(samples, "vllm:nixl_bytes_transferred_sum"),
        transfers=promtext.total(samples, "vllm:nixl_bytes_transferred_count"),
        failed_transfers=promtext.total(samples, "vllm:nixl_num_failed_transfers"),
        prompt_tokens=promtext.total(samples, "vllm:prompt_tokens"),
        prompt_tokens_local_compute=promtext.total(samples, "vllm:prompt_tokens_by_source", source="local_compute"),
        prompt_tokens_external=promtext.total(samples, "vllm:prompt_tokens_by_source", source="external_kv_transfer"),
        prompt_tokens_cache_hit=promtext.total(samples, "vllm:prompt_tokens_by_source", source="local_cache_hit"),
        requests=promtext.total(samples, "vllm:request_success"),
    )


GATED_COUNTERS: tuple[tuple[str, dict[str, str]], ...] = (
    ("vllm:nixl_bytes_transferred_sum", {}),
    ("vllm:nixl_bytes_transferred_count", {}),
    ("vllm:nixl_num_failed_transfers", {}),
    ("vllm:prompt_tokens_by_source", {"source": "local_compute"}),
    ("vllm:prompt_tokens_by_source", {"source": "external_kv_transfer"}),
)
"""The series the three gates read: each must be exported, or the gates cannot judge (vLLM creates every
one per engine at start: vllm/v1/metrics/loggers.py, nixl/stats.py)."""
MISSING_BEFORE_KEY = "kv_transfer.before_missing"


def missing_counters(samples: list[promtext.Sample]) -> list[str]:
    """The gated series (GATED_COUNTERS) absent from one scrape, as selectors:
    'vllm:nixl_num_failed_transfers', 'vllm:prompt_tokens_by_source{source="local_compute"}'."""
    missing = []
    for name, labels in GATED_COUNTERS:
        names = {name, f"{name}_total"}
        if not any(s.name in names and all(s.labels.get(k) == v for k, v in labels.items()) for s in samples):
            selector = ",".join(f'{k}="{v}"' for k, v in labels.items())
            missing.append(name + (f"{{{selector}}}" if selector else ""))
    return missing


def _decode_metrics_url(ctx: CheckContext) -> str | None:
    decode = ctx.deployment.server("decode")
    return decode.metrics_url if decode is not None else None


@before_checks("kv_transfer")
def snapshot_before(ctx: CheckContext) -> None:
    """Store the decode server's counters before any check sends traffic (P/D cells only)."""
    if ctx.cell.topology != "pd-nixl":
        return
    url = _decode_metrics_url(ctx)
    if url is not None:
        samples = promtext.scrape(url)
        ctx.scratch[SCRATCH_KEY] = read_counters(samples)
        ctx.scratch[MISSING_BEFORE_KEY] = missing_counters(samples)


def send_probes(base_url: str, model: str, count: int, timeout_s: float = 120.0) -> int:
    """Send `count` short greedy completions (a few KV blocks each); return how many succeeded."""
    url = base_url.rstrip("/").removesuffix("/v1") + "/v1/completions"
    ok = 0
    for index in range(count):
        prompt = f"probe {index}: " + PROBE_WORDS * 6
        body = json.dumps({"model": model, "prompt": prompt, "max_tokens": 4, "temperature": 0.0}).encode()
        request = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=timeout_s) as response:
                json.loads(response.read())
            ok += 1
        except (OSError, ValueError):
            continue
    return ok


REUSE_SENDS = 2
"""The reuse probe's prompt is sent this often: the second send finds the first's blocks when caching is on."""
REUSE_TOKENS = 8
"""Greedy tokens each send of the reuse probe asks for (the first comes from prefill, the rest from decode)."""
REUSE_TIE_NATS = 0.02
"""A flip between the reuse probe's sends where both rank the same two tokens within this many nats is a near-tie
(another summation order: prefill computes only the tail when it finds the prefix in its own cache)."""


def reuse_length(block: int, max_model_len: int) -> int | None:
    """Tokens of the reuse probe's prompt: two and a half of decode's blocks (two full blocks for decode's cache to
    hold, a tail to pull), within the model with its answer; None where no prompt of more than one block fits."""
    tokens = min(2 * block + block // 2, max_model_len - REUSE_TOKENS - 1)
    return tokens if tokens > block + 1 else None


def reuse_ids(text_ids: list[int], tokens: int) -> list[int]:
    """The reuse probe's prompt as token ids: the prose's first `tokens` (repeated where it is shorter)."""
    if not text_ids:
        raise CanaryError("the reuse probe's prose tokenized to nothing")
    repeats = -(-tokens // len(text_ids))
    return (text_ids * repeats)[:tokens]


def send_reuse_probe(base_url: str, model: str, ids: list[int], timeout_s: float = 120.0) -> list[Series | None]:
    """Send the reuse probe's prompt REUSE_SENDS times (REUSE_TOKENS greedy tokens each, with their top-2
    logprobs); each send's generation, None where it failed."""
    sends: list[Series | None] = []
    for _ in range(REUSE_SENDS):
        try:
            sends.append(generate(base_url, model, ids, REUSE_TOKENS, 2, timeout_s))
        except CanaryError:
            sends.append(None)
    return sends


def reuse_divergence(first: Series, other: Series) -> tuple[int | None, float]:
    """Where another send's greedy tokens first differ from the first send's (None: nowhere) and how far from a
    tie both sends were there (0 where they agree; infinite where a top-2 lacks the other's token)."""
    diff = next((i for i, (a, b) in enumerate(zip(first, other, strict=False)) if a.token != b.token), None)
    if diff is None:
        return None, 0.0
    return diff, near_tie_gap(first[diff], other[diff], first[diff].token, other[diff].token)


def reuse_output_gate(sends: list[Series | None]) -> Gate:
    """The reuse probe's sends answered alike: decode's KV of a prompt it had seen (its own cached prefix and the
    tail it pulled) is the KV it pulled whole the first time. A flip where both sends rank the same two tokens
    within REUSE_TIE_NATS is a near-tie tipped by another summation order (prefill computes only the tail when
    it finds the prefix in its own cache), not a wrong block."""
    first, *rest = sends
    if first is None or any(s is None for s in rest):
        answered = sum(s is not None for s in sends)
        return Gate(
            name="reuse-same-output",
            passed=False,
            detail=f"the reuse probe got no answer to compare ({answered} of {len(sends)} answered)",
        )
    worst_gap, flips = 0.0, []
    for other in rest:
        assert other is not None
        diff, gap = reuse_divergence(first, other)
        if diff is not None:
            flips.append(f"token {diff}: {first[diff].token} -> {other[diff].token} (gap {gap:.4g} nats)")
            worst_gap = max(worst_gap, gap)
    passed = worst_gap <= REUSE_TIE_NATS
    tokens = [p.token for p in first]
    detail = (
        f"the reuse probe's {len(sends)} sends answered the same {len(tokens)} greedy tokens"
        if not flips
        else f"the reuse probe's sends differ at {'; '.join(flips)}"
        + (" (a near-tie)" if passed else f": beyond a near-tie of {REUSE_TIE_NATS} nats")
    )
    return Gate(name="reuse-same-output", passed=passed, observed=worst_gap, threshold=REUSE_TIE_NATS, detail=detail)


def sliding_window_decode(family: str, layout: dict[str, object] | None) -> str | None:
    """Why decode cannot find a prompt's prefix in its own cache (None: it can): a decode with a sliding-window KV
    cache group receives only the window's blocks of that group over NIXL (measured on the tiny Gemma-3: 3 blocks
    where the full group gets 10), so it never holds a sliding group's blocks before the window, and a prefix hit
    needs every group. Read from the engine's own layout record, else the model's declared family."""
    groups = layout.get("kv_cache_groups") if isinstance(layout, dict) else None
    if isinstance(groups, list):
        sliding = [g for g in groups if isinstance(g, dict) and g.get("kind") == "sliding"]
        if not sliding:
            return None
        return (
            f"decode has {len(sliding)} sliding-window KV cache group(s) (its layout record), whose blocks before the "
            "window NIXL does not send: it cannot hold a prompt's prefix in every group"
        )
    if family == "sliding-window":
        return "a sliding-window model (no layout record): decode cannot hold a prompt's prefix in every group"
    return None


def prefix_cache_gate(prefix_caching: bool, delta: KvCounters, block: int) -> Gate:
    """Decode's prefix cache against what the cell asked: on, it served at least one block of a prompt it had
    seen; off, it served no prompt token at all."""
    hits = delta.prompt_tokens_cache_hit
    if prefix_caching:
        return Gate(
            name="decode-prefix-cache-hit",
            passed=hits >= block,
            observed=hits,
            threshold=float(block),
            detail=f"prefix caching on: decode served {hits:.0f} prompt tokens from its own prefix cache "
            f"(at least one block of {block} asked: the reuse probe's second send)",
        )
    return Gate(
        name="decode-prefix-cache-off",
        passed=hits == 0,
        observed=hits,
        threshold=0.0,
        detail=f"prefix caching off: decode served {hits:.0f} prompt tokens from a prefix cache it should not keep",
    )


def recompute_share(delta: KvCounters) -> float:
    """Share of decode's uncached prompt tokens it computed itself (0 when none were uncached)."""
    uncached = delta.prompt_tokens_local_compute + delta.prompt_tokens_external
    return delta.prompt_tokens_local_compute / uncached if uncached > 0 else 0.0


NIXL_FAILURE = re.compile(r"NIXL transfer failure: ([a-z_]+)")
"""vLLM's NIXL worker's log line for a failed transfer or handshake (base_worker.py `_log_failure`)."""


def failure_kinds(log: str) -> str:
    """The NIXL failure types a log names, counted ('handshake_setup_failed x2'); '' where it names none."""
    counts = Counter(NIXL_FAILURE.findall(log))
    return ", ".join(f"{kind} x{n}" if n > 1 else kind for kind, n in counts.most_common())


def judge(delta: KvCounters, min_bytes: int, max_recompute_share: float, decode_log: str = "") -> list[Gate]:
    """The three gates from counter deltas over the checks (decode_log: its failures named where any)."""
    kinds = failure_kinds(decode_log) if delta.failed_transfers else ""
    share = recompute_share(delta)
    return [
        Gate(
            name="nixl-bytes-grew",
            passed=delta.bytes_transferred >= max(min_bytes, 1),
            observed=delta.bytes_transferred,
            threshold=float(max(min_bytes, 1)),
            detail=f"decode pulled {delta.bytes_transferred:.0f} bytes in {delta.transfers:.0f} NIXL transfers",
        ),
        Gate(
            name="no-failed-transfers",
            passed=delta.failed_transfers == 0,
            observed=delta.failed_transfers,
            threshold=0.0,
            detail=f"{delta.failed_transfers:.0f} failed NIXL transfers during the checks"
            + (f" (decode's log: {kinds})" if kinds else ""),
        ),
        Gate(
            name="decode-did-not-recompute",
            passed=share <= max_recompute_share,
            observed=round(share, 4),
            threshold=max_recompute_share,
            detail=(
                f"of {delta.prompt_tokens:.0f} prompt tokens decode computed {delta.prompt_tokens_local_compute:.0f}"
                f" itself, got {delta.prompt_tokens_external:.0f} over NIXL and "
                f"{delta.prompt_tokens_cache_hit:.0f} from its prefix cache"
            ),
        ),
    ]


def transfer_metrics(delta: KvCounters, probes_ok: float) -> dict[str, float]:
    """The check's numbers from the decode counters' growth during the checks."""
    return {
        keys.NIXL_BYTES_TRANSFERRED: delta.bytes_transferred,
        "nixl_transfers": delta.transfers,
        keys.NIXL_FAILED_TRANSFERS: delta.failed_transfers,
        "decode_prompt_tokens": delta.prompt_tokens,
        keys.DECODE_RECOMPUTED_TOKEN_SHARE: round(recompute_share(delta), 4),
        "decode_requests": delta.requests,
        "probe_requests_ok": float(probes_ok),
    }


@register(
    "kv_transfer",
    order=4,
    settings=KvTransferCheckConfig,
    metrics=EXPORTED,
    estimate=estimate,
)
def kv_transfer_check(ctx: CheckContext) -> CheckResult:
    """Prove KV moved from prefill to decode during the checks (P/D cells)."""
    if ctx.cell.topology != "pd-nixl":
        return CheckResult(name="kv_transfer", verdict="skipped", summary="not applicable: aggregated cell")
    settings = ctx.config.checks.kv_transfer
    url = _decode_metrics_url(ctx)
    if url is None:
        return CheckResult(
            name="kv_transfer", verdict="error", summary="no decode /metrics URL: cannot read NIXL counters"
        )
    before = ctx.scratch.get(SCRATCH_KEY)
    if not isinstance(before, KvCounters):
        return _no_snapshot(ctx, url)
    probes_ok = send_probes(ctx.deployment.base_url, ctx.deployment.served_model, settings.probe_requests)
    reuse, sends = _reuse(ctx)
    try:
        samples = promtext.scrape(url)
    except CanaryError as exc:
        return CheckResult(name="kv_transfer", verdict="error", summary=str(exc))
    after = read_counters(samples)
    missing = _missing(ctx.scratch.get(MISSING_BEFORE_KEY), missing_counters(samples))
    if missing:
        return CheckResult(
            name="kv_transfer",
            verdict="invalid",
            summary=f"decode does not export {'; '.join(missing)} at {url}: the gates cannot judge a missing counter",
            evidence={"metrics_url": url, "missing_counters": missing, "after": asdict(after)},
        )
    delta = after.minus(before)
    baseline = "snapshot before the checks"
    decode = ctx.deployment.server("decode")
    gates = judge(delta, settings.min_bytes, settings.max_recompute_share, decode.log_text() if decode else "")
    if sends is not None:
        gates.append(reuse_output_gate(sends))
        if ctx.cell.prefix_caching is not None:
            window = sliding_window_decode(ctx.cell.family, _layout(ctx, "decode"))
            if ctx.cell.prefix_caching and window:
                reuse["decode_prefix_cache_hit"] = f"not judged: {window}"
            else:
                gates.append(prefix_cache_gate(ctx.cell.prefix_caching, delta, ctx.cell.decode_block_size))
    layout = judge_transfers(_layout(ctx, "prefill"), _layout(ctx, "decode"), ctx.config.platform)
    if ctx.config.checks.startup.layout_probe:
        gates += layout.gates
    failed = [g for g in gates if not g.passed]
    metrics = transfer_metrics(delta, probes_ok)
    summary = (
        "; ".join(g.detail for g in failed)
        if failed
        else f"{delta.bytes_transferred:.0f} bytes over NIXL in {delta.transfers:.0f} transfers, none failed"
    )
    return CheckResult(
        name="kv_transfer",
        verdict="fail" if failed else "pass",
        summary=summary,
        metrics=metrics,
        gates=gates,
        evidence={
            "metrics_url": url,
            "baseline": baseline,
            "before": asdict(before),
            "after": asdict(after),
            "probe_requests": settings.probe_requests,
            "reuse_probe": reuse,
            "layout": layout.evidence if ctx.config.checks.startup.layout_probe else "probe off",
        },
    )


def _reuse(ctx: CheckContext) -> tuple[dict[str, object], list[Series | None] | None]:
    """Send the reuse probe: what was sent and answered (the evidence) and each send's generation (None where the
    model cannot take a prompt of more than one block: no gate)."""
    model = next(m for m in ctx.config.models if m.name == ctx.cell.model)
    tokens = reuse_length(ctx.cell.decode_block_size, model.max_model_len)
    if tokens is None:
        why = (
            f"no prompt of more than one block of {ctx.cell.decode_block_size} fits max_model_len "
            f"{model.max_model_len}: the reuse gates are not judged"
        )
        return {"tokens": None, "why": why}, None
    try:
        ids = reuse_ids(tokenize(ctx.engine_url(), ctx.deployment.served_model, " ".join(PARAGRAPHS)), tokens)
    except CanaryError as exc:
        return {"tokens": tokens, "error": str(exc)}, [None] * REUSE_SENDS
    sends = send_reuse_probe(ctx.deployment.base_url, ctx.deployment.served_model, ids)
    answers = [[p.token for p in s] if s is not None else None for s in sends]
    return {"tokens": tokens, "max_tokens": REUSE_TOKENS, "answers": answers}, sends


def _no_snapshot(ctx: CheckContext, url: str) -> CheckResult:
    """No counters from before the checks: the growth during the checks is unknown (totals since the decode
    process started are not it), so the check cannot judge."""
    hook_error = ctx.scratch.get("kv_transfer.hook_error")
    why = f"the snapshot before the checks failed: {hook_error}" if hook_error else "no snapshot before the checks"
    return CheckResult(
        name="kv_transfer",
        verdict="invalid",
        summary=f"{why}; the decode counters' growth during the checks is unknown",
        evidence={"metrics_url": url, "missing_snapshot": why},
    )


def _missing(before: object, after: list[str]) -> list[str]:
    """Counters missing before (as the snapshot recorded) or after the checks, each named once."""
    earlier = [f"{name} (before the checks)" for name in before] if isinstance(before, list) else []
    return earlier + [f"{name} (after the checks)" for name in after]


def _layout(ctx: CheckContext, role: str) -> dict[str, object] | None:
    server = ctx.deployment.servers.get(role)
    return server.layout() if server is not None else None
