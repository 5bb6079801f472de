"""junit.xml: one test suite per cell; one test case for the cell's verdict and one per check.

CI systems read it. Mapping: pass -> passed; fail, unexpected-pass -> failure; error, invalid ->
error; skipped, unsupported, ungated -> skipped. Expected failures are skipped with an "xfail" message, and
so are the failing checks of an expected-fail cell: the cell test case carries the verdict.
"""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path

from canary.core.atomic import write_atomic
from canary.export.report.grid import log_excerpt
from canary.judge.results import CellResult, CheckResult, RunResult

# Characters XML 1.0 cannot hold (engine logs carry ANSI escapes and the odd NUL).
_INVALID_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
MAX_TEXT = 20_000


def clean(text: str) -> str:
    """Text XML can hold: no ANSI escapes, no control characters, bounded length."""
    text = _INVALID_XML.sub("", _ANSI.sub("", text))
    return text if len(text) <= MAX_TEXT else text[: MAX_TEXT - 20] + "\n... (truncated)"


def _outcome(element: ET.Element, verdict: str, message: str, body: str, xfail: bool) -> str:
    """Add the failure/error/skipped child of a test case; returns the JUnit outcome."""
    if verdict == "pass":
        return "passed"
    if xfail or verdict == "expected-fail":
        ET.SubElement(element, "skipped", message=clean(f"xfail: {message}")).text = clean(body) or None
        return "skipped"
    if verdict in ("skipped", "unsupported", "ungated"):
        ET.SubElement(element, "skipped", message=clean(f"{verdict}: {message}"))
        return "skipped"
    kind = "error" if verdict in ("error", "invalid") else "failure"
    child = ET.SubElement(element, kind, message=clean(f"{verdict}: {message}"), type=verdict)
    child.text = clean(body) or None
    return kind


def _check_body(check: CheckResult) -> str:
    lines = [check.summary]
    for gate in check.gates:
        lines.append(
            f"gate {gate.name}: {'passed' if gate.passed else 'FAILED'} "
            f"(observed {gate.observed}, threshold {gate.threshold}) {gate.detail}".rstrip()
        )
    if check.evidence.get("failure_class"):
        lines.append(f"failure class: {check.evidence['failure_class']}")
    if hint := check.evidence.get("failure_hint"):
        lines.append(f"hint: {hint}")
    excerpt = log_excerpt(check)
    if excerpt:
        lines += ["log excerpt:", excerpt]
    return "\n".join(line for line in lines if line)


def _suite(result: CellResult, counts: dict[str, int]) -> ET.Element:
    cell = result.cell
    suite = ET.Element("testsuite", name=cell.id, timestamp=result.started_at.isoformat(timespec="seconds"))
    props = ET.SubElement(suite, "properties")
    for key, value in cell.axis_values().items():
        ET.SubElement(props, "property", name=key, value=value)
    ET.SubElement(props, "property", name="kernel_block_size", value=cell.kernel_label)
    for role, path in sorted(result.logs.items()):
        ET.SubElement(props, "property", name=f"log.{role}", value=path)
    local: dict[str, int] = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    xfail_cell = result.verdict == "expected-fail"

    case = ET.SubElement(suite, "testcase", classname=cell.id, name="cell", time=f"{result.duration_s:.3f}")
    outcome = _outcome(case, result.verdict, result.reason, result.reason, xfail=False)
    _count(local, outcome)
    for check in result.checks:
        case = ET.SubElement(suite, "testcase", classname=cell.id, name=check.name, time=f"{check.duration_s:.3f}")
        xfail = xfail_cell and check.verdict != "pass"
        outcome = _outcome(case, check.verdict, check.summary, _check_body(check), xfail=xfail)
        _count(local, outcome)
        if check.metrics:
            ET.SubElement(case, "system-out").text = clean(json.dumps(check.metrics, sort_keys=True))
    for key, total in local.items():
        suite.set(key, str(total))
        counts[key] = counts.get(key, 0) + total
    suite.set("time", f"{result.duration_s:.3f}")
    return suite


def _count(counts: dict[str, int], outcome: str) -> None:
    counts["tests"] += 1
    key = {"failure": "failures", "error": "errors", "skipped": "skipped"}.get(outcome)
    if key:
        counts[key] += 1


def render(run: RunResult) -> str:
    """The JUnit XML of a run."""
    root = ET.Element("testsuites", name=f"vllm-canary {run.config_name}")
    counts: dict[str, int] = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    for result in run.cells:
        root.append(_suite(result, counts))
    for key, value in counts.items():
        root.set(key, str(value))
    root.set("time", f"{run.duration_s:.3f}")
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def write_junit(run: RunResult, run_dir: Path) -> Path:
    """Write junit.xml."""
    return write_atomic(run_dir / "junit.xml", render(run))
