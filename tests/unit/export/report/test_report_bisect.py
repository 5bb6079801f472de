"""summary.html's bisect section: rendered from a run directory with a bisect.json (the sample run,
tests/support/sample.py, and two bisected candidate cells), linked from the failing cells' rows of
the cells table; no section, and no link, without one. summary.md names the culprit under the
failing cell."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from canary.export.report import write_all
from canary.export.report.grid import anchor
from canary.export.report.html import bisect_anchor, write_html
from canary.export.report.markdown import write_markdown
from canary.judge.bisection import BISECT_JSON
from canary.judge.results import RunResult
from tests.support.bisection import CULPRIT, NO_KV_CANDIDATE, SLOW_CANDIDATE, sample_bisections
from tests.support.sample import sample_run

SLOW, NO_KV = SLOW_CANDIDATE, NO_KV_CANDIDATE


@pytest.fixture
def run() -> RunResult:
    return sample_run()


def _cells_row(html: str, cell_id: str) -> str:
    table = re.search(r"<table class='cells'>(.*?)</table>", html, re.S)
    assert table is not None
    (row,) = [r for r in table.group(1).split("<tr>") if f"href='#{anchor(cell_id)}'" in r]
    return row


def test_a_run_with_bisect_json_shows_each_bisection_and_links_it(run: RunResult, tmp_path: Path) -> None:
    write_all(run, tmp_path)
    (tmp_path / BISECT_JSON).write_text(sample_bisections(run.run_id).model_dump_json())
    html = write_html(run, tmp_path).read_text()
    assert html.count("<h2 id='bisect'>Bisection</h2>") == 1
    section = html[html.index("<h2 id='bisect'>") : html.index("<h2>Changes</h2>")]
    found = section[section.index(f"id='{bisect_anchor(SLOW)}'") : section.index(f"id='{bisect_anchor(NO_KV)}'")]
    assert "FOUND" in found
    assert "culprit: <b>patch 05-nixl-kv-beyond-first-block.patch: nixl: read every KV block" in found
    assert "5 cell runs in 4.2 min" in found
    rows = re.findall(
        r"<tr><td>(\d)</td><td>([a-z-]+)</td><td>([^<]+)</td><td>(.*?)</td><td class='num'>([^<]+)</td>", found
    )
    assert [(n, phase, ran) for n, phase, ran, _, _ in rows] == [
        ("1", "bad-end", "patches 01..08"),
        ("2", "good-end", "no patch (the image without its series)"),
        ("3", "search", "patches 01..04"),
        ("4", "search", "patches 01..06"),
        ("5", "search", "patches 01..05"),
    ]
    assert [re.sub("<[^>]+>", "", verdict) for *_, verdict, _ in rows] == ["fail", "pass", "pass", "fail", "fail"]
    assert [minutes for *_, minutes in rows] == ["0.8 min", "0.8 min", "0.8 min", "0.9 min", "0.9 min"]
    unclear = section[section.index(f"id='{bisect_anchor(NO_KV)}'") :]
    assert "INCONCLUSIVE" in unclear and "no culprit named" in unclear and "the good end" in unclear

    slow_row = _cells_row(html, SLOW)
    assert f"<a class='bisect-link' href='#{bisect_anchor(SLOW)}'>bisect: FOUND: {CULPRIT}</a>" in slow_row
    assert f"href='#{bisect_anchor(NO_KV)}'>bisect: INCONCLUSIVE</a>" in _cells_row(html, NO_KV)
    assert "bisect-link" not in _cells_row(html, "pd.cpu_attn.p32-d64.auto.v1.baseline")  # red, not bisected
    assert html.count(f"id='{bisect_anchor(SLOW)}'") == 1  # the link's target, once
    banner = html[html.index("<div class='banner'") : html.index("</div>", html.index("<div class='banner'"))]
    (slow_item,) = [li for li in banner.split("<li>") if f"href='#{anchor(SLOW)}'" in li]
    assert f"href='#{bisect_anchor(SLOW)}'>bisect: FOUND: {CULPRIT}</a>" in slow_item  # the banner names it too


def test_without_bisect_json_there_is_no_bisect_section(run: RunResult, tmp_path: Path) -> None:
    write_all(run, tmp_path)
    html = (tmp_path / "summary.html").read_text()
    assert "id='bisect'" not in html and "bisect-link" not in html and "id='bisect-cell-" not in html


def test_an_unreadable_bisect_json_shows_no_section(run: RunResult, tmp_path: Path) -> None:
    write_all(run, tmp_path)
    (tmp_path / BISECT_JSON).write_text('{"run_id": 3}')
    html = write_html(run, tmp_path).read_text()
    assert "id='bisect'" not in html and "bisect-link" not in html


def test_summary_md_names_the_culprit_under_the_failing_cell(run: RunResult, tmp_path: Path) -> None:
    write_all(run, tmp_path)
    assert "**bisect**" not in (tmp_path / "summary.md").read_text()
    (tmp_path / BISECT_JSON).write_text(sample_bisections(run.run_id).model_dump_json())
    text = write_markdown(run, tmp_path).read_text()
    failures = text[text.index("## Failures and expected failures") :]
    slow = failures[failures.index(f"`{SLOW}`: fail") :]
    slow = slow[: slow.index("\n### ")]
    assert f"- **bisect**: FOUND: patch {CULPRIT}: nixl: read every KV block" in slow
    assert "(5 cell runs, 4.2 min; [bisect.md](bisect.md))" in slow
    no_kv = failures[failures.index(f"`{NO_KV}`: fail") :]
    assert "- **bisect**: INCONCLUSIVE: the good end" in no_kv
    assert text.count("**bisect**") == 2  # the bisected cells only
