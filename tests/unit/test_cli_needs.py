"""`canary needs CONFIG`: what `make canary` installs for a config, decided from the config alone."""

from __future__ import annotations

import re

import pytest

from canary.cli import main, run_needs
from canary.config.load import load_config
from canary.paths import REPO_ROOT


def test_the_embedded_default_needs_the_engine_and_the_model_only(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["needs", str(REPO_ROOT / "configs/cpu-default.yaml")]) == 0
    assert capsys.readouterr().out.split() == ["engine", "model"]


def test_a_pushgateway_url_in_the_config_or_the_env_adds_pushgateway() -> None:
    config_path = REPO_ROOT / "configs/cpu-default.yaml"
    pushed = load_config(config_path, ["export.pushgateway.url=http://127.0.0.1:9091"])
    assert run_needs(pushed, {}) == ["engine", "model", "pushgateway"]
    assert "pushgateway" in run_needs(load_config(config_path, []), {"PUSHGATEWAY_URL": "http://127.0.0.1:9091"})


def test_an_endpoint_target_needs_nothing_installed() -> None:
    config = load_config(
        REPO_ROOT / "configs/cpu-default.yaml",
        ["target.kind=endpoint", "target.endpoint.url=http://127.0.0.1:8000"],
    )
    assert run_needs(config, {}) == []


def test_a_missing_config_exits_2_naming_it(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["needs", "/nonexistent/canary.yaml"]) == 2
    assert "/nonexistent/canary.yaml" in capsys.readouterr().err


def test_a_config_serving_a_family_model_needs_the_family_models_too(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["needs", str(REPO_ROOT / "configs/cpu-families.yaml")]) == 0
    assert capsys.readouterr().out.split() == ["engine", "model", "families"]


def test_the_makefiles_word_for_the_defaults_needs_is_canary_needs() -> None:
    """`make canary` installs the default's needs side by side before the controller venv exists, from the
    Makefile's DEFAULT_NEEDS: it must say what `canary needs` says of DEFAULT_CONFIG (no Pushgateway set)."""
    makefile = (REPO_ROOT / "Makefile").read_text(encoding="utf-8")
    values = dict(re.findall(r"^(DEFAULT_CONFIG|DEFAULT_NEEDS) := (.*)$", makefile, re.MULTILINE))
    assert values["DEFAULT_CONFIG"] == "configs/cpu-default.yaml"
    assert values["DEFAULT_NEEDS"].split() == run_needs(load_config(REPO_ROOT / values["DEFAULT_CONFIG"], []), {})
