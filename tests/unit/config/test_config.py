"""Config loading: good configs load, every bad input exits 2 with file and key path, no traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from canary.config import CanaryConfig
from canary.config.load import load_config
from canary.errors import ConfigError
from canary.paths import CONFIGS_DIR, REPO_ROOT

SHIPPED = ["cpu-default.yaml", "h200-mrv2-pd.yaml", "deepseek-v4.yaml"]


def _base() -> dict[str, object]:
    data = yaml.safe_load((CONFIGS_DIR / "cpu-default.yaml").read_text())
    assert isinstance(data, dict)
    return data


def _write(tmp_path: Path, data: object, name: str = "c.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data) if not isinstance(data, str) else data)
    return path


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_configs_load(name: str) -> None:
    config = load_config(CONFIGS_DIR / name)
    assert isinstance(config, CanaryConfig)
    assert config.name == name.removesuffix(".yaml")


def test_set_overrides_apply_with_yaml_types() -> None:
    config = load_config(
        CONFIGS_DIR / "cpu-default.yaml",
        ["checks.accuracy.limit=7", "matrix.prefill_block_sizes=[32, 64]", "checks.parity.enabled=false"],
    )
    assert config.checks.accuracy.limit == 7
    assert config.matrix.prefill_block_sizes == [32, 64]
    assert config.checks.parity.enabled is False


def _mutate(data: dict[str, object], path: str, value: object) -> dict[str, object]:
    node: object = data
    parts = path.split(".")
    for part in parts[:-1]:
        node = node[int(part)] if isinstance(node, list) else node.setdefault(part, {})  # type: ignore[union-attr]
    if isinstance(node, list):
        node[int(parts[-1])] = value
    else:
        assert isinstance(node, dict)
        node[parts[-1]] = value
    return data


BAD_INPUTS: list[tuple[str, object, str, str]] = [
    # (case, value at path, key path expected in the message, text expected in the message)
    ("matrix.atention_backends", ["CPU_ATTN"], "matrix.atention_backends", "unknown key"),
    ("matrix.prefill_block_sizes", ["abc"], "matrix.prefill_block_sizes.0", "valid integer"),
    ("matrix.prefill_block_sizes", [0], "matrix.prefill_block_sizes.0", "greater than 0"),
    ("matrix.prefill_block_sizes", [], "matrix.prefill_block_sizes", "at least 1"),
    ("matrix.attention_backends", ["FLASH_ATTENTION_9"], "matrix.attention_backends.0", "unknown backend"),
    ("matrix.kv_cache_dtypes", ["fp4"], "matrix.kv_cache_dtypes.0", "unknown KV cache dtype"),
    ("matrix.runners", ["v3"], "matrix.runners.0", "'v1' or 'v2'"),
    ("matrix.topologies", ["pd-mooncake"], "matrix.topologies.0", "aggregated"),
    ("matrix.images", ["nope"], "matrix.images.0", "unknown image"),
    ("platform", "tpu", "platform", "cpu"),
    ("checks.accuracy.confidence", 1.5, "checks.accuracy.confidence", "less than or equal to 1"),
    ("checks.throughput.concurrency", -4, "checks.throughput.concurrency", "greater than 0"),
    ("checks.startup.timeout_s", "soon", "checks.startup.timeout_s", "valid integer"),
    ("target.kind", "endpoint", "target", "target.endpoint is not set"),
    ("name", "Has Spaces", "name", "pattern"),
    ("models", [], "models", "at least 1"),
    ("baseline_image", "missing", "baseline_image", "unknown image"),
    ("matrix.include.0.backend", "NOPE", "matrix.include.0.backend", "unknown backend"),
    ("matrix.expectations.0.failing_checks", ["parity"], "matrix.expectations.0", "applies to expect: check-fail"),
    ("matrix.expectations.0.failing_checks", ["speed"], "matrix.expectations.0.failing_checks.0", "'startup'"),
]


@pytest.mark.parametrize(
    ("path", "value", "key_path", "text"), BAD_INPUTS, ids=[c[0] + "=" + str(c[1]) for c in BAD_INPUTS]
)
def test_bad_config_names_file_and_key_path(tmp_path: Path, path: str, value: object, key_path: str, text: str) -> None:
    config_file = _write(tmp_path, _mutate(_base(), path, value))
    with pytest.raises(ConfigError) as info:
        load_config(config_file)
    error = info.value
    assert error.exit_code == 2
    assert error.source == str(config_file)
    assert error.key_path == key_path, str(error)
    assert text in error.message, str(error)


@pytest.mark.parametrize(
    ("content", "text"),
    [
        ("", "file is empty"),
        ("- just\n- a list\n", "expected a mapping"),
        ("name: [unclosed\n", "YAML syntax error"),
    ],
)
def test_unreadable_configs(tmp_path: Path, content: str, text: str) -> None:
    with pytest.raises(ConfigError, match=text):
        load_config(_write(tmp_path, content))


def test_missing_file() -> None:
    with pytest.raises(ConfigError, match="file not found"):
        load_config("/nonexistent/canary.yaml")


@pytest.mark.parametrize(
    ("override", "text"),
    [
        ("checks.accuracy.limit", "KEY.PATH=VALUE"),
        ("a..b=1", "dotted key path"),
        ("matrix.include.9.backend=X", "index"),
    ],
)
def test_bad_overrides(override: str, text: str) -> None:
    with pytest.raises(ConfigError, match=text):
        load_config(CONFIGS_DIR / "cpu-default.yaml", [override])


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "canary", *args], capture_output=True, text=True, cwd=REPO_ROOT, timeout=120
    )


def test_cli_typo_in_key_exits_2_with_one_line(tmp_path: Path) -> None:
    data = _base()
    matrix = data["matrix"]
    assert isinstance(matrix, dict)
    matrix["blok_sizes"] = [32]
    result = _cli("plan", str(_write(tmp_path, data)))
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "c.yaml: matrix.blok_sizes: unknown key" in lines[0]
    assert "Traceback" not in result.stderr


def test_cli_block_size_abc_exits_2() -> None:
    result = _cli("plan", "configs/cpu-default.yaml", "--set", "matrix.prefill_block_sizes=[abc]")
    assert result.returncode == 2
    assert "canary: error: --set matrix.prefill_block_sizes=[abc]: matrix.prefill_block_sizes.0:" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_trace_workload_is_read_when_the_config_loads(tmp_path: Path) -> None:
    trace = tmp_path / "trace.jsonl"
    trace.write_text('{"timestamp": 0, "input_length": 8, "output_length": 2}\n{"timestamp": 5}\n')
    data = _base()
    workload = {"kind": "trace", "trace_path": str(trace)}
    with pytest.raises(ConfigError) as info:
        load_config(_write(tmp_path, data), [f"checks.throughput.workload={workload}"])
    assert info.value.key_path == "checks.throughput.workload.trace_path"
    assert f"{trace}:2: no 'input_length'" in info.value.message
    trace.write_text('{"timestamp": 0, "input_length": 8, "output_length": 2}\n')
    config = load_config(_write(tmp_path, data), [f"checks.throughput.workload={workload}"])
    assert config.checks.throughput.workload.kind == "trace"
    missing = {"kind": "trace", "trace_path": str(tmp_path / "none.jsonl")}
    with pytest.raises(ConfigError, match="cannot read the trace"):
        load_config(_write(tmp_path, data), [f"checks.throughput.workload={missing}"])
