"""The engine environment is built from scratch: nothing leaks in from the caller's environment."""

from __future__ import annotations

from pathlib import Path

import pytest

from canary.config.load import load_config
from canary.paths import CONFIGS_DIR
from canary.targets.engine_env import (
    ENGINE_SITE_DIR,
    NIXL_PROGRESS_DELAY_ENV,
    EngineRole,
    cpu_binds,
    engine_env,
    is_loopback,
    router_env,
)

PYTHON = Path("/opt/engine/bin/python")


def _config(*overrides: str):  # type: ignore[no-untyped-def]
    return load_config(CONFIGS_DIR / "cpu-default.yaml", list(overrides))


def test_nothing_leaks_from_the_callers_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CANARY_JUNK_VAR", "leaked")
    monkeypatch.setenv("VLLM_ATTENTION_BACKEND", "FLASHINFER")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "7")
    monkeypatch.setenv("PYTHONPATH", "/somewhere/else")
    monkeypatch.setenv("HOME", "/caller/home")
    env = engine_env(_config(), EngineRole(runner="v1"), engine_python=PYTHON)
    assert "CANARY_JUNK_VAR" not in env
    assert "VLLM_ATTENTION_BACKEND" not in env
    assert "CUDA_VISIBLE_DEVICES" not in env
    assert env["PYTHONPATH"] == str(ENGINE_SITE_DIR)
    assert env["HOME"] != "/caller/home"
    assert not any(value == "leaked" for value in env.values())
    router = router_env(_config(), bin_dir=None)
    assert "CANARY_JUNK_VAR" not in router
    assert set(router) == {
        "PATH",
        "HOME",
        "LANG",
        "LC_ALL",
        "PYTHONUNBUFFERED",
        "XDG_CACHE_HOME",
        "VLLM_HOST_IP",
        "UCX_NET_DEVICES",
        "VLLM_NO_USAGE_STATS",
        "DO_NOT_TRACK",
        "RUST_LOG",
    }


def test_loopback_offline_and_cpu_settings() -> None:
    env = engine_env(_config(), EngineRole(runner="v1"), engine_python=PYTHON)
    assert env["VLLM_HOST_IP"] == "127.0.0.1"
    assert env["UCX_NET_DEVICES"] == "lo"
    for key in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "VLLM_NO_USAGE_STATS"):
        assert env[key] == "1"
    assert env["VLLM_TARGET_DEVICE"] == "cpu"
    assert env["VLLM_CPU_KVCACHE_SPACE"] == "1"
    assert env["VLLM_ENABLE_V1_MULTIPROCESSING"] == "0"
    assert env["VLLM_USE_V2_MODEL_RUNNER"] == "0"
    assert env["VLLM_CACHE_ROOT"].endswith(".cache/vllm")
    assert env["PATH"].split(":")[0] == "/opt/engine/bin"
    assert "VLLM_NIXL_SIDE_CHANNEL_PORT" not in env
    assert "VLLM_CPU_OMP_THREADS_BIND" not in env
    assert NIXL_PROGRESS_DELAY_ENV not in env  # no NIXL in an aggregated server


def test_pd_role_gets_its_side_channel_and_core() -> None:
    env = engine_env(
        _config(), EngineRole(runner="v2", nixl_side_channel_port=5601, cpu_bind="1"), engine_python=PYTHON
    )
    assert env["VLLM_NIXL_SIDE_CHANNEL_HOST"] == "127.0.0.1"
    assert env["VLLM_NIXL_SIDE_CHANNEL_PORT"] == "5601"
    assert env["VLLM_CPU_OMP_THREADS_BIND"] == "1"
    assert env["VLLM_USE_V2_MODEL_RUNNER"] == "1"
    assert env[NIXL_PROGRESS_DELAY_ENV] == "1000"
    off = engine_env(
        _config("target.local.nixl_progress_delay_us=null"),
        EngineRole(runner="v1", nixl_side_channel_port=5601),
        engine_python=PYTHON,
    )
    assert NIXL_PROGRESS_DELAY_ENV not in off


def test_config_env_overrides_and_empty_value_removes() -> None:
    config = _config(
        "target.local.env={VLLM_USE_V2_MODEL_RUNNER: '', VLLM_LOGGING_LEVEL: DEBUG, VLLM_CPU_KVCACHE_SPACE: '4'}"
    )
    env = engine_env(config, EngineRole(runner="v2"), engine_python=PYTHON)
    assert "VLLM_USE_V2_MODEL_RUNNER" not in env
    assert env["VLLM_LOGGING_LEVEL"] == "DEBUG"
    assert env["VLLM_CPU_KVCACHE_SPACE"] == "4"


def test_gpu_platform_has_no_cpu_settings() -> None:
    config = _config("platform=sm90", "matrix.attention_backends=[FLASH_ATTN]", "matrix.include=[]")
    env = engine_env(config, EngineRole(runner="v2", nixl_side_channel_port=5600), engine_python=PYTHON)
    assert not any(key.startswith("VLLM_CPU_") for key in env)
    assert "VLLM_TARGET_DEVICE" not in env
    assert "PYTHONPATH" not in env
    assert NIXL_PROGRESS_DELAY_ENV not in env  # GPU engines run NIXL as shipped
    assert env["VLLM_USE_V2_MODEL_RUNNER"] == "1"


def test_non_loopback_host_sets_only_the_host_ip() -> None:
    env = engine_env(_config("target.local.host=10.1.2.3"), EngineRole(runner="v1"), engine_python=PYTHON)
    assert env["VLLM_HOST_IP"] == "10.1.2.3"
    assert "UCX_NET_DEVICES" not in env
    assert is_loopback("localhost") and is_loopback("127.0.0.2") and not is_loopback("10.0.0.1")


@pytest.mark.parametrize(
    ("cores", "engines", "expected"),
    [(2, 2, ["0", "1"]), (8, 2, ["0-3", "4-7"]), (2, 1, [None]), (1, 2, [None, None]), (5, 2, ["0-1", "2-3"])],
)
def test_cpu_binds(cores: int, engines: int, expected: list[str | None]) -> None:
    assert cpu_binds(cores, engines) == expected


def test_overlay_goes_first_on_pythonpath() -> None:
    env = engine_env(_config(), EngineRole(runner="v1"), engine_python=PYTHON, python_path=[Path("/overlays/abc")])
    assert env["PYTHONPATH"] == f"/overlays/abc:{ENGINE_SITE_DIR}"
