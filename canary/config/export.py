"""Where results go: Pushgateway, textfile, the run history."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, model_validator

from canary.config.base import Probability, Strict
from canary.config.secrets import EnvName, no_password
from canary.config.urls import DatabaseUrl, HttpUrl


class PushgatewayConfig(Strict):
    """Push results to a Prometheus Pushgateway."""

    url: Annotated[HttpUrl | None, no_password("export.pushgateway.password_env")] = Field(
        None, description="Pushgateway URL (no credentials in it); env PUSHGATEWAY_URL is used when unset."
    )
    username: str | None = Field(None, description="Basic-auth user of the push (with password_env).")
    password_env: EnvName | None = Field(
        None, description="Environment variable holding the basic-auth password (the value never enters the config)."
    )
    token_env: EnvName | None = Field(
        None, description="Environment variable holding a bearer token for the push (instead of basic auth)."
    )
    job: str = Field("vllm-canary", description="Job name of the grouping key.")
    scope: str = Field("default", description="Second grouping-key label, so several canaries coexist.")
    retries: int = Field(3, ge=0, description="Retries before spooling to disk.")
    timeout_s: float = Field(10.0, gt=0, description="Per-request timeout.")

    @model_validator(mode="after")
    def _one_auth(self) -> PushgatewayConfig:
        if (self.username is None) != (self.password_env is None):
            raise ValueError("basic auth needs both username and password_env (the variable holding the password)")
        if self.token_env is not None and self.username is not None:
            raise ValueError("give basic auth (username + password_env) or a bearer token (token_env), not both")
        return self


class HistoryConfig(Strict):
    """The run history (canary/history) and its change points."""

    enabled: bool = Field(True, description="Record every run in the history and look for change points.")
    path: str = Field(
        "history.sqlite", description="SQLite file, relative to results_dir unless absolute (used when url is unset)."
    )
    url: Annotated[DatabaseUrl | None, no_password("export.history.password_env")] = Field(
        None,
        description="postgresql://user@host:port/db (no password in it): one history for several canaries "
        "instead of SQLite.",
    )
    password_env: EnvName | None = Field(
        None,
        description="Environment variable holding the database password (libpq's PGPASSWORD or ~/.pgpass work "
        "too when unset); the value never enters the config.",
    )
    alpha: Probability = Field(0.05, description="Permutation-test level of an E-Divisive change point.")
    permutations: int = Field(499, ge=19, description="Permutations per significance test.")
    min_size: int = Field(3, ge=2, description="Least runs on each side of a change point.")
    min_relative_change: Probability = Field(
        0.1, description="Least change of the mean, relative to the earlier mean, that is reported."
    )
    recent_runs: int = Field(
        5, ge=1, description="A worse change point is exported (and alerts) while it lies within the last N runs."
    )
    window_runs: int = Field(
        60, ge=6, description="Change points are searched in the last N judged runs of a series (bounds the cost)."
    )


class ExportConfig(Strict):
    """Where results go."""

    results_dir: str = Field("results", description="Run directories land in RESULTS_DIR/<run-id>/.")
    pushgateway: PushgatewayConfig = Field(default_factory=PushgatewayConfig, description="Pushgateway.")
    textfile: str | None = Field(None, description="Also write a node-exporter textfile here.")
    junit: bool = Field(True, description="Write junit.xml.")
    html: bool = Field(True, description="Write summary.html.")
    history: HistoryConfig = Field(default_factory=HistoryConfig, description="Run history and change points.")
