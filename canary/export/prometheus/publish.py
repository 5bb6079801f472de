"""Exporters of a run's results: node-exporter textfile, Pushgateway (with a disk spool), and the
HTTP exporter of the latest results (`canary serve-metrics`, canary.export.prometheus.server.serve).

All of them carry the same exposition, built from the one metric schema in canary.export.prometheus.schema.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from canary.config import CanaryConfig
from canary.config.export import PushgatewayConfig
from canary.config.secrets import MissingSecret, from_env
from canary.core.redact import has_userinfo, redact_url
from canary.export.prometheus.pushgateway import SPOOL_SUBDIR, Gateway, Spool, basic_auth, bearer, push_run
from canary.export.prometheus.schema import exposition
from canary.export.prometheus.textfile import textfile_path, write_textfile
from canary.judge.results import RunResult

PUSHGATEWAY_ENV = "PUSHGATEWAY_URL"


def pushgateway_url(config: CanaryConfig, env: Mapping[str, str] | None = None) -> str | None:
    """The Pushgateway URL: the config's, else $PUSHGATEWAY_URL, else None."""
    env = os.environ if env is None else env
    return config.export.pushgateway.url or env.get(PUSHGATEWAY_ENV) or None


def authorization(settings: PushgatewayConfig, env: Mapping[str, str] | None = None) -> str | None:
    """The push's Authorization value from the variables the config names (None: no auth);
    MissingSecret when a named variable is not set."""
    if settings.token_env:
        return bearer(from_env(settings.token_env, "export.pushgateway.token_env", env))
    if settings.username and settings.password_env:
        password = from_env(settings.password_env, "export.pushgateway.password_env", env)
        return basic_auth(settings.username, password)
    return None


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
        try:
            if has_userinfo(url):  # only $PUSHGATEWAY_URL can: the config's url is checked at load
                raise MissingSecret(
                    f"${PUSHGATEWAY_ENV} ({redact_url(url)}) carries credentials; give the URL without them and "
                    "export.pushgateway.username + password_env (or token_env)"
                )
            auth = authorization(settings, env)
        except MissingSecret as exc:  # nothing pushed; the run waits in the spool for a fixed environment
            Spool(spool).add(run.run_id, settings.job, settings.scope, body, str(exc))
            lines.append(f"pushgateway: FAILED, {exc}; spooled {run.run_id} in {spool}")
            return lines
        gateway = Gateway(
            url=url, timeout_s=settings.timeout_s, retries=settings.retries, backoff_s=backoff_s, authorization=auth
        )
        lines += push_run(gateway, settings.job, settings.scope, run.run_id, body, spool)
    else:
        waiting = Spool(spool).pending()
        if waiting:
            lines.append(
                f"pushgateway: not configured (export.pushgateway.url or ${PUSHGATEWAY_ENV}); "
                f"{len(waiting)} spooled runs wait in {spool}"
            )
    return lines
