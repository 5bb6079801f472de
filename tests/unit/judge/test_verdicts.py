"""The one verdict table (canary.judge.verdicts): its order, and that every consumer derives from it
instead of keeping a copy (results, schema, reports, dashboards, alert rules)."""

from __future__ import annotations

import ast
import json
import re
import typing

import pytest
import yaml

from canary.export.prometheus import schema
from canary.export.report import html, markdown, terminal
from canary.judge import verdicts as v
from canary.judge.results import FAILING_VERDICTS, VERDICT_SEVERITY, Verdict, worst
from canary.paths import REPO_ROOT

CANARY = REPO_ROOT / "canary"
NAMES = set(typing.get_args(v.Verdict))


def test_the_table_lists_every_verdict_once_with_every_presentation() -> None:
    assert [spec.name for spec in v.TABLE] == list(v.SEVERITY_ORDER)
    assert set(v.SEVERITY_ORDER) == NAMES and len(v.SEVERITY_ORDER) == len(NAMES)
    for table in (v.VERDICT_CODES, v.VERDICT_SYMBOL, v.VERDICT_COLOR, v.VERDICT_RICH_STYLE, VERDICT_SEVERITY):
        assert set(table) == NAMES
    assert all(re.fullmatch(r"#[0-9a-f]{6}", color) for color in v.VERDICT_COLOR.values())
    assert len(set(v.VERDICT_COLOR.values())) == len(NAMES)


def test_definitive_findings_outrank_what_could_not_be_measured() -> None:
    # unexpected-pass is evidence (something changed); invalid is none: unexpected-pass is worse.
    assert worst(["invalid", "unexpected-pass"]) == "unexpected-pass"
    assert worst(["error", "fail", "pass"]) == "fail"
    assert worst(["invalid", "error"]) == "error"
    assert worst(["pass", "skipped", "unsupported"]) == "pass"
    assert worst([]) == "ungated"  # nothing judged is never a pass (issue 41)
    assert worst(["pass", "ungated", "skipped"]) == "pass"
    for a in v.DEFINITIVE_FAILURES:
        for b in v.INCONCLUSIVE_VERDICTS:
            assert v.VERDICT_SEVERITY[a] < v.VERDICT_SEVERITY[b]
            assert v.VERDICT_CODES[a] > v.VERDICT_CODES[b]


def test_codes_follow_the_severity_among_verdicts_that_are_not_ok() -> None:
    not_ok = [name for name in v.SEVERITY_ORDER if v.BY_NAME[name].outcome != "ok"]
    assert [v.VERDICT_CODES[name] for name in not_ok] == sorted((v.VERDICT_CODES[n] for n in not_ok), reverse=True)
    assert min(v.VERDICT_CODES[n] for n in not_ok) > max(
        v.VERDICT_CODES[n] for n in NAMES if v.BY_NAME[n].outcome == "ok"
    )
    assert v.VERDICT_CODES["pass"] == 0


@pytest.mark.parametrize(
    ("cells", "outcome"),
    [
        ([], "ok"),
        (["pass", "expected-fail", "skipped", "unsupported"], "ok"),
        (["pass", "invalid"], "inconclusive"),
        (["pass", "error", "invalid"], "inconclusive"),
        (["invalid", "fail"], "failed"),
        (["unexpected-pass", "error"], "failed"),
    ],
)
def test_run_outcome(cells: list[str], outcome: str) -> None:
    assert v.outcome_of(cells) == outcome


def test_consumers_use_the_table_itself() -> None:
    assert VERDICT_SEVERITY is v.VERDICT_SEVERITY
    assert FAILING_VERDICTS is v.FAILING_VERDICTS
    assert Verdict is v.Verdict
    assert schema.VERDICT_CODES is v.VERDICT_CODES
    assert html.VERDICT_COLOR is v.VERDICT_COLOR
    assert markdown.VERDICT_SYMBOL is v.VERDICT_SYMBOL
    assert terminal.VERDICT_RICH_STYLE is v.VERDICT_RICH_STYLE
    for name in ("fail", "unexpected-pass", "error", "invalid", "pass"):
        assert f"{v.VERDICT_CODES[name]} {name}" in schema.CELL_STATUS.help


def _verdict_literals(node: ast.AST) -> list[str]:
    """Verdict names among the string constants directly inside a literal collection."""
    items: list[ast.expr | None] = []
    if isinstance(node, ast.Dict):
        items = list(node.keys)
    elif isinstance(node, ast.Set | ast.List | ast.Tuple):
        items = list(node.elts)
    return [i.value for i in items if isinstance(i, ast.Constant) and isinstance(i.value, str) and i.value in NAMES]


def _copy_of_the_table(node: ast.AST) -> str | None:
    """What a node copies of the verdict table, if anything."""
    # A mapping keyed by verdicts is a table; a collection of most verdicts is an order or a class.
    named = _verdict_literals(node)
    if len(named) >= (3 if isinstance(node, ast.Dict) else 4):
        return str(sorted(named))
    if isinstance(node, ast.Constant) and isinstance(node.value, str) and "|" in node.value:
        return f"regex {node.value!r}" if len(set(node.value.split("|")) & NAMES) >= 2 else None
    if isinstance(node, ast.Subscript) and ast.unparse(node.value).endswith("Literal"):
        quoted = set(re.findall(r"'([a-z-]+)'", ast.unparse(node.slice)))
        return ast.unparse(node) if len(quoted & NAMES) >= 3 else None
    return None


def test_no_module_keeps_its_own_verdict_table() -> None:
    """No dict keyed by three or more verdicts, no set, list or tuple of four or more, no `a|b` regex
    of verdict names and no Literal of them anywhere in canary/ except canary/judge/verdicts.py (a check
    that picks two or three verdicts for a decision is logic, not a copy of the table)."""
    copies: list[str] = []
    for path in sorted(CANARY.rglob("*.py")):
        if path == CANARY / "judge" / "verdicts.py":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            found = _copy_of_the_table(node)
            if found:
                copies.append(f"{path.relative_to(REPO_ROOT)}:{getattr(node, 'lineno', '?')}: {found}")
    assert not copies, "verdict facts copied outside canary/judge/verdicts.py:\n" + "\n".join(copies)


def test_the_committed_dashboards_map_codes_as_the_table_does() -> None:
    mappings = []
    for path in sorted((REPO_ROOT / "configs" / "dashboards").glob("*.json")):
        for panel in json.loads(path.read_text(encoding="utf-8"))["panels"]:
            for mapping in panel.get("fieldConfig", {}).get("defaults", {}).get("mappings", []):
                mappings.append(mapping["options"])
    assert mappings
    want = {str(spec.code): {"text": spec.name, "color": spec.color, "index": spec.code} for spec in v.TABLE}
    outcomes = {
        str(code): {"text": v.OUTCOME_WORD[outcome], "color": v.OUTCOME_COLOR[outcome], "index": code}
        for outcome, code in v.OUTCOME_CODES.items()
    }
    for options in mappings:
        # a run's outcome (OK, INCONCLUSIVE, FAILED) as the CLI prints it, or a verdict code
        is_outcome = {o["text"] for o in options.values()} <= set(v.OUTCOME_WORD.values())
        assert options == (outcomes if is_outcome else want)
    assert want in mappings


def test_the_alert_rules_use_the_tables_classes() -> None:
    rules = yaml.safe_load((REPO_ROOT / "configs" / "alerts" / "canary-rules.yaml").read_text(encoding="utf-8"))
    by_name = {r["alert"]: r for g in rules["groups"] for r in g["rules"]}
    assert by_name["CanaryCellFailing"]["expr"] == (
        f'{schema.CELL_VERDICT.name}{{verdict=~"{schema.DEFINITIVE_FAILURE_REGEX}"}} == 1'
    )
    assert by_name["CanaryRunInconclusive"]["expr"] == f"{schema.RUN_OUTCOME.name} == {v.OUTCOME_CODES['inconclusive']}"
    assert schema.INCONCLUSIVE_VERDICT_REGEX in by_name["CanaryRunInconclusive"]["annotations"]["description"]
