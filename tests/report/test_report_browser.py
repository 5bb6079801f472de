"""summary.html in a real headless browser (Debian's chromium, `make chromium-tools`): a realistic
run with a history (reporthistory), a mixed pair, the per-request samples of its load runs and a
bisect.json (two bisected cells, tests/support/bisection.py: their rows link to the bisection), loaded
at 1400 and 900 px wide. At each width the page must not scroll sideways (wide tables scroll inside
their own box), every in-page link must land on an element chromium can find, every cell that did
not pass shows its why inside the visible part of the Cells table (no row more than a few lines
tall) and in the banner, every heatmap tile shows its verdict with its text inside its box, and
every chart's text lies inside its SVG (getBoundingClientRect, as laid out). The screenshots are
kept for people in the test's tmp dir, and copied into $CANARY_SCREENSHOT_DIR when that is set
(e.g. to look at them after a change).

The measurement: a copy of the page with a small script at the end of <body> (the report itself
has none) writes the layout numbers into the DOM, and `chromium --dump-dom` prints the DOM after
load. Every chromium call has a deadline.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from html import unescape
from pathlib import Path
from typing import Any

import pytest
from reporthistory import MIXED, with_history, with_mixed_pair, write_requests

from canary.export.report import write_all
from canary.judge.bisection import BISECT_JSON
from tests.support.bisection import sample_bisections

WIDTHS = (1400, 900)
NOT_OK = ("fail", "unexpected-pass", "error", "invalid", "expected-fail")
"""The verdicts whose why a person looks for: every cell that did not simply pass or not apply."""
MAX_ROW_LINES = 5
"""A row of the Cells table is at most this many lines of its why tall."""
SLACK_PX = 1.0
HEIGHT = 2200
CHROMIUM_TIMEOUT_S = 90
SCREENSHOT_DIR = "CANARY_SCREENSHOT_DIR"
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
)

PROBE = """<script>
(function () {
  var root = document.documentElement, view = root.clientWidth, wide = [];
  document.querySelectorAll('body *').forEach(function (el) {
    if (el.closest('.scroll')) { return; }
    var box = el.getBoundingClientRect();
    if (box.right > view + 0.5) { wide.push(el.tagName + (el.id ? '#' + el.id : '') + ' ' + Math.round(box.right)); }
  });
  var missing = [];
  document.querySelectorAll('a[href^="#"]').forEach(function (a) {
    var id = decodeURIComponent(a.getAttribute('href').slice(1));
    if (!document.getElementById(id)) { missing.push(id); }
  });
  function box(el) {
    var r = el.getBoundingClientRect();
    return {left: r.left, right: r.right, top: r.top, bottom: r.bottom, width: r.width, height: r.height};
  }
  function clip(el) {  // the horizontal extent of the page that shows el: the viewport and every box that clips it
    var left = 0, right = view;
    for (var up = el.parentElement; up && up !== root; up = up.parentElement) {
      var style = getComputedStyle(up);
      if (style.overflowX !== 'visible') {
        var r = up.getBoundingClientRect();
        left = Math.max(left, r.left); right = Math.min(right, r.right);
      }
    }
    return {left: left, right: right};
  }
  var rows = [], heading = Array.prototype.find.call(document.querySelectorAll('h2'), function (h) {
    return h.textContent.trim() === 'Cells';
  });
  var table = heading && heading.nextElementSibling;
  if (table) {
    table.querySelectorAll('tr').forEach(function (tr) {
      var link = tr.querySelector('td a[href^="#cell-"]'), reason = tr.querySelector('td.reason');
      if (!link) { return; }
      var badge = tr.querySelector('.v');
      rows.push({id: link.textContent, verdict: badge ? badge.textContent : '', row: box(tr),
        reason: reason ? box(reason) : null, text: reason ? reason.textContent : '',
        clip: reason ? clip(reason) : null,
        line: reason ? parseFloat(getComputedStyle(reason).lineHeight) || 16 : 16});
    });
  }
  var banner = [];
  document.querySelectorAll('.banner li').forEach(function (li) {
    var link = li.querySelector('a[href^="#cell-"]');
    banner.push({id: link ? link.textContent : '', text: li.textContent, box: box(li), clip: clip(li)});
  });
  var tiles = [], outside = [];
  document.querySelectorAll('svg').forEach(function (svg) {
    var frame = box(svg), title = svg.querySelector('title');
    svg.querySelectorAll('text').forEach(function (t) {
      var b = box(t);
      var out = b.left < frame.left - 1 || b.right > frame.right + 1;
      if (out || b.top < frame.top - 1 || b.bottom > frame.bottom + 1) {
        outside.push({chart: title ? title.textContent : '', text: t.textContent, box: b, svg: frame});
      }
    });
    svg.querySelectorAll('a[href^="#cell-"]').forEach(function (a) {
      var rect = a.querySelector('rect'), tip = a.querySelector('title');
      var texts = Array.prototype.map.call(a.querySelectorAll('text'), function (t) {
        return {text: t.textContent, box: box(t)};
      });
      tiles.push({title: tip ? tip.textContent : '', rect: rect ? box(rect) : null, texts: texts});
    });
  });
  var out = document.createElement('pre');
  out.id = 'layout-probe';
  out.textContent = JSON.stringify({
    innerWidth: window.innerWidth, clientWidth: view, scrollWidth: root.scrollWidth,
    bodyScrollWidth: document.body.scrollWidth, wide: wide.slice(0, 20), missing: missing,
    links: document.querySelectorAll('a[href^="#"]').length,
    bisect_links: document.querySelectorAll('table.cells a.bisect-link[href^="#bisect-"]').length,
    svgs: document.querySelectorAll('svg').length,
    rows: rows, banner: banner, tiles: tiles, outside: outside
  });
  document.body.appendChild(out);
})();
</script>"""


def _chromium() -> str:
    found = shutil.which("chromium")
    assert found, "chromium is not installed: run `make chromium-tools` (part of `make setup` and `make test`)"
    return found


def _run(args: list[str], profile: Path) -> subprocess.CompletedProcess[str]:
    command = [_chromium(), *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *args]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=CHROMIUM_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired as exc:
        raise AssertionError(f"chromium did not finish within {CHROMIUM_TIMEOUT_S} s: {command}") from exc
    assert done.returncode == 0, f"chromium exited {done.returncode}: {done.stderr[-2000:]}"
    return done


@pytest.fixture(scope="module")
def page(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """summary.html of tonight's run, compared with seven earlier nights, with a mixed pair (the
    longest cell id, two cells in one grid slot), the per-request samples of its load runs and the
    bisection of its two red candidate cells."""
    root = tmp_path_factory.mktemp("results")
    run, trends = with_history(root)
    run = with_mixed_pair(run)
    run_dir = root / run.run_id
    run_dir.mkdir()
    write_requests(run, run_dir)
    (run_dir / BISECT_JSON).write_text(sample_bisections(run.run_id).model_dump_json(), encoding="utf-8")
    write_all(run, run_dir, trends=trends)
    return run_dir / "summary.html"


def _layout(page: Path, width: int, tmp: Path) -> dict[str, Any]:
    probe = tmp / f"probe-{width}.html"
    probe.write_text(page.read_text(encoding="utf-8").replace("</body>", PROBE + "</body>"), encoding="utf-8")
    done = _run([f"--window-size={width},{HEIGHT}", "--dump-dom", probe.as_uri()], tmp / f"profile-dom-{width}")
    found = re.search(r"<pre id=\"layout-probe\">(.*?)</pre>", done.stdout, re.S)
    assert found, f"the probe wrote nothing; chromium said: {done.stderr[-2000:]}"
    numbers: dict[str, Any] = json.loads(unescape(found.group(1)))
    return numbers


@pytest.mark.parametrize("width", WIDTHS)
def test_the_report_never_scrolls_sideways_and_its_links_land(page: Path, width: int, tmp_path: Path) -> None:
    layout = _layout(page, width, tmp_path)
    assert layout["innerWidth"] == width  # the page was laid out at the width asked for
    assert layout["scrollWidth"] == layout["clientWidth"], layout  # no horizontal page scroll
    assert layout["bodyScrollWidth"] <= width, layout
    assert layout["wide"] == [], layout  # nothing sticks out (wide tables scroll in their own box)
    assert layout["missing"] == [], layout  # every anchor link has its target
    assert isinstance(layout["links"], int) and layout["links"] >= 3 * 16  # grid, table and changes link each cell
    assert layout["bisect_links"] == 2, layout  # each bisected cell's row links its bisection (landing: missing)
    assert isinstance(layout["svgs"], int) and layout["svgs"] > 4 + 4 + 2  # heatmaps, charts and sparklines


@pytest.mark.parametrize("width", WIDTHS)
def test_screenshots_for_people(page: Path, width: int, tmp_path: Path) -> None:
    shot = tmp_path / f"report-{width}.png"
    _run([f"--window-size={width},{HEIGHT}", f"--screenshot={shot}", page.as_uri()], tmp_path / "profile-shot")
    header = shot.read_bytes()[:24]
    assert header[:8] == b"\x89PNG\r\n\x1a\n"
    assert (int.from_bytes(header[16:20], "big"), int.from_bytes(header[20:24], "big")) == (width, HEIGHT)
    assert shot.stat().st_size > 50_000  # a rendered page, not a blank one
    if keep := os.environ.get(SCREENSHOT_DIR):
        Path(keep).mkdir(parents=True, exist_ok=True)
        shutil.copyfile(shot, Path(keep) / shot.name)


@pytest.mark.parametrize("width", WIDTHS)
def test_every_failing_cells_why_is_visible_without_scrolling(page: Path, width: int, tmp_path: Path) -> None:
    """In the Cells table each cell that did not pass shows its why inside the visible part of the
    page (not in a column scrolled off to the right), and no row is taller than a few lines; the
    banner names each of them, expected failures included, with its why."""
    layout = _layout(page, width, tmp_path)
    rows = layout["rows"]
    assert len(rows) >= 17 and any(r["id"] == MIXED for r in rows), rows
    failing = [r for r in rows if r["verdict"] in NOT_OK]
    assert {r["verdict"] for r in failing} >= {"fail", "error", "invalid", "expected-fail"}
    for row in failing:
        reason, clip = row["reason"], row["clip"]
        assert reason is not None and row["text"].strip(), row
        assert reason["width"] > 0 and clip["left"] - SLACK_PX <= reason["left"], row
        assert reason["right"] <= clip["right"] + SLACK_PX, (width, row["id"], reason, clip)
    for row in rows:
        assert row["row"]["height"] <= MAX_ROW_LINES * row["line"] + 12, (width, row["id"], row["row"])
    named = {item["id"]: item for item in layout["banner"]}
    for row in failing:
        item = named.get(row["id"])
        assert item is not None, (row["id"], sorted(named))
        assert item["box"]["right"] <= item["clip"]["right"] + SLACK_PX and len(item["text"]) > len(row["id"]) + 10


@pytest.mark.parametrize("width", WIDTHS)
def test_every_tile_says_its_verdict_inside_its_box(page: Path, width: int, tmp_path: Path) -> None:
    layout = _layout(page, width, tmp_path)
    tiles = layout["tiles"]
    assert len(tiles) >= 17 and any(t["title"].startswith(MIXED + ":") for t in tiles)
    for tile in tiles:
        verdict = tile["title"].split(": ", 1)[1].split(".", 1)[0]
        rect = tile["rect"]
        assert verdict in " ".join(t["text"] for t in tile["texts"]), tile
        for text in tile["texts"]:
            box = text["box"]
            inside = rect["left"] - SLACK_PX <= box["left"] and box["right"] <= rect["right"] + SLACK_PX
            assert inside and rect["top"] - SLACK_PX <= box["top"] and box["bottom"] <= rect["bottom"] + SLACK_PX, (
                width,
                tile["title"][:60],
                text,
                rect,
            )


@pytest.mark.parametrize("width", WIDTHS)
def test_every_chart_label_is_inside_its_canvas(page: Path, width: int, tmp_path: Path) -> None:
    layout = _layout(page, width, tmp_path)
    assert layout["outside"] == [], layout["outside"][:5]
