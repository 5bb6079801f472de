"""The Workloads line of each cell in summary.md and summary.html (canary/export/report/workload.py), from the
throughput check's evidence.workload."""

from __future__ import annotations

from html import escape
from typing import Any

from canary.export.report import html, markdown
from canary.export.report.workload import prefix_cache_line, workload_line
from canary.judge.results import CellResult, RunResult
from tests.support.sample import sample_run

RESIDUES: dict[str, Any] = {
    "kind": "block_residues",
    "seeds": [3, 4],
    "prompt_tokens": 64,
    "output_tokens": 8,
    "length_distribution": "fixed",
    "length_spread": 0.25,
    "arrivals": {"open_loop": False, "request_rate": None, "burstiness": 1.0, "concurrency": 4},
    "block_sizes": [16, 40],
    "block_multiples": [1],
    "prompt_lengths": [15, 16, 17, 39, 40, 41],
    "block_sizes_from": "cell",
    "block_size_sources": [
        {"size": 40, "block": "logical", "role": "aggregated", "from": "cell"},
        {"size": 16, "block": "kernel", "role": "aggregated", "from": "engine-reported (layout probe)"},
    ],
}
SHARED: dict[str, Any] = {
    **{k: v for k, v in RESIDUES.items() if not k.startswith(("block", "prompt_lengths"))},
    "kind": "shared_prefix",
    "seeds": [0],
    "prefix_groups": 4,
    "prefix_tokens": 256,
    "arrivals": {"open_loop": True, "request_rate": 2.5, "burstiness": 0.5, "concurrency": 4},
}


def _throughput_cells(run: RunResult) -> list[CellResult]:
    return [c for c in run.cells if c.check("throughput") is not None]


def _with_workloads(run: RunResult) -> tuple[CellResult, CellResult]:
    first, second = _throughput_cells(run)[:2]
    first.check("throughput").evidence["workload"] = RESIDUES  # type: ignore[union-attr]
    second.check("throughput").evidence["workload"] = SHARED  # type: ignore[union-attr]
    return first, second


def test_a_line_names_the_kind_its_parameters_arrivals_and_seeds() -> None:
    line = workload_line(RESIDUES)
    assert line.startswith("block_residues: prompts of 15, 16, 17, 39, 40, 41 tokens from block sizes 16, 40 x 1")
    assert "40 logical aggregated: cell; 16 kernel aggregated: engine-reported (layout probe)" in line
    assert line.endswith("; closed loop, 4 users; seeds 3-4")
    shared = workload_line(SHARED)
    assert shared.startswith("shared_prefix: 4 groups x 256-token prefix + 64-token suffix (fixed), 8 out")
    assert shared.endswith("; open loop, 2.5 req/s gamma k=0.5; seed 0")


def test_summary_md_has_a_workload_line_per_cell() -> None:
    run = sample_run()
    assert "## Workloads" not in markdown.render(run)  # no cell recorded one: no section
    first, second = _with_workloads(run)
    page = markdown.render(run)
    section = page.split("## Workloads\n", 1)[1].split("\n## ", 1)[0]
    assert f"`{first.cell.id}`" in section and workload_line(RESIDUES) in section
    assert f"`{second.cell.id}`" in section and workload_line(SHARED) in section
    assert section.count("\n- ") == 2


def test_summary_html_has_a_workload_line_per_cell() -> None:
    run = sample_run()
    assert "id='workloads'" not in html.render(run)
    first, second = _with_workloads(run)
    page = html.render(run)
    section = page.split("<h3 id='workloads'>Workloads</h3>", 1)[1].split("<h2", 1)[0]
    for cell, found in ((first, RESIDUES), (second, SHARED)):
        assert f"<code>{escape(cell.cell.id)}</code></a>: {escape(workload_line(found))}</li>" in section


def _cache(queried: float, hits: float, reset: bool = False) -> dict[str, Any]:
    return {
        "present": True,
        "queried_tokens": queried,
        "hit_tokens": hits,
        "hit_rate": round(hits / queried, 4) if queried else None,
        "reset": reset,
    }


# evidence.prefix_cache of a P/D cell under shared_prefix (the numbers of a real run, 2026-12-03)
PD_CACHE: dict[str, Any] = {
    "engines": {
        "prefill": {"local": _cache(12672.0, 10240.0), "external": _cache(2432.0, 0.0)},
        "decode": {"local": _cache(12672.0, 10240.0), "external": _cache(2432.0, 2432.0)},
    }
}


def test_the_prefix_cache_hits_of_each_engine_follow_the_workload() -> None:
    assert prefix_cache_line(PD_CACHE) == (
        "prefix cache: prefill 81% of 12,672 tokens (KV connector 0% of 2,432 tokens), "
        "decode 81% of 12,672 tokens (KV connector 100% of 2,432 tokens)"
    )
    absent = {"local": {"present": False}, "external": {"present": False}}
    assert prefix_cache_line({"engines": {"aggregated": absent}}) == (
        "prefix cache: aggregated exports no prefix-cache counters"  # never a number
    )
    idle = {"local": _cache(0.0, 0.0), "external": {"present": False}}
    unread = {"error": "cannot scrape http://127.0.0.1:1/metrics: refused"}
    assert prefix_cache_line({"engines": {"prefill": idle, "decode": unread}}) == (
        "prefix cache: prefill no tokens queried, decode not read (cannot scrape http://127.0.0.1:1/metrics: refused)"
    )
    reset = {"local": _cache(300.0, 150.0, reset=True), "external": {"present": False}}
    assert prefix_cache_line({"engines": {"aggregated": reset}}) == (
        "prefix cache: aggregated 50% of 300 tokens (since a counter reset)"
    )
    assert prefix_cache_line({"engines": {}}) is None


def test_both_reports_print_the_hits_beside_the_workload() -> None:
    run = sample_run()
    _, second = _with_workloads(run)
    second.check("throughput").evidence["prefix_cache"] = PD_CACHE  # type: ignore[union-attr]
    hits = prefix_cache_line(PD_CACHE)
    section = markdown.render(run).split("## Workloads\n", 1)[1].split("\n## ", 1)[0]
    assert f"{workload_line(SHARED)}; {hits}" in section
    assert f"{workload_line(RESIDUES)}\n" in section  # a cell without the record: the workload alone
    page = html.render(run)
    assert f"{escape(workload_line(SHARED))}; {escape(str(hits))}</li>" in page
