"""Layout gates: judge the KV grain each engine recorded (canary/targets/engine_site/layout_probe.py).

The seeds' bug class is a disagreement about grain between the KV manager's logical block, the
attention kernel's block and what NIXL registers and transfers. Each gate names itself and carries
both sides' numbers:

  layout-kernel-block-<role>   the kernel block in use divides the logical block and is one the
                               backend declares for it: judged against the ENGINE's own declaration
                               (canary/checks/startup/declared.py); the catalog / config entry is a
                               cross-check whose disagreement is reported as a finding, not a gate.
                               A record without a declaration (probe schema 1, hook point missing) is
                               judged against the catalog / config, and the evidence says so.
  layout-tensor-grain-<role>   the views bound to attention layers are at kernel grain
  layout-nixl-grain-<role>     NIXL registered kernel blocks: block size = kernel block and
                               blocks = logical blocks x (logical / kernel)
  (KV-transfer check, after the NIXL handshake:)
  layout-pd-grain              prefill and decode agree on what a transferred block id means: same
                               registered block size, or the connector's ratio mapping in force over a
                               token-major block interior (a byte split of a block is then a token split)
  layout-transfer-ids          the block ids decode read lie inside what each side registered

A missing record where no probe was expected (probe off, an endpoint) is reported as unknown in the
evidence, never as a pass of a gate that did not run. Where the probe was expected and did not hook
(the target installed it and it recorded nothing; the engine site printed that it could not install it;
a hook point is missing in this vLLM or its recorder failed), that is a probe failure (`probe_failures`),
which makes the startup check `invalid` with the probe's own words: as loud as a failed gate. Records of
probe schema_version 1 and 2 are both read (2 adds the declarations, the runner's phase and NIXL's input views).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

from canary.checks.startup import declared as declared_sizes
from canary.checks.startup.kv_groups import (
    attention_groups,
    attention_views,
    group_summaries,
    kernel_step_problems,
)
from canary.config import CanaryConfig
from canary.config.catalog import KernelBlockSizes
from canary.judge.results import Gate
from canary.plan.cell import Cell
from canary.targets.engine_site.after_import import NOT_INSTALLED
from canary.targets.engine_site.layout_probe import not_hooked

PROBE_MODULE = "layout_probe"


@dataclass
class LayoutJudgement:
    """The layout gates of one cell."""

    gates: list[Gate] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    evidence: dict[str, Any] = field(default_factory=dict)
    findings: dict[str, list[str]] = field(default_factory=dict)
    """Cross-check findings (catalog / config vs the engine's declaration) -> the roles they were seen on:
    reported, not gates (canary/checks/startup/declared.py cross_check says why)."""
    probe_failures: list[str] = field(default_factory=list)
    """'<role>: <why>' for each engine where the probe was expected and did not hook (the check cannot judge)."""

    @property
    def summary_suffix(self) -> str:
        """', layout verified (N gates)' when gates ran and passed and nothing went unjudged, then the findings."""
        whole = not self.failures and not self.probe_failures and not self.evidence.get("unknown")
        verified = f", layout verified ({len(self.gates)} gates)" if self.gates and whole else ""
        return verified + "".join(f"; {line}" for line in self.finding_lines())

    def finding_lines(self) -> list[str]:
        """One line per finding, naming the roles: 'catalog out of date ... (prefill, decode)'."""
        return [f"{text} ({', '.join(roles)})" for text, roles in self.findings.items()]

    def find(self, role: str, text: str) -> None:
        roles = self.findings.setdefault(text, [])
        if role not in roles:
            roles.append(role)

    def add(self, name: str, passed: bool, detail: str) -> None:
        self.gates.append(Gate(name=name, passed=passed, detail=detail))
        if not passed:
            self.failures.append(f"{name}: {detail}")


def _full_attention_group(record: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The group the gates judge: a full-attention one, else any attention group (a hybrid's Mamba / GDN state
    groups page no attention kernel: canary.checks.startup.kv_groups.attention_groups)."""
    groups = attention_groups(record)
    return next((g for g in groups if g.get("kind") == "full"), groups[0] if groups else None)


def has_declaration(record: Mapping[str, Any] | None) -> bool:
    """Whether the engine recorded what its backends declare for the full-attention group: then the
    kernel block is judged by layout-kernel-block-<role> against that, not against the plan's belief."""
    group = _full_attention_group(record) if record else None
    return group is not None and bool(declared_sizes.declarations(group)[0])


def summarize(record: Mapping[str, Any] | None) -> dict[str, Any]:
    """The numbers a person reads first: runner, backend, logical/kernel block, blocks, NIXL grain."""
    if not record:
        return {"recorded": False}
    group = _full_attention_group(record) or {}
    nixl = record.get("nixl") or {}
    views = attention_views(record)
    declared, _ = declared_sizes.declarations(group)
    return {
        "recorded": True,
        "schema_version": record.get("schema_version"),
        "phase": record.get("phase"),
        "runner_class": record.get("runner_class"),
        "backends": group.get("backends"),
        "logical_block_size": group.get("logical_block_size"),
        "kernel_block_sizes": group.get("kernel_block_sizes"),
        "declared_kernel_block_sizes": {d.backend: d.describe() for d in declared} or None,
        "num_blocks": record.get("num_blocks"),
        "kernel_view_shape": views[0].get("shape") if views else None,
        "kernel_view_grain": views[0].get("grain") if views else None,
        "nixl_block_size": nixl.get("block_size"),
        "nixl_num_blocks": nixl.get("num_blocks"),
        "nixl_physical_per_logical": nixl.get("physical_blocks_per_logical"),
        "groups": group_summaries(record),
        "hooks_not_ok": {k: v for k, v in (record.get("hooks") or {}).items() if v not in ("ok", "installed")},
    }


def judge_kernel_block(
    judgement: LayoutJudgement,
    role: str,
    group: Mapping[str, Any],
    believed: KernelBlockSizes | None,
    believed_source: str,
    config: CanaryConfig,
    image: str,
) -> None:
    """layout-kernel-block-<role>: the kernel block in use against the engine's declaration (or, without
    one, against the catalog / config), and the catalog / config cross-checked against the declaration."""
    logical = int(group["logical_block_size"])
    kernels = [int(k) for k in group["kernel_block_sizes"]]
    declared, why_not = declared_sizes.declarations(group)
    name = f"layout-kernel-block-{role}"
    if not declared:
        judgement.evidence.setdefault("declaration", {})[role] = f"{why_not}: judged against {believed_source}"
        if believed is None:
            judgement.evidence.setdefault("unknown", []).append(
                f"{role}: kernel block {kernels} not judged: no declaration and no {believed_source} entry"
            )
            return
        bad = [k for k in kernels if logical % k != 0 or not believed.accepts(k)]
        judgement.add(
            name,
            not bad,
            f"kernel block {kernels} under logical {logical}"
            + (f": {bad} not accepted ({believed.describe()}) or not dividing {logical}" if bad else ", accepted")
            + f" ({believed_source}; the engine recorded no declaration)",
        )
        return
    said = declared_sizes.describe_all(declared)
    judgement.evidence.setdefault("declaration", {})[role] = said
    rows, findings = declared_sizes.cross_check(config, image, declared)
    judgement.evidence.setdefault("cross_check", {})[role] = rows
    for finding in findings:
        judgement.find(role, finding)
    derived = declared_sizes.kernel_for(declared, logical)
    bad = [k for k in kernels if logical % k != 0 or not all(d.accepts(k) for d in declared)]
    if bad:
        detail = f"kernel block {bad[0]} in use under logical {logical}, not what the engine declares ({said}): " + (
            f"for logical {logical} that gives {derived}-token kernel blocks"
            if derived is not None
            else f"no declared size divides {logical}"
        )
    else:
        detail = f"kernel block {kernels} under logical {logical}, as the engine declares ({said})"
        if derived is not None and derived not in kernels:
            detail += f"; vLLM's rule would pick {derived}"
    judgement.add(name, not bad, detail)


def judge_engine(
    judgement: LayoutJudgement,
    role: str,
    record: Mapping[str, Any],
    believed: KernelBlockSizes | None,
    pd: bool,
    *,
    config: CanaryConfig,
    image: str,
    believed_source: str = "the catalog",
) -> None:
    """The per-engine gates from one record."""
    group = _full_attention_group(record)
    if group is None:
        judgement.evidence.setdefault("unknown", []).append(f"{role}: no KV cache group with a kernel block recorded")
        return
    judge_kernel_block(judgement, role, group, believed, believed_source, config, image)
    step = kernel_step_problems(record)
    if step is not None:
        judgement.add(
            f"layout-groups-{role}",
            not step,
            "; ".join(step) or "kernel block sizes in step with every KV cache group",
        )
    logical = int(group["logical_block_size"])
    kernel = int(group["kernel_block_sizes"][0])
    num_blocks = int(record.get("num_blocks") or 0)
    views = attention_views(record)
    if views and num_blocks:
        wrong = [v for v in views if v.get("grain") not in ("kernel", "same")]
        expected_blocks = num_blocks * (logical // kernel) if logical % kernel == 0 else None
        judgement.add(
            f"layout-tensor-grain-{role}",
            not wrong,
            (
                f"attention views at {wrong[0].get('grain')} grain: shape {wrong[0].get('shape')} where the kernel "
                f"pages by {kernel} ({expected_blocks} x {kernel})"
            )
            if wrong
            else f"attention views {views[0].get('shape')} at kernel grain ({expected_blocks} x {kernel})",
        )
    else:
        judgement.evidence.setdefault("unknown", []).append(f"{role}: no attention views recorded")
    nixl = record.get("nixl") or {}
    if pd:
        if not nixl.get("block_size"):
            judgement.evidence.setdefault("unknown", []).append(f"{role}: no NIXL registration recorded")
            return
        view_bytes = int(views[0].get("bytes") or 0) if views else 0
        judge_nixl(judgement, role, nixl, logical, kernel, num_blocks, view_bytes)


def judge_nixl(
    judgement: LayoutJudgement,
    role: str,
    nixl: Mapping[str, Any],
    logical: int,
    kernel: int,
    num_blocks: int,
    view_bytes: int = 0,
) -> None:
    """NIXL must register kernel blocks: its block size and block count at the kernel grain, and each
    region's bytes (block length x blocks) must be the cache tensor's (or half of it: K and V regions)."""
    registered_size = int(nixl["block_size"])
    registered_blocks = nixl.get("num_blocks")
    want_blocks = num_blocks * (logical // kernel) if num_blocks and logical % kernel == 0 else None
    problems: list[str] = []
    if registered_size != kernel:
        problems.append(f"registered {registered_size}-token blocks where the kernel pages by {kernel}")
    if want_blocks is not None and registered_blocks is not None and int(registered_blocks) != want_blocks:
        problems.append(
            f"registered {registered_blocks} x {registered_size} where the cache holds {want_blocks} x {kernel}"
        )
    lens = [int(x) for x in nixl.get("block_len_per_layer") or []]
    if view_bytes and registered_blocks and lens:
        covered = {length * int(registered_blocks) for length in lens}
        if not covered <= {view_bytes, view_bytes // 2}:
            problems.append(
                f"registered regions of {sorted(covered)} bytes (block length {sorted(set(lens))} x "
                f"{registered_blocks}) where a cache tensor holds {view_bytes} bytes"
            )
    judgement.add(
        f"layout-nixl-grain-{role}",
        not problems,
        "; ".join(problems) or f"registered {registered_blocks} x {registered_size} (kernel grain)",
    )


def interior_split_is_token_split(view: Mapping[str, Any], kernel: int) -> bool | None:
    """Whether cutting one block's bytes into equal parts cuts it by tokens (token-major interior).

    The block dim is the one with the largest stride; the token dim is the one of size `kernel`
    inside it. Any dim of size > 1 between them (heads, K/V) makes a byte split a split of that dim
    instead: CPU_ATTN keeps [heads, tokens, ...] inside a block. None: the shape does not say."""
    shape, stride = list(view.get("shape") or []), list(view.get("stride") or [])
    if len(shape) != len(stride) or len(shape) < 2:
        return None
    block_dim = max(range(len(shape)), key=lambda i: stride[i])
    inner = [i for i in range(len(shape)) if i != block_dim]
    inner.sort(key=lambda i: -stride[i])
    token_dims = [i for i in inner if shape[i] == kernel]
    if not token_dims:
        return None
    before = inner[: inner.index(token_dims[0])]
    return all(shape[i] == 1 for i in before)


def judge_pd_agreement(
    judgement: LayoutJudgement, prefill: Mapping[str, Any], decode: Mapping[str, Any], platform: str
) -> None:
    """Prefill and decode agree on what a transferred block id means (transfer time: after the handshake).

    Equal registered block sizes agree. Different ones need the connector's ratio mapping, which
    splits each larger block into `ratio` equal byte ranges paired with the other side's blocks:
    that is a token split only when the block interior is token-major."""
    p_nixl, d_nixl = prefill.get("nixl") or {}, decode.get("nixl") or {}
    p_size, d_size = p_nixl.get("block_size"), d_nixl.get("block_size")
    if not p_size or not d_size:
        judgement.evidence.setdefault("unknown", []).append("P/D agreement: a side recorded no NIXL registration")
        return
    if p_size == d_size:
        judgement.add("layout-pd-grain", True, f"both sides register {p_size}-token blocks")
        return
    remotes = [r for r in d_nixl.get("remotes") or [] if isinstance(r, Mapping)]
    if not remotes:
        judgement.evidence.setdefault("unknown", []).append(
            f"P/D agreement: prefill registers {p_size}-token blocks, decode {d_size}; decode recorded no handshake"
        )
        return
    ratios = [r.get("block_size_ratio") for r in remotes]
    want = d_size // p_size if d_size % p_size == 0 else None
    if want is None or not any(r == want for r in ratios):
        judgement.add(
            "layout-pd-grain",
            False,
            f"prefill registers {p_size}-token blocks, decode {d_size}: no ratio mapping in force (ratios {ratios}): "
            "a block id means different tokens on each side",
        )
        return
    bigger = decode if d_size > p_size else prefill
    views = attention_views(bigger)
    token_split = interior_split_is_token_split(views[0], max(p_size, d_size)) if views else None
    where = f"decode maps each {d_size}-token block to {want} prefill blocks of {p_size}"
    if token_split is None or (token_split is False and platform != "cpu"):
        judgement.evidence.setdefault("unknown", []).append(
            f"P/D agreement: {where}; block interior order not judged here (shape "
            f"{views[0].get('shape') if views else None})"
        )
        return
    judgement.add(
        "layout-pd-grain",
        token_split,
        f"{where}; block interior {views[0].get('shape')} strides {views[0].get('stride')} "
        + (
            "is token-major: a byte split is a token split"
            if token_split
            else "keeps other dims (heads) outside the tokens: a byte split of a block is not a token split, so "
            "the mapped transfer scatters tokens"
        ),
    )


def install_errors(log: str) -> list[str]:
    """What the engine site said about the layout probe it could not install (its NOT_INSTALLED lines), once each."""
    found: list[str] = []
    for line in log.splitlines():
        at = line.find(NOT_INSTALLED + PROBE_MODULE + ":")
        said = line[at + len(NOT_INSTALLED) :].strip() if at >= 0 else ""
        if said and said not in found:
            found.append(said)
    return found


def probe_failures(record: Mapping[str, Any] | None, installed: bool, log: str) -> list[str]:
    """Why the layout probe did not hook one engine: the engine site's install errors, the record's own
    install error and hooks it could not place or record at, or, where the target installed it, no record
    at all (a started engine allocated its KV cache: a hooked probe records that). [] when it hooked."""
    failures = [f"not installed: {said}" for said in install_errors(log)]
    if record:
        if record.get("install_error"):
            failures.append(f"not installed: {PROBE_MODULE}: {record['install_error']}")
        failures += [f"{hook}: {status}" for hook, status in not_hooked(dict(record.get("hooks") or {})).items()]
    elif installed and not failures:
        failures.append("installed but recorded nothing: none of its hook points was reached (moved in this vLLM?)")
    return failures


def judge_layouts(
    cell: Cell,
    layouts: Mapping[str, Mapping[str, Any] | None],
    config: CanaryConfig,
    *,
    installed: Collection[str] = (),
    logs: Mapping[str, str] | None = None,
) -> LayoutJudgement:
    """Every layout gate of a cell from its engines' records. installed: the roles whose target installed the
    probe (a missing record there is a probe failure, not unknown); logs: each role's log (install errors)."""
    judgement = LayoutJudgement()
    if not config.checks.startup.layout_probe:
        judgement.evidence["probe"] = "off (checks.startup.layout_probe: false)"
        return judgement
    judgement.evidence["engines"] = {role: summarize(record) for role, record in layouts.items()}
    pd = cell.topology == "pd-nixl"
    for role, record in layouts.items():
        failures = probe_failures(record, role in installed, (logs or {}).get(role, ""))
        judgement.probe_failures += [f"{role}: layout probe did not hook: {why}" for why in failures]
        if not record:
            judgement.evidence.setdefault("unknown", []).append(f"{role}: no layout record")
            continue
        image = cell.image_for(role)
        believed, _, source = declared_sizes.believed(config, image, cell.backend)
        judge_engine(
            judgement,
            role,
            record,
            believed,
            pd,
            config=config,
            image=image,
            believed_source=source,
        )
    if judgement.findings:
        judgement.evidence["findings"] = judgement.finding_lines()
    if judgement.probe_failures:
        judgement.evidence["probe_failures"] = judgement.probe_failures
    return judgement


def _flat(ids: Any) -> list[int]:
    if isinstance(ids, list) and ids and isinstance(ids[0], list):
        return [int(x) for group in ids for x in group]
    return [int(x) for x in ids] if isinstance(ids, list) else []


def judge_transfers(
    prefill: Mapping[str, Any] | None, decode: Mapping[str, Any] | None, platform: str
) -> LayoutJudgement:
    """Transfer-time facts: both sides agree on what a block id means (layout-pd-grain), and the
    block ids decode read are inside both sides' NIXL registrations (layout-transfer-ids)."""
    judgement = LayoutJudgement()
    if prefill and decode:
        judge_pd_agreement(judgement, prefill, decode, platform)
    transfers = [t for t in (decode or {}).get("transfers") or [] if isinstance(t, Mapping)]
    if not transfers:
        judgement.evidence.setdefault("unknown", []).append("no transfer recorded by decode's layout probe")
        return judgement
    local_blocks = ((decode or {}).get("nixl") or {}).get("num_blocks")
    remote_blocks = ((prefill or {}).get("nixl") or {}).get("num_blocks")
    problems: list[str] = []
    for index, transfer in enumerate(transfers):
        local, remote = _flat(transfer.get("local_block_ids")), _flat(transfer.get("remote_block_ids"))
        if local_blocks and local and max(local) >= int(local_blocks):
            problems.append(f"transfer {index}: local block {max(local)} beyond decode's {local_blocks} registered")
        if remote_blocks and remote and max(remote) >= int(remote_blocks):
            problems.append(f"transfer {index}: remote block {max(remote)} beyond prefill's {remote_blocks} registered")
    first = transfers[0]
    judgement.evidence["first_transfer"] = dict(first)
    judgement.add(
        "layout-transfer-ids",
        not problems,
        "; ".join(problems)
        or f"{len(transfers)} transfers inside the registrations "
        f"(decode {local_blocks}, prefill {remote_blocks} blocks)",
    )
    return judgement
