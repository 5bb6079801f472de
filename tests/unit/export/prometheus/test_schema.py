"""The metric schema: names, units, labels, cardinality, the contract with the checks, and that the
alert rules and dashboards use only what the schema defines."""

from __future__ import annotations

import json
import math
import re
import typing

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from canary.checks.throughput import exported as tp
from canary.export.prometheus import schema as s
from canary.judge.results import CheckResult, RunResult, Verdict
from canary.paths import REPO_ROOT
from tests.support.sample import sample_run

RULES = REPO_ROOT / "configs" / "alerts" / "canary-rules.yaml"
DASHBOARDS = sorted((REPO_ROOT / "configs" / "dashboards").glob("*.json"))
PROMQL_WORDS = {"by", "on", "ignoring", "group_left", "group_right", "without", "unless", "and", "or", "bool"}


@pytest.fixture(scope="module")
def run() -> RunResult:
    return sample_run()


def test_names_units_help_and_labels_follow_prometheus_conventions() -> None:
    names = [spec.name for spec in s.ALL_METRICS]
    assert len(names) == len(set(names))
    for spec in s.ALL_METRICS:
        assert re.fullmatch(r"canary_[a-z0-9_]+", spec.name), spec.name
        assert spec.help.strip() and spec.help.endswith("."), spec.name
        assert not spec.name.endswith("_total"), "gauges only: a run is a snapshot"
        assert not {"job", "scope", "instance", "quantile", "le"} & set(spec.labels), spec.name
        for unit in ("seconds", "ratio", "bytes"):
            if unit in spec.name.split("_")[-1:]:
                assert spec.unit == unit, spec.name
    with pytest.raises(ValueError, match="must end with its unit"):
        s.MetricSpec("canary_startup", "x.", "seconds", ())
    with pytest.raises(ValueError, match="reserved"):
        s.MetricSpec("canary_x", "x.", "", ("scope",))


def test_cell_labels_are_the_cell_coordinates(run: RunResult) -> None:
    cell = next(c.cell for c in run.cells if c.cell.id == "pd.cpu_attn.p32-d64.auto.v1.baseline")
    assert s.cell_labels(cell) == {
        "cell": "pd.cpu_attn.p32-d64.auto.v1.baseline",
        "model": "tiny",
        "backend": "CPU_ATTN",
        "prefill_block_size": "32",
        "decode_block_size": "64",
        "kernel_block_size": "32/64",
        "kv_cache_dtype": "auto",
        "runner": "v1",
        "topology": "pd-nixl",
        "image": "baseline",
    }
    assert tuple(s.cell_labels(cell)) == s.CELL_LABELS


def test_every_sample_carries_exactly_its_metrics_labels(run: RunResult) -> None:
    for sample in s.samples(run):
        assert set(sample.labels) == set(s.METRICS_BY_NAME[sample.name].labels), sample.name


def test_verdict_codes_cover_every_verdict_and_order_by_badness() -> None:
    assert set(s.VERDICT_CODES) == set(typing.get_args(Verdict))
    assert s.VERDICT_CODES["pass"] == 0
    assert (
        s.VERDICT_CODES["expected-fail"]
        < s.VERDICT_CODES["invalid"]
        < s.VERDICT_CODES["error"]
        < s.VERDICT_CODES["unexpected-pass"]
        < s.VERDICT_CODES["fail"]
    )
    assert set(s.FAILING_VERDICT_REGEX.split("|")) == {"fail", "error", "unexpected-pass", "invalid"}
    assert set(s.DEFINITIVE_FAILURE_REGEX.split("|")) == {"fail", "unexpected-pass"}
    assert set(s.INCONCLUSIVE_VERDICT_REGEX.split("|")) == {"error", "invalid"}


def test_cardinality_is_bounded_by_the_matrix_not_by_time(run: RunResult) -> None:
    samples = s.samples(run)
    per_cell: dict[str, int] = {}
    for sample in samples:
        if "cell" in sample.labels:
            per_cell[sample.labels["cell"]] = per_cell.get(sample.labels["cell"], 0) + 1
    assert max(per_cell.values()) <= s.SERIES_PER_CELL
    assert len(samples) - sum(per_cell.values()) <= 20  # run-level series
    values = {v for sample in samples for v in sample.labels.values()}
    assert run.run_id not in values
    assert not any(re.search(r"\d{8}T\d{6}Z", v) for v in values)
    # The same matrix at another time gives the same series (only values move).
    later = sample_run(finished_at=run.finished_at + (run.finished_at - run.started_at) * 10)  # type: ignore[operator]
    assert {(x.name, tuple(sorted(x.labels.items()))) for x in s.samples(later)} == {
        (x.name, tuple(sorted(x.labels.items()))) for x in samples
    }


def test_the_sample_run_exercises_every_check_metric(run: RunResult) -> None:
    exported = {x.name for x in s.samples(run)}
    assert {m.spec.name for m in s.CHECK_METRICS} <= exported
    assert {spec.name for spec in s.ALL_METRICS} <= exported


# The contract with the checks (every exported key is one a check produces) is checked on what the
# checks produce: tests/unit/core/test_metric_keys.py.


def test_values_map_from_check_metrics(run: RunResult) -> None:
    by_key = {(x.name, x.labels.get("cell"), x.labels.get("percentile")): x.value for x in s.samples(run)}
    cell = "agg.cpu_attn.b32.auto.v1.baseline"
    result = next(c for c in run.cells if c.cell.id == cell)
    throughput = result.check("throughput")
    assert throughput is not None
    assert by_key[("canary_ttft_seconds", cell, "p99")] == throughput.metrics["ttft_p99_s"]
    assert (
        by_key[("canary_throughput_output_tokens_per_second", cell, None)] == throughput.metrics["output_tokens_per_s"]
    )
    assert by_key[("canary_cell_status_code", cell, None)] == 0.0
    failed = next(x for x in s.samples(run) if x.name == "canary_startup_failure_info")
    assert failed.labels["failure_class"] == "no-common-block-size"


def test_nan_and_missing_numbers_produce_no_series(run: RunResult) -> None:
    result = run.cells[1]
    startup = result.check("startup")
    assert startup is not None
    bad = run.model_copy(deep=True)
    check = bad.cells[1].check("startup")
    assert check is not None
    check.metrics["ready_s_total"] = math.nan
    names = {(x.name, x.labels.get("cell")) for x in s.samples(bad)}
    assert ("canary_startup_duration_seconds", result.cell.id) not in names
    assert ("canary_startup_duration_seconds", result.cell.id) in {
        (x.name, x.labels.get("cell")) for x in s.samples(run)
    }


def test_failure_class_is_bounded() -> None:
    def check(value: object) -> CheckResult:
        return CheckResult(name="startup", verdict="fail", evidence={"failure_class": value})

    assert s.failure_class(check("nixl-registration-mismatch")) == "nixl-registration-mismatch"
    assert s.failure_class(check("RuntimeError: at 0x7f3a... in /tmp/x")) == "unclassified"
    assert s.failure_class(check(None)) == "unclassified"
    assert s.failure_class(check("x" * 200)) == "unclassified"


def test_exposition_round_trips_through_the_prometheus_parser(run: RunResult) -> None:
    parsed = {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(s.exposition(run).decode())
        for sample in family.samples
    }
    assert parsed == {(x.name, tuple(sorted(x.labels.items()))): x.value for x in s.samples(run)}
    families = list(text_string_to_metric_families(s.exposition(run).decode()))
    assert all(f.type == "gauge" for f in families)
    assert {f.name: f.documentation for f in families}["canary_run_duration_seconds"] == s.RUN_DURATION.help


def test_baseline_image_is_marked_and_falls_back_to_the_first_image(run: RunResult) -> None:
    info = {x.labels["image"]: x.labels["baseline"] for x in s.samples(run) if x.name == "canary_image_info"}
    assert info == {"baseline": "true", "candidate": "false"}
    old = run.model_copy(update={"baseline_image": ""})
    assert s.baseline_image(old) == "baseline"


def _promql_names(expr: str) -> tuple[set[str], set[str]]:
    """Metric names and label names an expression uses."""
    metrics = set(re.findall(r"\b(canary_[a-z0-9_]+)\b", expr))
    labels = set(re.findall(r'([a-z_]+)\s*(?:=~|!~|!=|=)\s*"', expr))
    for group in re.findall(r"\b(?:by|on|ignoring|without)\s*\(([^)]*)\)", expr):
        labels |= {x.strip() for x in group.split(",") if x.strip()}
    for args in re.findall(r'label_(?:join|replace)\([^"]*"([a-z_]+)"', expr):
        labels.add(args)
    return metrics, labels - PROMQL_WORDS


def _schema_labels() -> set[str]:
    return {label for spec in s.ALL_METRICS for label in spec.labels} | {"job", "scope", "instance"}


def _dashboard_exprs() -> list[str]:
    out = []
    for path in DASHBOARDS:
        board = json.loads(path.read_text())
        out += [t["expr"] for p in board["panels"] for t in p.get("targets", [])]
        out += [v["query"] for v in board["templating"]["list"] if v["type"] == "query"]
    return out


def test_alert_rules_use_only_schema_metrics_and_labels() -> None:
    rules = [r for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]]
    assert {
        "CanaryCellFailing",
        "CanaryRunInconclusive",
        "CanaryAccuracyBelowGate",
        "CanaryThroughputRegression",
        "CanaryPDWithoutKVTransfer",
        "CanaryStale",
    } <= {r["alert"] for r in rules}
    for rule in rules:
        metrics, labels = _promql_names(rule["expr"])
        assert metrics and metrics <= set(s.METRICS_BY_NAME), rule["alert"]
        assert labels <= _schema_labels(), (rule["alert"], labels - _schema_labels())


def test_dashboards_use_only_schema_metrics_and_labels() -> None:
    exprs = _dashboard_exprs()
    assert len(exprs) > 20
    derived = {"blocks", "row", "coordinates"}  # made by label_join in the query itself
    used_metrics: set[str] = set()
    for expr in exprs:
        metrics, labels = _promql_names(expr)
        used_metrics |= metrics
        assert metrics <= set(s.METRICS_BY_NAME), expr
        assert labels <= _schema_labels() | derived, (expr, labels - _schema_labels())
    # Every number a check reports is on a dashboard.
    assert {m.spec.name for m in s.CHECK_METRICS} - {
        "canary_gsm8k_questions",
        "canary_nixl_failed_transfers",
    } <= used_metrics


def test_metrics_markdown_documents_every_metric() -> None:
    table = s.metrics_markdown()
    assert table.count("\n") == len(s.ALL_METRICS) + 2
    for spec in s.ALL_METRICS:
        assert f"| `{spec.name}` |" in table
    assert "| `canary_ttft_seconds` | `percentile` | `throughput`: `ttft_<percentile>_s` |" in table
    assert f"({s.SERIES_PER_CELL})" in s.__doc__  # type: ignore[operator]


def test_every_checked_cell_has_an_age_also_without_rotation(run: RunResult) -> None:
    """A run without rotation state (not Kubernetes waves): each cell it checked is as old as its start,
    so the dashboards' cell-age panels work for every target."""
    plain = run.model_copy(update={"coverage": []})
    ages = {x.labels["cell"]: x.value for x in s.samples(plain) if x.name == s.CELL_LAST_CHECKED.name}
    checked = {c.cell.id: c.started_at.timestamp() for c in run.cells if c.checks}
    assert ages == checked and len(checked) < len(run.cells)  # unsupported cells ran no check: no age
    rotated = {x.labels["cell"]: x.value for x in s.samples(run) if x.name == s.CELL_LAST_CHECKED.name}
    assert rotated == {c.cell.id: c.last_checked.timestamp() for c in run.coverage if c.last_checked}


def test_capacity_and_gain_are_exported_per_cell_and_a_missing_bound_has_no_series(run: RunResult) -> None:
    by_cell: dict[str, dict[str, float]] = {}
    for sample in s.samples(run):
        if "cell" in sample.labels:
            by_cell.setdefault(sample.labels["cell"], {})[sample.name] = sample.value
    pd = "pd.cpu_attn.p32-d32.auto.v1.baseline"
    check = next(c for c in run.cells if c.cell.id == pd).check("throughput")
    assert check is not None
    for spec, key in (
        (tp.CAPACITY, "capacity_requests_per_s"),
        (tp.CAPACITY_LOW, "capacity_low_requests_per_s"),
        (tp.CAPACITY_HIGH, "capacity_high_requests_per_s"),
        (tp.CAPACITY_REQUESTS, "capacity_requests_used"),
        (tp.CAPACITY_SECONDS, "capacity_seconds_used"),
        (tp.DISAGG_GAIN, "disagg_gain"),
        (tp.DISAGG_GAIN_LOW, "disagg_gain_low"),
        (tp.DISAGG_GAIN_HIGH, "disagg_gain_high"),
        (tp.DISAGG_ENGINE_SCALE, "disagg_engine_scale"),
    ):
        assert by_cell[pd][spec.name] == check.metrics[key], spec.name
    # the candidate's p128-d128 held the SLO at no rate: the search ran (requests), no estimate, no lower end, no gain
    none = by_cell["pd.cpu_attn.p128-d128.auto.v1.candidate"]
    assert none[tp.CAPACITY_REQUESTS.name] == 120.0 and none[tp.CAPACITY_HIGH.name] == 0.25
    assert not {tp.CAPACITY.name, tp.CAPACITY_LOW.name, tp.DISAGG_GAIN.name, tp.DISAGG_GAIN_HIGH.name} & set(none)
    # aggregated cells have capacity but no gain; a cell whose load test crashed has neither
    assert tp.DISAGG_GAIN.name not in by_cell["agg.cpu_attn.b32.auto.v1.baseline"]
    assert not any("capacity" in name for name in by_cell["pd.cpu_attn.p32-d32.auto.v1.candidate"])
    gain = next(x for x in s.samples(run) if x.name == tp.DISAGG_GAIN.name and x.labels["cell"] == pd)
    assert (gain.labels["backend"], gain.labels["prefill_block_size"], gain.labels["decode_block_size"]) == (
        "CPU_ATTN",
        "32",
        "32",
    )
    text = s.exposition(run).decode()
    assert re.search(rf'^{tp.DISAGG_GAIN.name}{{[^}}]*cell="{re.escape(pd)}"', text, re.M)
    none_cell = re.escape("pd.cpu_attn.p128-d128.auto.v1.candidate")
    assert not re.search(rf'^{tp.CAPACITY.name}{{[^}}]*cell="{none_cell}"', text, re.M)
    assert re.search(rf'^{tp.CAPACITY_HIGH.name}{{[^}}]*cell="{none_cell}"', text, re.M)
