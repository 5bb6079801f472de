"""Pushgateway outages (spool, then push everything on the next run), rejected pushes, and the HTTP
exporter (`canary serve-metrics`) scraped by the real Prometheus.

The outage test stops and restarts the session's Pushgateway (same port), which drops what other
modules pushed: pytest runs this module after test_prom_push_and_query (file order), and each
module pushes its own runs.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families
from promhelpers import JOB, PromStack, config_for, http_get

from canary.export.prometheus import schema as s
from canary.export.prometheus.publish import export_run, spool_dir
from canary.export.prometheus.pushgateway import Gateway, Spool, push_run
from canary.export.report import point_latest, write_all
from canary.judge.results import RunResult
from tests.support.sample import sample_run

pytestmark = pytest.mark.prometheus


def _run(minutes_ago: int, pid: int) -> RunResult:
    end = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=minutes_ago)
    return sample_run(finished_at=end, run_id=f"{end.strftime('%Y%m%dT%H%M%SZ')}-cpu-default-{pid}")


def _puts(stack: PromStack) -> float:
    """PUT requests the (restarted) Pushgateway accepted, from its own /metrics."""
    text = http_get(f"{stack.pushgateway_url}/metrics").decode()
    total = 0.0
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = sample.labels
            if sample.name == "pushgateway_http_requests_total" and labels.get("method") == "put":
                assert labels.get("code", "").startswith("2"), labels
                total += sample.value
    return total


def test_pushgateway_down_spools_and_the_next_run_pushes_both(prom_stack: PromStack, tmp_path: Path) -> None:
    results = tmp_path / "results"
    first, second = _run(30, 1), _run(0, 2)
    # The second run comes from a config with another scope: both groups must end up in the gateway.
    first_config = config_for("it-spool-a", prom_stack.pushgateway_url, results)
    second_config = config_for("it-spool-b", prom_stack.pushgateway_url, results)
    dirs = {}
    for run in (first, second):
        dirs[run.run_id] = results / run.run_id
        dirs[run.run_id].mkdir(parents=True)

    prom_stack.stop_pushgateway()
    try:
        lines = export_run(first, first_config, dirs[first.run_id], env={}, backoff_s=0.05)
    finally:
        prom_stack.restart_pushgateway()
    assert len(lines) == 1 and "spooled " + first.run_id in lines[0] and "cannot reach" in lines[0], lines
    spooled = Spool(spool_dir(dirs[first.run_id])).pending()
    assert [(e.run_id, e.scope) for e in spooled] == [(first.run_id, "it-spool-a")]
    assert spooled[0].body == s.exposition(first)

    lines = export_run(second, second_config, dirs[second.run_id], env={}, backoff_s=0.05)
    assert lines == [
        f"pushgateway: pushed spooled run {first.run_id} to {JOB}/it-spool-a",
        f"pushgateway: pushed run {second.run_id} to {prom_stack.pushgateway_url} (job={JOB}, scope=it-spool-b)",
    ]
    assert Spool(spool_dir(dirs[second.run_id])).pending() == []
    assert _puts(prom_stack) == 2
    for run, scope in ((first, "it-spool-a"), (second, "it-spool-b")):
        want = s.run_timestamp(run)
        prom_stack.wait_for(
            f'canary_run_timestamp_seconds{{scope="{scope}"}}',
            lambda r, want=want: len(r) == 1 and math.isclose(float(r[0]["value"][1]), want, rel_tol=1e-12),
        )


def test_spooled_runs_of_one_group_are_pushed_oldest_first_then_replaced(prom_stack: PromStack, tmp_path: Path) -> None:
    spool = tmp_path / "spool"
    older, newer, current = _run(90, 11), _run(60, 12), _run(0, 13)
    store = Spool(spool)
    store.add(newer.run_id, JOB, "it-order", s.exposition(newer), "test")
    store.add(older.run_id, JOB, "it-order", s.exposition(older), "test")
    gateway = Gateway(prom_stack.pushgateway_url, timeout_s=5, retries=0)
    lines = push_run(gateway, JOB, "it-order", current.run_id, s.exposition(current), spool)
    assert [line.split(" to ")[0] for line in lines] == [
        f"pushgateway: pushed spooled run {older.run_id}",
        f"pushgateway: pushed spooled run {newer.run_id}",
        f"pushgateway: pushed run {current.run_id}",
    ]
    # PUT replaced the group: the gateway holds the current run only.
    groups = json.loads(http_get(f"{prom_stack.pushgateway_url}/api/v1/metrics"))["data"]
    ours = [g for g in groups if g["labels"].get("scope") == "it-order"]
    assert len(ours) == 1
    timestamp = ours[0]["canary_run_timestamp_seconds"]["metrics"][0]["value"]
    assert math.isclose(float(timestamp), s.run_timestamp(current), rel_tol=1e-12)


def test_a_push_the_gateway_rejects_is_set_aside_not_retried_forever(prom_stack: PromStack, tmp_path: Path) -> None:
    spool = tmp_path / "spool"
    # Pushgateway 1.x refuses samples with timestamps (HTTP 400): retrying cannot help.
    body = b"canary_run_timestamp_seconds 1 1700000000000\n"
    gateway = Gateway(prom_stack.pushgateway_url, timeout_s=5, retries=3, backoff_s=0.05)
    lines = push_run(gateway, JOB, "it-reject", "20261129T000000Z-cpu-default-7", body, spool)
    assert len(lines) == 1 and lines[0].startswith("pushgateway: REJECTED run") and "HTTP 400" in lines[0], lines
    assert Spool(spool).pending() == []
    rejected = json.loads((spool / "rejected" / "20261129T000000Z-cpu-default-7.json").read_text())
    assert "HTTP 400" in rejected["rejected"]
    # The next run goes through normally.
    current = _run(0, 8)
    lines = push_run(gateway, JOB, "it-reject", current.run_id, s.exposition(current), spool)
    assert lines == [
        f"pushgateway: pushed run {current.run_id} to {prom_stack.pushgateway_url} (job={JOB}, scope=it-reject)"
    ]


def test_exporter_serves_the_latest_run_and_follows_latest(prom_stack: PromStack) -> None:
    root = prom_stack.exporter_results
    if not (root / "latest").exists():
        body = http_get(f"{prom_stack.exporter_url}/metrics").decode()
        assert body.startswith("# no results yet")
    for minutes_ago, pid in ((20, 21), (0, 22)):
        run = _run(minutes_ago, pid)
        run_dir = root / run.run_id
        run_dir.mkdir()
        write_all(run, run_dir)
        point_latest(root, run_dir)
        with urllib.request.urlopen(f"{prom_stack.exporter_url}/metrics", timeout=5) as response:
            assert response.headers["Content-Type"].startswith("text/plain; version=0.0.4")
            assert response.read() == s.exposition(run)
        want = s.run_timestamp(run)
        prom_stack.wait_for(
            'canary_run_timestamp_seconds{job="canary-exporter"}',
            lambda r, want=want: len(r) == 1 and math.isclose(float(r[0]["value"][1]), want, rel_tol=1e-12),
        )
    cells = prom_stack.query('count(canary_cell_verdict{job="canary-exporter"})')
    assert float(cells[0]["value"][1]) == len(run.cells)
