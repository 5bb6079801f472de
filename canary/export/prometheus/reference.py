"""Generate the metrics reference page (Markdown) from the metric schema (canary/export/prometheus/schema.py).

Every metric's name, type, labels, the check result it is read from, and its help text. The page is
docs/reference/metrics.md; tests/unit/test_docs.py fails when it is stale. Regenerate with
`python -m canary.export.prometheus.reference --write docs/reference/metrics.md` (or `make docs-generate`).
"""

from __future__ import annotations

import sys
from pathlib import Path

from canary.core.pages import page_main
from canary.export.prometheus import schema as s

PAGE = Path("docs/reference/metrics.md")
"""Where the page lives, relative to the repository root."""
METRIC_TYPE = "gauge"
"""schema.families builds every family as a GaugeMetricFamily: a run is a snapshot that replaces the
previous one (tests/unit/export/prometheus/test_metrics_reference.py reads the exposition's TYPE lines)."""


def _code(names: tuple[str, ...]) -> str:
    return ", ".join(f"`{name}`" for name in names) or "-"


def _sources() -> dict[str, str]:
    """Metric name -> where its value comes from (a check's CheckResult.metrics key, or the run)."""
    out: dict[str, str] = {}
    for m in s.CHECK_METRICS:
        key = m.key
        for label, value in m.extra:  # one row per metric: the label's value becomes <label>
            key = key.replace(value, f"<{label}>")
        out.setdefault(m.spec.name, f"`{m.check}`: `{key}`")
    out[s.CELL_LAST_CHECKED.name] = s.LAST_CHECKED_SOURCE
    return out


def _labels(spec: s.MetricSpec) -> str:
    if spec.labels[: len(s.CELL_LABELS)] != s.CELL_LABELS:
        return _code(spec.labels)
    extra = spec.labels[len(s.CELL_LABELS) :]
    return f"cell labels + {_code(extra)}" if extra else "cell labels"


def table() -> str:
    """One row per metric of the schema, in the schema's order."""
    sources = _sources()
    rows = ["| metric | type | labels | from | help |", "|---|---|---|---|---|"]
    for spec in s.ALL_METRICS:
        source = sources.get(spec.name, "run / verdicts")
        rows.append(f"| `{spec.name}` | {METRIC_TYPE} | {_labels(spec)} | {source} | {spec.help} |")
    return "\n".join(rows) + "\n"


def page() -> str:
    """The whole reference page: labels, cardinality bound, and the metric table."""
    return (
        "# Metrics reference\n\n"
        "Every metric the exporters (Pushgateway push, node-exporter textfile `canary.prom`, `canary serve-metrics`) "
        "carry, generated from `canary/export/prometheus/schema.py` by "
        f"`python -m canary.export.prometheus.reference --write {PAGE}`; a test fails when this page is stale. "
        "How they are pushed, scraped, graphed and alerted on: [Prometheus, dashboards, alerts]"
        "(../operations/metrics.md).\n\n"
        "## Labels\n\n"
        f"- **cell labels** (every cell metric): {_code(s.CELL_LABELS)}.\n"
        f"- **run labels** (`{s.RUN_INFO.name}`): {_code(s.RUN_LABELS)}; "
        f"**image labels** (`{s.IMAGE_INFO.name}`): {_code(s.IMAGE_LABELS)}.\n"
        f"- `percentile`: {_code(s.PERCENTILES)}. Reserved for the Pushgateway's grouping key, never a metric "
        f"label: {_code(tuple(sorted(s.RESERVED_LABELS)))}.\n\n"
        f"A cell produces at most {s.SERIES_PER_CELL} series (`SERIES_PER_CELL`); no label holds a run id, "
        "timestamp, URL or free text.\n\n"
        f"## Metrics ({len(s.ALL_METRICS)})\n\n"
        "*from*: the check and its `CheckResult.metrics` key the value is read from (`canary/core/metric_keys.py`), "
        "or the run itself.\n\n" + table()
    )


def main(argv: list[str] | None = None) -> int:
    """CLI: print the reference page, or --write it to a file."""
    return page_main(argv, description=__doc__ or "", page=page, default=PAGE)


if __name__ == "__main__":
    sys.exit(main())
