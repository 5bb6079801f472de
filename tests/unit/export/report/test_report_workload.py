"""The Workloads line of each cell in summary.md and summary.html (canary/export/report/workload.py), from the
throughput check's evidence.workload."""

from __future__ import annotations

from html import escape
from typing import Any

from canary.export.report import html, markdown
from canary.export.report.workload import workload_line
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
