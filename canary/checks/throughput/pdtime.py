"""Where a P/D request's time goes: the client's stamps joined with both engines' timing records.

The engines' records come from the timing recorder loaded into every engine
(canary/targets/engine_site/timing_probe.py: `timing.<pid>.jsonl` beside the layout records). The
join key is the client's request id: the P/D router replaces X-Request-Id with an id of its own, but
forwards the body, whose `vllm_xargs.canary_request_id` both engines' schedulers see (`cid`). The
decode's KV read is joined to its request by the decode's internal id, and checked against the
prefill's internal id it names (`remote_id`).

Clocks: each process stamps with its own `time.monotonic()` and writes one anchor (time.time(),
time.monotonic()) per file; every stamp is turned into host wall-clock seconds with its own file's
anchor. The client's sent time is wall-clock seconds the same way (one anchor per load process).

The terms of one request (seconds; the first seven sum to the client's TTFT):

  router             what no engine accounts for: client -> prefill's scheduler, prefill's answer ->
                     decode's scheduler, decode's first token -> client (HTTP, both API servers, the
                     router; reported split as router_in / router_between / router_out)
  prefill_queue      prefill: added to the scheduler -> first scheduled
  prefill_compute    prefill: first scheduled -> its (only) token
  decode_wait        decode: added -> its KV read starts (scheduling, the NIXL handshake)
  kv_transfer        decode: first KV read posted -> the last of its transfers seen complete
  handover           decode: KV complete -> the request scheduled to compute (the scheduler noticing)
  first_decode_step  decode: scheduled -> its first token (one token, or the whole prompt when it
                     fell back to recompute)
  decode             the rest: the client's end-to-end time less its TTFT

A request decode did not read KV for (recompute fallback, or a full local prefix hit) has
kv_transfer = handover = 0 and its whole wait in decode_wait; `recompute` says which.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from canary.core import metric_keys as keys
from canary.load.stats import Sample, percentile
from canary.targets.base import Deployment, ServerInfo
from canary.targets.engine_site.timing_probe import NIXL_BASE, NIXL_PULL, REQUIRED_HOOKS, SCHEDULER

TTFT_TERMS: tuple[str, ...] = keys.PD_TIME_TERMS[:-1]
TERMS: tuple[str, ...] = keys.PD_TIME_TERMS
CLOCK_TOLERANCE_S = 0.002
"""A term below minus this is a clock or join error (the row is left out), not rounding."""
MAX_ROWS = 200
"""Per-request rows kept in evidence (the first, in send order)."""
MAX_PROBLEMS = 10


@dataclass
class EngineFile:
    """One engine process's timing file, its stamps already on the wall clock."""

    path: Path
    pid: int | None
    hooks: dict[str, str] = field(default_factory=dict)
    requests: list[dict[str, Any]] = field(default_factory=list)
    reads: list[dict[str, Any]] = field(default_factory=list)
    truncated: bool = False
    problems: list[str] = field(default_factory=list)


_REQ_STAMPS = ("add", "wait", "kv_ready", "sched", "first", "finish")
_READ_STAMPS = ("start", "posted", "done")


def parse_file(path: Path, lines: Iterable[str]) -> EngineFile:
    """One timing.<pid>.jsonl: the anchor, hook statuses, request and read lines (stamps -> wall clock)."""
    found = EngineFile(path=path, pid=None)
    offset: float | None = None
    for number, raw in enumerate(lines, 1):
        if not raw.strip():
            continue
        try:
            line = json.loads(raw)
        except ValueError:
            found.problems.append(f"{path.name}:{number}: not JSON")
            continue
        kind = line.get("ev") if isinstance(line, dict) else None
        if kind == "start":
            found.pid = line.get("pid")
            offset = float(line["wall"]) - float(line["mono"])
        elif kind == "hook":
            found.hooks[str(line.get("name"))] = str(line.get("status"))
        elif kind == "truncated":
            found.truncated = True
        elif kind in ("req", "read"):
            if offset is None:
                found.problems.append(f"{path.name}:{number}: a {kind} line before the anchor")
                continue
            stamps = _REQ_STAMPS if kind == "req" else _READ_STAMPS
            for key in stamps:
                if isinstance(line.get(key), int | float):
                    line[key] = float(line[key]) + offset
            (found.requests if kind == "req" else found.reads).append(line)
    return found


def read_dir(directory: Path | None) -> list[EngineFile]:
    """Every timing file of one engine (one per process that recorded anything)."""
    if directory is None or not directory.is_dir():
        return []
    out: list[EngineFile] = []
    for path in sorted(directory.glob("timing.*.jsonl")):
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except OSError as exc:
            out.append(EngineFile(path=path, pid=None, problems=[f"{path.name}: {exc}"]))
            continue
        out.append(parse_file(path, text.splitlines()))
    return out


def hook_problems(files: Sequence[EngineFile], role: str) -> list[str]:
    """Why this engine's records cannot be trusted for the decomposition (empty: they can)."""
    if not files:
        return [f"{role}: no timing records (the engine site's timing recorder did not run)"]
    wanted = [h for h in REQUIRED_HOOKS if h.startswith(SCHEDULER)]
    if role == "decode":
        wanted += [h for h in REQUIRED_HOOKS if h.startswith((NIXL_PULL, NIXL_BASE))]
    statuses: dict[str, list[str]] = {}
    for found in files:
        for name, status in found.hooks.items():
            statuses.setdefault(name, []).append(status)
    problems: list[str] = []
    for hook in wanted:
        seen = statuses.get(hook, [])
        bad = [s for s in seen if s != "installed"]
        if bad:
            problems.append(f"{role}: {hook.rsplit('.', 2)[-2]}.{hook.rsplit('.', 1)[-1]} {bad[0]}")
        elif not seen:
            problems.append(f"{role}: {hook.rsplit('.', 2)[-2]}.{hook.rsplit('.', 1)[-1]} never hooked")
    return problems


@dataclass
class EngineSide:
    """One engine's requests by the client's id, and (decode) its KV reads by internal request id."""

    role: str
    instance: str
    by_client_id: dict[str, dict[str, Any]]
    reads: dict[str, dict[str, Any]]
    problems: list[str]
    blocking: list[str] = field(default_factory=list)
    """Why this engine's records cannot give a decomposition at all (hooks missing or failed)."""


def engine_side(role: str, instance: str, files: Sequence[EngineFile]) -> EngineSide:
    """Index one engine's records (the last finished record per client id)."""
    by_cid: dict[str, dict[str, Any]] = {}
    reads: dict[str, dict[str, Any]] = {}
    for found in files:
        for req in found.requests:
            cid = req.get("cid")
            if cid is None or req.get("status") != "finished":
                continue
            known = by_cid.get(cid)
            if known is None or float(req.get("add") or 0) >= float(known.get("add") or 0):
                by_cid[str(cid)] = {**req, "pid": found.pid}
        for read in found.reads:
            reads[str(read.get("id"))] = read
    problems = [p for f in files for p in f.problems]
    if any(f.truncated for f in files):
        problems.append(f"{role}: timing records truncated (size bound reached)")
    return EngineSide(role, instance, by_cid, reads, problems, hook_problems(files, role))


@dataclass
class Row:
    """One request's decomposition (seconds), with its provenance."""

    request_id: str
    ttft_s: float
    terms: dict[str, float]
    parts: dict[str, float]
    provenance: dict[str, Any]
    recompute: bool
    problems: list[str]

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_json(self) -> dict[str, Any]:
        """Milliseconds, rounded, for evidence."""
        return {
            "request_id": self.request_id,
            "ttft_ms": round(self.ttft_s * 1e3, 2),
            **{f"{k}_ms": round(v * 1e3, 2) for k, v in self.terms.items()},
            **{f"{k}_ms": round(v * 1e3, 2) for k, v in self.parts.items()},
            "recompute": self.recompute,
            **self.provenance,
            **({"problems": self.problems} if self.problems else {}),
        }


def _stamp(record: dict[str, Any], key: str) -> float | None:
    value = record.get(key)
    return float(value) if isinstance(value, int | float) else None


def decompose(
    sample: Sample,
    prefill: dict[str, Any] | None,
    decode: dict[str, Any] | None,
    read: dict[str, Any] | None,
    instances: tuple[str, str] = ("prefill", "decode"),
) -> Row:
    """One request's terms (see the module docstring). A missing record or stamp, or a term below
    -CLOCK_TOLERANCE_S, is a problem: the row is kept in evidence and left out of the statistics."""
    rid = sample.request_id or str(sample.index)
    ttft = sample.ttft_s or 0.0
    problems: list[str] = []
    if prefill is None:
        problems.append("no prefill record")
    if decode is None:
        problems.append("no decode record")
    provenance: dict[str, Any] = {"prefill": instances[0], "decode": instances[1]}
    if prefill is None or decode is None:
        return Row(rid, ttft, {}, {}, provenance, False, problems)
    p = {k: _stamp(prefill, k) for k in _REQ_STAMPS}
    d = {k: _stamp(decode, k) for k in _REQ_STAMPS}
    missing = [f"prefill.{k}" for k in ("add", "sched", "first") if p[k] is None]
    missing += [f"decode.{k}" for k in ("add", "sched", "first") if d[k] is None]
    provenance.update(
        prefill_pid=prefill.get("pid"),
        decode_pid=decode.get("pid"),
        prefill_request=prefill.get("id"),
        decode_request=decode.get("id"),
    )
    sched_tokens = int(decode.get("sched_tokens") or 0)
    recompute = bool(decode.get("kv_failed")) or sched_tokens > 1
    if recompute:
        provenance["recomputed_tokens"] = max(sched_tokens - 1, 0)
    if read is not None:
        provenance.update(
            kv_blocks=read.get("blocks"), kv_bytes=read.get("bytes"), nixl_s=read.get("nixl_s"), kv_ok=read.get("ok")
        )
        if decode.get("remote_id") is not None and read.get("remote_id") != decode.get("remote_id"):
            problems.append(
                f"the KV read names prefill request {read.get('remote_id')}, decode {decode.get('remote_id')}"
            )
        if read.get("remote_id") is not None and read.get("remote_id") != prefill.get("id"):
            problems.append(f"decode read {read.get('remote_id')}'s KV, the prefill record is {prefill.get('id')}")
        missing += [f"read.{k}" for k in ("start", "done") if _stamp(read, k) is None]
    if missing:
        return Row(rid, ttft, {}, {}, provenance, recompute, [*problems, f"missing stamps: {', '.join(missing)}"])
    pa, ps, pf = float(p["add"] or 0), float(p["sched"] or 0), float(p["first"] or 0)
    da, ds, df = float(d["add"] or 0), float(d["sched"] or 0), float(d["first"] or 0)
    terms: dict[str, float] = {
        "prefill_queue": ps - pa,
        "prefill_compute": pf - ps,
    }
    if read is not None:
        rs, rd = float(read["start"]), float(read["done"])
        terms.update(decode_wait=rs - da, kv_transfer=rd - rs, handover=ds - rd)
    else:
        terms.update(decode_wait=ds - da, kv_transfer=0.0, handover=0.0)
    terms["first_decode_step"] = df - ds
    first_seen = sample.sent_at + ttft
    parts = {"router_in": pa - sample.sent_at, "router_between": da - pf, "router_out": first_seen - df}
    terms = {"router": sum(parts.values()), **terms}
    terms["decode"] = (sample.e2e_s or ttft) - ttft
    negative = [f"{k} {v * 1e3:.1f} ms" for k, v in (*terms.items(), *parts.items()) if v < -CLOCK_TOLERANCE_S]
    if negative:
        problems.append(f"negative: {', '.join(negative)} (clocks or the join disagree)")
    return Row(rid, ttft, {k: terms[k] for k in TERMS}, parts, provenance, recompute, problems)


@dataclass
class Decomposition:
    """A P/D cell's decomposition: rows, per-term statistics, or why there is none."""

    rows: list[Row] = field(default_factory=list)
    unavailable: str | None = None
    problems: list[str] = field(default_factory=list)

    @property
    def good(self) -> list[Row]:
        return [r for r in self.rows if r.ok]

    def stats(self) -> dict[str, dict[str, float]]:
        """term -> p50, p90, mean (seconds) over the rows without problems."""
        good = self.good
        if not good:
            return {}
        out: dict[str, dict[str, float]] = {}
        for term in TERMS:
            values = [r.terms[term] for r in good]
            out[term] = {"p50": percentile(values, 50), "p90": percentile(values, 90), "mean": statistics.fmean(values)}
        return out

    def metrics(self) -> dict[str, float]:
        """CheckResult.metrics entries (canary/core/metric_keys.py); none when unavailable."""
        stats = self.stats()
        if not stats:
            return {}
        out = {keys.pd_time_key(t, s): stats[t][s] for t in TERMS for s in keys.PD_TIME_STATS}
        out[keys.PD_TIME_REQUESTS] = float(len(self.good))
        out[keys.PD_TIME_RECOMPUTED] = float(sum(1 for r in self.good if r.recompute))
        kv = [
            float(r.provenance["kv_bytes"]) for r in self.good if isinstance(r.provenance.get("kv_bytes"), int | float)
        ]
        if kv:
            out[keys.PD_TIME_KV_BYTES_P50] = percentile(kv, 50)
        return out

    def evidence(self) -> dict[str, Any]:
        """evidence.pd_time: statistics in ms, the first MAX_ROWS rows, problems."""
        if self.unavailable is not None:
            return {"available": False, "why": self.unavailable}
        stats = self.stats()
        return {
            "available": bool(stats),
            **({} if stats else {"why": "no request joined without problems"}),
            "terms": list(TERMS),
            "ttft_terms": list(TTFT_TERMS),
            "stats_ms": {t: {k: round(v * 1e3, 3) for k, v in s.items()} for t, s in stats.items()},
            "requests": len(self.rows),
            "joined": len(self.good),
            "recomputed": sum(1 for r in self.good if r.recompute),
            "problems": (self.problems + [f"{r.request_id}: {p}" for r in self.rows for p in r.problems])[
                :MAX_PROBLEMS
            ],
            "rows": [r.to_json() for r in self.rows[:MAX_ROWS]],
            "rows_total": len(self.rows),
        }

    def summary(self) -> str:
        """One clause for the check's summary."""
        if self.unavailable is not None:
            return f"decomposition unavailable: {self.unavailable}"
        stats = self.stats()
        if not stats:
            return "decomposition unavailable: no request joined without problems"
        words = ", ".join(f"{t} {stats[t]['p50'] * 1e3:.0f}" for t in TTFT_TERMS)
        return f"TTFT p50 split (ms): {words}"


def instance(server: ServerInfo | None, role: str) -> str:
    """An engine's name in provenance: role and URL."""
    return f"{role} {server.base_url}" if server is not None else role


def join(samples: Sequence[Sample], prefill: EngineSide, decode: EngineSide) -> Decomposition:
    """Decompose every measured, successful sample (warm-up and failed requests are left out)."""
    found = Decomposition()
    found.problems = prefill.problems + decode.problems
    for sample in samples:
        if sample.warmup or not sample.ok or sample.ttft_s is None or sample.request_id is None:
            continue
        p = prefill.by_client_id.get(sample.request_id)
        d = decode.by_client_id.get(sample.request_id)
        read = decode.reads.get(str(d.get("id"))) if d is not None else None
        found.rows.append(decompose(sample, p, d, read, (prefill.instance, decode.instance)))
    return found


def decompose_deployment(deployment: Deployment, samples: Sequence[Sample]) -> Decomposition | None:
    """The decomposition of a P/D cell's measured requests (None for a cell without prefill and decode)."""
    prefill_server, decode_server = deployment.server("prefill"), deployment.server("decode")
    if prefill_server is None or decode_server is None:
        return None
    sides = [
        engine_side(role, instance(server, role), read_dir(server.layout_dir))
        for role, server in (("prefill", prefill_server), ("decode", decode_server))
    ]
    blocking = [p for side in sides for p in side.blocking]
    if blocking:
        return Decomposition(unavailable="; ".join(blocking[:3]))
    return join(samples, sides[0], sides[1])
