"""The alert rules as data: configs/alerts/canary-rules.yaml, read once, for the dashboards.

The rules file is the one definition of every alert (promtool tests it, the canary chart ships it).
A dashboard panel that names an alert shows exactly that alert's expression, taken from here, never
a copy: `expr` whole (the series the alert fires for), or its two halves `value_expr` and
`threshold` when the panel draws the value with the alert's threshold as a line or colour step.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from pathlib import Path

import yaml

from canary.paths import CONFIGS_DIR

RULES_FILE = CONFIGS_DIR / "alerts" / "canary-rules.yaml"
ALERT_NAME = re.compile(r"\bCanary[A-Z][A-Za-z]+\b")
"""How an alert's name looks in a panel's title or description."""
_TRAILING_COMPARISON = re.compile(r"^(?P<lhs>.*\S)\s*(?P<op><=|>=|<|>)\s*(?P<num>[0-9][0-9.eE+-]*)\s*$", re.S)


@dataclass(frozen=True)
class AlertRule:
    """One alerting rule: name, PromQL expression (as written in the rules file), severity, summary."""

    name: str
    expr: str
    severity: str
    summary: str

    @property
    def comparison(self) -> tuple[str, str, float] | None:
        """(value expression, operator, threshold) when the expression is `<value> <op> <number>` and the
        value itself is no comparison; None otherwise (e.g. a set operation of two comparisons)."""
        found = _TRAILING_COMPARISON.match(self.expr.strip())
        if found is None or re.search(r"(?<![=!<>])(?:<=?|>=?|==|!=)(?!=)", found["lhs"]):
            return None
        return found["lhs"].strip(), found["op"], float(found["num"])

    @property
    def value_expr(self) -> str:
        """The left-hand side of the alert's final comparison: the number the alert compares."""
        found = self.comparison
        if found is None:
            raise ValueError(f"{self.name}: `{self.expr}` is not `<value> <op> <threshold>`")
        return found[0]

    @property
    def threshold(self) -> float:
        """The number the alert compares its value with."""
        found = self.comparison
        if found is None:
            raise ValueError(f"{self.name}: `{self.expr}` is not `<value> <op> <threshold>`")
        return found[2]


def load(path: Path = RULES_FILE) -> dict[str, AlertRule]:
    """Every alerting rule of a rules file, by name (recording rules are skipped)."""
    groups = yaml.safe_load(path.read_text(encoding="utf-8"))["groups"]
    out: dict[str, AlertRule] = {}
    for group in groups:
        for rule in group["rules"]:
            if "alert" not in rule:
                continue
            out[rule["alert"]] = AlertRule(
                name=rule["alert"],
                expr=str(rule["expr"]).strip(),
                severity=str(rule.get("labels", {}).get("severity", "")),
                summary=str(rule.get("annotations", {}).get("summary", "")),
            )
    return out


@functools.cache
def rules() -> dict[str, AlertRule]:
    """The canary's alert rules (configs/alerts/canary-rules.yaml)."""
    return load()


def rule(name: str) -> AlertRule:
    """One alert rule by name (KeyError names the known ones)."""
    found = rules()
    if name not in found:
        raise KeyError(f"{name}: no such alert in {RULES_FILE.name} (known: {', '.join(sorted(found))})")
    return found[name]


def normalized(expr: str) -> str:
    """An expression with its whitespace collapsed, to find one expression inside another."""
    return " ".join(expr.split())
