"""Secrets never enter the config: a URL with a password, or a secret-looking engine variable with a
value, is refused at load (exit 2, naming the key and the `*_env` key to use instead, never echoing
the value); the config names environment variables, so neither config.json nor `--dry-run` can hold
a secret, and `--dry-run` redacts what it prints of the environment."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from canary import cli
from canary.config.load import validate_config
from canary.config.secrets import MissingSecret
from canary.core.redact import looks_secret, redact_env, redact_url
from tests.support.refusal import COMMAND_IDS, COMMANDS, assert_refused, base_config, write_config

SECRET = "s3cret-Value-42"


@pytest.mark.parametrize("command", COMMANDS, ids=COMMAND_IDS)
@pytest.mark.parametrize(
    ("key", "section", "settings", "use"),
    [
        ("export.history.url", "history", {"url": f"postgresql://canary:{SECRET}@db:5432/canary"}, "password_env"),
        ("export.history.url", "history", {"url": f"postgresql://db/canary?password={SECRET}"}, "password_env"),
        ("export.pushgateway.url", "pushgateway", {"url": f"http://canary:{SECRET}@pushgateway:9091"}, "password_env"),
    ],
    ids=["dsn-userinfo", "dsn-query", "pushgateway"],
)
def test_a_url_with_a_password_is_refused_without_echoing_it(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    command: tuple[str, ...],
    key: str,
    section: str,
    settings: dict[str, str],
    use: str,
) -> None:
    data = base_config(tmp_path)
    data["export"][section] = settings
    err = assert_refused(write_config(tmp_path, data), key, monkeypatch, capsys, command, text="embeds a password")
    assert f"export.{section}.{use}" in err and SECRET not in err, err


@pytest.mark.parametrize(
    "env",
    [{"HF_TOKEN": SECRET}, {"OPENAI_API_KEY": SECRET}, {"PROXY_URL": f"http://me:{SECRET}@proxy:3128"}],
    ids=["hf-token", "api-key", "url-with-password"],
)
def test_a_secret_engine_variable_with_a_value_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], env: dict[str, str]
) -> None:
    data = base_config(tmp_path)
    data["target"]["local"] = {**data["target"].get("local", {}), "env": env}
    err = assert_refused(write_config(tmp_path, data), "target.local.env", monkeypatch, capsys, ("plan",))
    assert "target.local.env_from" in err and SECRET not in err, err


def _auth(**settings: Any) -> dict[str, Any]:
    return {"url": "http://127.0.0.1:9091", **settings}


@pytest.mark.parametrize(
    ("settings", "text"),
    [
        (_auth(username="canary"), "needs both username and password_env"),
        (_auth(password_env="PW"), "needs both username and password_env"),
        (_auth(username="c", password_env="PW", token_env="TOK"), "not both"),
        (_auth(token_env="not a name"), "String should match pattern"),
    ],
    ids=["user-only", "password-only", "both-schemes", "bad-env-name"],
)
def test_pushgateway_auth_settings_are_checked(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    settings: dict[str, Any],
    text: str,
) -> None:
    data = base_config(tmp_path)
    data["export"]["pushgateway"] = settings
    key = "export.pushgateway.token_env" if "pattern" in text else "export.pushgateway"
    err = assert_refused(write_config(tmp_path, data), key, monkeypatch, capsys, ("plan",))
    assert text in err, err


def test_config_json_and_the_dry_run_hold_names_not_secrets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The run's config.json is the loaded config (model_dump_json): it holds the variables' names
    only. The dry run prints the engines' environment with env_from's values redacted."""
    data = base_config(tmp_path)
    data["export"]["history"] = {"url": "postgresql://canary@db:5432/canary", "password_env": "CANARY_DB_PW"}
    data["export"]["pushgateway"] = {"url": "http://127.0.0.1:9091", "token_env": "CANARY_PUSH_TOKEN"}
    data["target"]["local"] = {**data["target"].get("local", {}), "env_from": {"HF_TOKEN": "CANARY_HF"}}
    for name in ("CANARY_DB_PW", "CANARY_PUSH_TOKEN", "CANARY_HF"):
        monkeypatch.setenv(name, f"{SECRET}-{name}")
    config = validate_config(data, "secrets.yaml")
    dumped = config.model_dump_json(indent=2)
    assert "CANARY_DB_PW" in dumped and "CANARY_HF" in dumped and SECRET not in dumped
    capsys.readouterr()
    code = cli.main(["run", "--dry-run", str(write_config(tmp_path, data))])  # starts nothing
    out, err = capsys.readouterr()
    assert code == 0, err
    assert SECRET not in out and SECRET not in err
    assert json.loads(out)["cells"] and '"HF_TOKEN": "***"' in out, out[:2000]


def test_an_unset_env_from_variable_is_named(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from canary.targets.engine_env import EngineRole, engine_env

    data = base_config(tmp_path)
    data["target"]["local"] = {**data["target"].get("local", {}), "env_from": {"HF_TOKEN": "CANARY_HF_UNSET"}}
    config = validate_config(data, "secrets.yaml")
    monkeypatch.delenv("CANARY_HF_UNSET", raising=False)
    role = EngineRole(runner="v1")
    with pytest.raises(MissingSecret, match=r"target.local.env_from.HF_TOKEN names .* CANARY_HF_UNSET"):
        engine_env(config, role, engine_python=Path("/nonexistent/bin/python"))
    monkeypatch.setenv("CANARY_HF_UNSET", SECRET)
    assert engine_env(config, role, engine_python=Path("/nonexistent/bin/python"))["HF_TOKEN"] == SECRET
    assert MissingSecret.exit_code == cli.EXIT_USAGE


def test_redaction_rules() -> None:
    assert [n for n in ("HF_TOKEN", "PGPASSWORD", "AWS_SECRET_ACCESS_KEY", "MY_KEY", "VLLM_CPU_KVCACHE_SPACE")
            if looks_secret(n)] == ["HF_TOKEN", "PGPASSWORD", "AWS_SECRET_ACCESS_KEY", "MY_KEY"]  # fmt: skip
    assert redact_env({"A": "http://u:p@h/x", "HF_TOKEN": "t", "B": "1", "C": "2"}, also=["C"]) == {
        "A": "http://***@h/x",
        "HF_TOKEN": "***",
        "B": "1",
        "C": "***",
    }
    assert (
        redact_url("postgresql://h/db?sslmode=require&password=x") == "postgresql://h/db?sslmode=require&password=***"
    )
