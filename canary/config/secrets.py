"""Secrets in the config: never their values, only the names of the environment variables that hold them.

A config is copied into the helm/canary ConfigMap and into every run's `config.json`, and `--dry-run`
prints what it starts: a password, token or key written into it would land in all three. So the
config names an environment variable instead (`password_env`, `token_env`; on Kubernetes the
variable comes from a Secret: helm/canary `secrets`), and the loader refuses a URL that embeds a
password and a secret-looking engine variable with a literal value, saying which key to use.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Annotated
from urllib.parse import parse_qsl, urlsplit

from pydantic import AfterValidator, Field

from canary.errors import CanaryError

ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

EnvName = Annotated[str, Field(pattern=ENV_NAME.pattern, description="An environment variable's name.")]
"""The name of an environment variable (the value stays out of the config)."""


class MissingSecret(CanaryError):
    """An environment variable the config names for a secret is not set."""

    exit_code = 2


def url_password_problem(value: str, key: str) -> str | None:
    """Why a URL must not be in the config (it embeds a password); None when it does not."""
    parts = urlsplit(value)
    in_query = any(name.lower() == "password" for name, _ in parse_qsl(parts.query, keep_blank_values=True))
    if parts.password is None and not in_query:
        return None
    return (
        f"embeds a password: the config is copied into a ConfigMap, every run's config.json and the logs; "
        f"put the password in an environment variable and name it in {key} (on Kubernetes: from a Secret, "
        "helm/canary `secrets`)"
    )


def no_password(key: str) -> AfterValidator:
    """A validator refusing a URL with a password (in its user information or its query)."""

    def check(value: str | None) -> str | None:
        if value is not None and (problem := url_password_problem(value, key)) is not None:
            raise ValueError(problem)
        return value

    return AfterValidator(check)


def from_env(name: str, key: str, env: Mapping[str, str] | None = None) -> str:
    """The value of the variable `name` that config key `key` names; MissingSecret when unset or empty."""
    value = (os.environ if env is None else env).get(name, "")
    if not value:
        raise MissingSecret(f"{key} names the environment variable {name}, which is not set (or empty)")
    return value
