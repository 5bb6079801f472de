"""The workload each cell's load ran (the throughput check's evidence.workload,
canary/checks/throughput/workload.py), one line per cell for summary.html and summary.md: the kind and
its parameters, the lengths, the arrivals and the seeds, then the prefix-cache hits each engine had
during that load (evidence.prefix_cache, canary/checks/throughput/prefixcache.py). Cells whose result
has no workload block (older results, a check that did not run) are left out; a run with none has no
section."""

from __future__ import annotations

from html import escape
from typing import Any

from canary.export.report.grid import anchor
from canary.judge.results import CellResult, RunResult


def _workload(result: CellResult) -> dict[str, Any] | None:
    check = result.check("throughput")
    found = check.evidence.get("workload") if check is not None else None
    return found if isinstance(found, dict) and found.get("kind") else None


def _ints(values: Any) -> str:
    return ", ".join(str(v) for v in values or [])


def _seeds(seeds: Any) -> str:
    seeds = list(seeds or [])
    if not seeds:
        return "seed unknown"
    if len(seeds) == 1:
        return f"seed {seeds[0]}"
    if seeds == list(range(seeds[0], seeds[0] + len(seeds))):
        return f"seeds {seeds[0]}-{seeds[-1]}"
    return f"seeds {_ints(seeds)}"


def _lengths(found: dict[str, Any], what: str) -> str:
    spread = found.get("length_distribution", "fixed")
    if spread != "fixed":
        spread = f"{spread} +-{float(found.get('length_spread', 0)):.0%}"
    return f"{found.get('prompt_tokens')}-token {what} ({spread}), {found.get('output_tokens')} out"


def _sources(found: dict[str, Any]) -> str:
    rows = found.get("block_size_sources")
    if not isinstance(rows, list):
        return str(found.get("block_sizes_from", ""))
    return "; ".join(f"{r.get('size')} {r.get('block')} {r.get('role')}: {r.get('from')}" for r in rows)


def _shape(found: dict[str, Any]) -> str:
    kind = str(found["kind"])
    if kind == "shared_prefix":
        return f"{kind}: {found.get('prefix_groups')} groups x {found.get('prefix_tokens')}-token prefix + " + _lengths(
            found, "suffix"
        )
    if kind == "multi_turn":
        think = float(found.get("think_time_s") or 0.0)
        return f"{kind}: {found.get('turns')} turns, {_lengths(found, 'new prompt a turn')}" + (
            f", think {think:g} s (mean)" if think else ""
        )
    if kind == "block_residues":
        missing = "; ".join(found.get("block_sizes_missing") or [])
        return (
            f"{kind}: prompts of {_ints(found.get('prompt_lengths'))} tokens from block sizes "
            f"{_ints(found.get('block_sizes'))} x {_ints(found.get('block_multiples'))} ({_sources(found)})"
            + (f"; {missing}" if missing else "")
            + f", {found.get('output_tokens')} out"
        )
    if kind == "trace":
        sha = str(found.get("trace_sha256", ""))
        return (
            f"{kind}: {found.get('trace_path')} (sha256 {sha[:12]}), time x{found.get('trace_time_scale')}, "
            f"{found.get('trace_block_tokens')} tokens a hash id"
        )
    return f"{kind}: {_lengths(found, 'prompts')}"


def _arrivals(found: dict[str, Any]) -> str:
    arrivals = found.get("arrivals") or {}
    rate, users = arrivals.get("request_rate"), arrivals.get("concurrency")
    burst = float(arrivals.get("burstiness") or 1.0)
    process = "Poisson" if burst == 1.0 else f"gamma k={burst:g}"
    unit = "conversations/s" if found.get("kind") == "multi_turn" else "req/s"
    if arrivals.get("open_loop"):
        if found.get("kind") == "trace":
            return "open loop on the trace's timestamps"
        return f"open loop, {rate:g} {unit} {process}"
    if found.get("kind") == "trace":
        return f"closed loop, {users} users on the trace's timestamps"
    if rate is not None:
        return f"{users} users paced at {rate:g} req/s {process}"
    return f"closed loop, {users} users"


def workload_line(found: dict[str, Any]) -> str:
    """One line for people: kind and parameters; arrivals; seeds."""
    return f"{_shape(found)}; {_arrivals(found)}; {_seeds(found.get('seeds'))}"


def _share(cache: Any) -> str | None:
    """'62% of 12,800 tokens' of one cache's growth (evidence.prefix_cache.engines.<role>.local / external);
    None when its counters are absent."""
    if not isinstance(cache, dict) or not cache.get("present"):
        return None
    queried, rate = cache.get("queried_tokens"), cache.get("hit_rate")
    text = "no tokens queried" if rate is None else f"{float(rate):.0%} of {float(queried or 0):,.0f} tokens"
    return f"{text} (since a counter reset)" if cache.get("reset") else text


def _engine_hits(role: str, found: Any) -> str:
    if not isinstance(found, dict):
        return f"{role} unknown"
    if "error" in found:
        return f"{role} not read ({found['error']})"
    local, external = _share(found.get("local")), _share(found.get("external"))
    text = f"{role} {local}" if local is not None else f"{role} exports no prefix-cache counters"
    if external is not None and external != "no tokens queried":
        text += f" (KV connector {external})"
    return text


def prefix_cache_line(found: dict[str, Any]) -> str | None:
    """'prefix cache: prefill 62% of 12,800 tokens, decode 0% of 3,200 tokens (KV connector 100% of 3,200
    tokens)' from evidence.prefix_cache; None without engines."""
    engines = found.get("engines")
    if not isinstance(engines, dict) or not engines:
        return None
    return "prefix cache: " + ", ".join(_engine_hits(str(role), hits) for role, hits in engines.items())


def _line(result: CellResult, found: dict[str, Any]) -> str:
    line = workload_line(found)
    check = result.check("throughput")
    cache = check.evidence.get("prefix_cache") if check is not None else None
    hits = prefix_cache_line(cache) if isinstance(cache, dict) else None
    return f"{line}; {hits}" if hits else line


def workloads(run: RunResult) -> list[tuple[CellResult, str]]:
    """(cell, line) for every cell whose throughput check recorded its workload, in run order."""
    return [(r, _line(r, found)) for r in run.cells if (found := _workload(r)) is not None]


def markdown_lines(run: RunResult) -> list[str]:
    """The Markdown section: a line per cell (nothing when no cell recorded a workload)."""
    found = workloads(run)
    if not found:
        return []
    lines = ["## Workloads", ""]
    lines += [f"- [`{r.cell.id}`](#{anchor(r.cell.id)}): {line.replace('|', '/')}" for r, line in found]
    return [*lines, ""]


def html_section(run: RunResult) -> str:
    """The HTML section: a line per cell (empty when no cell recorded a workload)."""
    found = workloads(run)
    if not found:
        return ""
    items = "".join(
        f"<li><a href='#{escape(anchor(r.cell.id))}'><code>{escape(r.cell.id)}</code></a>: {escape(line)}</li>"
        for r, line in found
    )
    return (
        "<h3 id='workloads'>Workloads</h3><p class='note'>What each cell's load sent "
        "(checks.throughput.workload; evidence.workload of results.json has every parameter) and the prefix-cache "
        "hits of each engine during it (evidence.prefix_cache).</p>"
        f"<ul>{items}</ul>"
    )
