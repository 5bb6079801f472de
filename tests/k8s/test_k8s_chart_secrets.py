"""Secrets on the charts (real `helm template`): the controller's credentials come from a Secret
(secretKeyRef) and the config names the variables; a config or Pushgateway URL carrying a password is
refused by the chart, so no rendered ConfigMap or pod spec holds one; vllm-pd reads the HF token
from its Secret as a file, never as a value."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from k8s_helpers import CHARTS, by_kind, pod_specs, render, run_helm

from canary.config.load import validate_config

WAVES_CONFIG = Path(__file__).resolve().parents[2] / "configs" / "deepseek-v4.yaml"
SECRET = "s3cret-Value-42"


@pytest.fixture(scope="module")
def helm_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("helm-home")


def config_file(tmp_path: Path, export: dict[str, Any]) -> Path:
    data = yaml.safe_load(WAVES_CONFIG.read_text())
    data.setdefault("export", {}).update(export)
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def helm_error(helm_home: Path, *args: str) -> str:
    result = run_helm(["template", "c", str(CHARTS / "canary"), "--namespace", "ctl", *args], helm_home)
    assert result.returncode != 0, result.stdout[:2000]
    return result.stderr


def test_credentials_come_from_a_secret_and_the_config_names_them(helm_home: Path, tmp_path: Path) -> None:
    export = {
        "history": {"url": "postgresql://canary@db:5432/canary", "password_env": "CANARY_HISTORY_PASSWORD"},
        "pushgateway": {"username": "canary", "password_env": "CANARY_PUSH_PASSWORD"},
    }
    config = config_file(tmp_path, export)
    validate_config(yaml.safe_load(config.read_text()), str(config))  # what the controller will load
    docs = render(
        "canary",
        helm_home,
        namespace="ctl",
        extra=[
            "--set-file",
            f"config={config}",
            "--set",
            "secrets.existingSecret=canary-secrets",
            "--set",
            "secrets.env.CANARY_HISTORY_PASSWORD=history-password",
            "--set",
            "secrets.env.CANARY_PUSH_PASSWORD=pushgateway-password",
            "--set",
            "pushgateway.url=http://pushgateway.monitoring:9091",
        ],
    )
    for name, _, spec in pod_specs(docs):
        env = {e["name"]: e for e in spec["containers"][0]["env"]}
        for variable, key in (
            ("CANARY_HISTORY_PASSWORD", "history-password"),
            ("CANARY_PUSH_PASSWORD", "pushgateway-password"),
        ):
            assert env[variable] == {
                "name": variable,
                "valueFrom": {"secretKeyRef": {"name": "canary-secrets", "key": key}},
            }, name
    for configmap in by_kind(docs, "ConfigMap"):
        for text in configmap["data"].values():
            assert "password_env" in text or "@" not in text.split("postgresql://")[-1].split("/")[0]


@pytest.mark.parametrize(
    "url",
    [f"postgresql://canary:{SECRET}@db:5432/canary", f"postgresql://db:5432/canary?sslmode=require&password={SECRET}"],
    ids=["userinfo", "query"],
)
def test_a_config_with_a_password_never_reaches_the_configmap(helm_home: Path, tmp_path: Path, url: str) -> None:
    config = config_file(tmp_path, {"history": {"url": url}})
    err = helm_error(helm_home, "--set-file", f"config={config}")
    assert "config holds a URL with a password" in err and SECRET not in err, err


def test_the_pushgateway_url_carries_no_credentials_and_secrets_need_their_secret(
    helm_home: Path, tmp_path: Path
) -> None:
    config = config_file(tmp_path, {})
    err = helm_error(
        helm_home, "--set-file", f"config={config}", "--set", f"pushgateway.url=http://canary:{SECRET}@pg:9091"
    )
    assert "pushgateway.url carries credentials" in err and SECRET not in err, err
    err = helm_error(helm_home, "--set-file", f"config={config}", "--set", "secrets.env.CANARY_X=x")
    assert "secrets.existingSecret" in err, err


def test_vllm_pd_reads_the_hf_token_from_its_secret_as_a_file(helm_home: Path) -> None:
    docs = render("vllm-pd", helm_home, [CHARTS / "vllm-pd" / "ci" / "pd-and-aggregated-values.yaml"])
    for name, _, spec in pod_specs(docs):
        if name.startswith("Deployment/") and "router" not in name:
            env = {e["name"]: e for e in spec["containers"][0]["env"]}
            assert "HF_TOKEN" not in env, name  # no value in the pod spec
            assert env["HF_TOKEN_PATH"]["value"] == "/var/run/secrets/huggingface/token"
            volumes = {v["name"]: v for v in spec["volumes"]}
            assert volumes["hf-token"]["secret"]["secretName"] == "hf-token"
