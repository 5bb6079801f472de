"""Every URL of the config is checked at load (canary.config.urls): `canary plan`, `run --dry-run` and `run`
refuse a URL without an http(s) scheme or host with exit 2 naming the key, before anything starts (a
scheme-less endpoint URL once waited out the whole startup timeout and read as a vLLM startup failure),
and never echo a password. A P/D endpoint without its engines' /metrics is refused the same way."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from canary.config.urls import HTTP_SCHEMES, url_problem
from tests.support.refusal import COMMAND_IDS, COMMANDS, assert_refused, base_config, write_config


def _endpoint(data: dict[str, Any], **settings: str) -> dict[str, Any]:
    data["target"] = {"kind": "endpoint", "endpoint": {"url": "http://127.0.0.1:8000", **settings}}
    return data


@pytest.mark.parametrize("command", COMMANDS, ids=COMMAND_IDS)
def test_an_endpoint_url_without_a_scheme_is_refused_naming_the_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], command: tuple[str, ...]
) -> None:
    config = write_config(tmp_path, _endpoint(base_config(tmp_path), url="127.0.0.1:8000"))
    err = assert_refused(config, "target.endpoint.url", monkeypatch, capsys, command, text="no http:// or https://")
    assert "(got '127.0.0.1:8000')" in err, err


@pytest.mark.parametrize(
    ("key", "settings"),
    [
        ("target.endpoint.metrics_url", {"metrics_url": "localhost:8000/metrics"}),
        ("target.endpoint.decode_metrics_url", {"topology": "pd-nixl", "prefill_metrics_url": "http://p:1/metrics",
                                                "decode_metrics_url": "http://:2/metrics"}),
        ("target.endpoint.url", {"url": "http://127.0.0.1:99999"}),
    ],
    ids=["metrics-url", "decode-metrics-url-no-host", "port-out-of-range"],
)  # fmt: skip
def test_every_endpoint_url_is_checked(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    key: str,
    settings: dict[str, str],
) -> None:
    config = write_config(tmp_path, _endpoint(base_config(tmp_path), **settings))
    assert_refused(config, key, monkeypatch, capsys, ("plan",))


def test_a_pushgateway_url_is_checked_and_its_password_never_printed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    data = base_config(tmp_path)
    data["export"]["pushgateway"] = {"url": "canary:s3cret@pushgateway:9091"}
    err = assert_refused(write_config(tmp_path, data), "export.pushgateway.url", monkeypatch, capsys, ("plan",))
    assert "s3cret" not in err and "(got '***@pushgateway:9091')" in err, err


def test_a_history_url_must_be_postgresql_and_its_password_is_never_printed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    data = base_config(tmp_path)
    data["export"]["history"] = {"url": "mysql://canary:s3cret@db:3306/canary"}
    err = assert_refused(
        write_config(tmp_path, data), "export.history.url", monkeypatch, capsys, ("run", "--dry-run"),
        text="no postgresql:// or postgres:// scheme",
    )  # fmt: skip
    assert "s3cret" not in err and "mysql://***@db:3306/canary" in err, err


@pytest.mark.parametrize("command", COMMANDS, ids=COMMAND_IDS)
def test_a_pd_endpoint_without_its_engines_metrics_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], command: tuple[str, ...]
) -> None:
    """Behind a router only the engines' /metrics say what the pair runs: without them startup would verify
    nothing and pass; refused at load instead (exit 2), naming what is missing."""
    data = _endpoint(base_config(tmp_path), topology="pd-nixl", decode_metrics_url="http://127.0.0.1:8002/metrics")
    assert_refused(
        write_config(tmp_path, data), "target.endpoint", monkeypatch, capsys, command,
        text="topology pd-nixl needs prefill_metrics_url",
    )  # fmt: skip


def test_url_problem_accepts_what_a_server_answers_on() -> None:
    for good in ("http://127.0.0.1:8000", "https://router.example/v1", "http://[::1]:8000/metrics"):
        assert url_problem(good, HTTP_SCHEMES) is None, good
    assert url_problem("localhost:8000", HTTP_SCHEMES) == (
        "no http:// or https:// scheme (it reads 'localhost' as one), e.g. http://127.0.0.1:8000"
    )
