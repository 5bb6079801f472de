"""summary.html in a real headless browser (Debian's chromium, `make chromium-tools`): a realistic
run with a history (reporthistory), loaded at 1400 and 900 px wide. At each width the page must not
scroll sideways (wide tables scroll inside their own box), every in-page link must land on an
element chromium can find, and the screenshots are kept for people in the test's tmp dir, and
copied into $CANARY_SCREENSHOT_DIR when that is set (e.g. to look at them after a change).

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

import pytest
from reporthistory import with_history

from canary.export.report import write_all

WIDTHS = (1400, 900)
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
  var out = document.createElement('pre');
  out.id = 'layout-probe';
  out.textContent = JSON.stringify({
    innerWidth: window.innerWidth, clientWidth: view, scrollWidth: root.scrollWidth,
    bodyScrollWidth: document.body.scrollWidth, wide: wide.slice(0, 20), missing: missing,
    links: document.querySelectorAll('a[href^="#"]').length,
    svgs: document.querySelectorAll('svg').length
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
    """summary.html of tonight's run, compared with seven earlier nights."""
    root = tmp_path_factory.mktemp("results")
    run, trends = with_history(root)
    run_dir = root / run.run_id
    run_dir.mkdir()
    write_all(run, run_dir, trends=trends)
    return run_dir / "summary.html"


def _layout(page: Path, width: int, tmp: Path) -> dict[str, object]:
    probe = tmp / f"probe-{width}.html"
    probe.write_text(page.read_text(encoding="utf-8").replace("</body>", PROBE + "</body>"), encoding="utf-8")
    done = _run([f"--window-size={width},{HEIGHT}", "--dump-dom", probe.as_uri()], tmp / f"profile-dom-{width}")
    found = re.search(r"<pre id=\"layout-probe\">(.*?)</pre>", done.stdout, re.S)
    assert found, f"the probe wrote nothing; chromium said: {done.stderr[-2000:]}"
    numbers: dict[str, object] = json.loads(unescape(found.group(1)))
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
