"""Exporters of a run's results: node-exporter textfile, Pushgateway (with a disk spool), and the
HTTP exporter of the latest results (`canary serve-metrics`, canary.export.prometheus.server.serve).

All of them carry the same exposition, built from the one metric schema in canary.export.prometheus.schema.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from canary.config import CanaryConfig
from canary.export.prometheus.pushgateway import SPOOL_SUBDIR, Gateway, Spool, push_run
from canary.export.prometheus.schema import exposition
from canary.export.prometheus.textfile import textfile_path, write_textfile
from canary.judge.results import RunResult

PUSHGATEWAY_ENV = "PUSHGATEWAY_URL"


def pushgateway_url(config: CanaryConfig, env: Mapping[str, str] | None = None) -> str | None:
    """The Pushgateway URL: the config's, else $PUSHGATEWAY_URL, else None."""
    env = os.environ if env is None else env
    return config.export.pushgateway.url or env.get(PUSHGATEWAY_ENV) or None


def spool_dir(run_dir: Path) -> Path:
    """The spool of the results root the run dir lives in."""
    return run_dir.parent / SPOOL_SUBDIR


def export_run(
    run: RunResult,
    config: CanaryConfig,
    run_dir: Path,
    *,
    env: Mapping[str, str] | None = None,
    backoff_s: float = 1.0,
) -> list[str]:
    """Export a finished run everywhere the config says; returns one status line per action.

    Never raises for an unreachable Pushgateway (the run is spooled) or an unwritable textfile
    (the line says FAILED): the results on disk are already complete."""
    lines: list[str] = []
    body = exposition(run)
    if config.export.textfile:
        target = textfile_path(config.export.textfile)
        try:
            write_textfile(run, target)
            lines.append(f"textfile: wrote {target}")
        except OSError as exc:
            lines.append(f"textfile: FAILED to write {target}: {exc}")
    url = pushgateway_url(config, env)
    spool = spool_dir(run_dir)
    settings = config.export.pushgateway
    if url:
        gateway = Gateway(url=url, timeout_s=settings.timeout_s, retries=settings.retries, backoff_s=backoff_s)
        lines += push_run(gateway, settings.job, settings.scope, run.run_id, body, spool)
    else:
        waiting = Spool(spool).pending()
        if waiting:
            lines.append(
                f"pushgateway: not configured (export.pushgateway.url or ${PUSHGATEWAY_ENV}); "
                f"{len(waiting)} spooled runs wait in {spool}"
            )
    return lines
