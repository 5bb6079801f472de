"""Flags, environment variables, metrics and the cache-config fields the canary relies on, read from the
pinned vLLM sdist (each assertion names the file and function to read when it fails)."""

from __future__ import annotations

import ast
import re

import pytest

from canary.paths import REPO_ROOT
from canary.vllm_source.facts import class_fields, cli_flags, env_vars, method, string_constants
from canary.vllm_source.tree import SourceTree

# Flags the canary passes to `vllm serve` (local target argv, vllm-pd chart).
CANARY_FLAGS = (
    "--attention-backend",
    "--block-size",
    "--kv-cache-dtype",
    "--kv-transfer-config",
    "--disable-access-log-for-endpoints",
    "--enforce-eager",
    "--max-model-len",
    "--served-model-name",
    "--tensor-parallel-size",
    "--gpu-memory-utilization",
)
FLAG_USERS = (
    "canary/targets/engine_plan.py",
    "helm/vllm-pd/templates/servers.yaml",
    "helm/vllm-pd/templates/_helpers.tpl",
)


def _canary_text() -> str:
    return "\n".join((REPO_ROOT / p).read_text() for p in FLAG_USERS if (REPO_ROOT / p).is_file())


@pytest.mark.parametrize("flag", CANARY_FLAGS)
def test_flag_exists_in_vllm_serve(sdist: SourceTree, flag: str) -> None:
    assert flag in _canary_text(), f"{flag} is not passed by {FLAG_USERS}: drop it from this list"
    flags = cli_flags(sdist)
    assert flag in flags, (
        f"{flag} is not defined in {sdist.label}: vllm/engine/arg_utils.py EngineArgs.add_cli_args nor "
        "vllm/entrypoints/common/cli_args.py FrontendArgs"
    )


def test_access_log_filter_is_a_frontend_flag(sdist: SourceTree) -> None:
    where = cli_flags(sdist)["--disable-access-log-for-endpoints"]
    assert where.path == "vllm/entrypoints/common/cli_args.py", str(where)
    text = sdist.read("vllm/entrypoints/launchers/utils/server_utils.py")
    assert 'split(",")' in text and "disable_access_log_for_endpoints" in text, (
        "vllm/entrypoints/launchers/utils/server_utils.py no longer splits the endpoints on commas"
    )


def test_an_unknown_flag_is_not_found(sdist: SourceTree) -> None:
    flags = cli_flags(sdist)
    assert "--block-size" in flags and "--kernel-block-size" not in flags and "--attention_backend" not in flags


def test_runner_env_var_exists_and_the_old_backend_var_is_gone(sdist: SourceTree) -> None:
    env = env_vars(sdist)
    assert len(env) > 50, f"vllm/envs.py environment_variables has only {len(env)} entries: reader broken?"
    assert "VLLM_USE_V2_MODEL_RUNNER" in env, "vllm/envs.py environment_variables lacks VLLM_USE_V2_MODEL_RUNNER"
    assert "VLLM_ATTENTION_BACKEND" not in env, (
        f"VLLM_ATTENTION_BACKEND is read again ({env.get('VLLM_ATTENTION_BACKEND')}): the canary passes "
        "--attention-backend only"
    )
    mentions = [p for p in sdist.paths() if "VLLM_ATTENTION_BACKEND" in sdist.read(p)]
    assert mentions == [], f"VLLM_ATTENTION_BACKEND still mentioned in {mentions}"


def test_runner_env_var_decides_the_runner(sdist: SourceTree) -> None:
    found = method(sdist, "vllm.config.vllm", "VllmConfig", "use_v2_model_runner")
    assert found is not None, "vllm/config/vllm.py VllmConfig.use_v2_model_runner is gone"
    func, where = found
    assert "envs.VLLM_USE_V2_MODEL_RUNNER" in ast.unparse(func), f"{where} no longer reads VLLM_USE_V2_MODEL_RUNNER"


# --------------------------------------------------------------------------- metrics

_METRIC = re.compile(r"vllm:[a-z_:]+[a-z]")
_SUFFIXES = ("_sum", "_count", "_bucket", "_total", "_created")


def _metric_names_the_canary_reads() -> set[str]:
    names: set[str] = set()
    for path in (REPO_ROOT / "canary").rglob("*.py"):
        if "vllm_source" in path.parts:
            continue
        for match in _METRIC.finditer(path.read_text()):
            names.add(match.group(0))
    return {n for n in names if n not in ("vllm:foo_total", "vllm:nixl")}


def _base(name: str) -> str:
    for suffix in _SUFFIXES:
        if name.endswith(suffix):
            return name.removesuffix(suffix)
    return name


def test_the_canary_reads_some_vllm_metrics() -> None:
    assert {"vllm:cache_config_info", "vllm:nixl_bytes_transferred_sum"} <= _metric_names_the_canary_reads()


@pytest.mark.parametrize("name", sorted(_metric_names_the_canary_reads()))
def test_metric_is_defined_in_vllm(sdist: SourceTree, name: str) -> None:
    candidates = [name] if name == _base(name) else [name, _base(name)]
    found = [w for c in candidates for w in string_constants(sdist, c)]
    assert found, f"{name}: no metric named {candidates} in {sdist.label} (vllm/v1/metrics/, nixl/stats.py)"


def test_prompt_token_sources_are_vllm_label_values(sdist: SourceTree) -> None:
    text = (REPO_ROOT / "canary" / "checks" / "kv_transfer" / "check.py").read_text()
    sources = set(re.findall(r'source="([a-z_]+)"', text))
    assert sources, "canary/checks/kv_transfer/check.py reads no prompt_tokens_by_source label"
    for source in sorted(sources):
        assert string_constants(sdist, source, "vllm/v1/metrics/"), f"{source}: not a label value in vllm/v1/metrics/"


def test_a_made_up_metric_is_not_found(sdist: SourceTree) -> None:
    assert string_constants(sdist, "vllm:kernel_block_size_info") == []


# --------------------------------------------------------------------------- cache_config_info


def _labels_the_canary_reads() -> set[str]:
    tree = ast.parse((REPO_ROOT / "canary" / "checks" / "startup" / "check.py").read_text())
    return {
        node.args[0].value
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "get"
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id == "labels"
        and node.args
        and isinstance(node.args[0], ast.Constant)
        and isinstance(node.args[0].value, str)
    }


def test_cache_config_info_labels_are_cache_config_fields(sdist: SourceTree) -> None:
    labels = _labels_the_canary_reads()
    assert {"block_size", "effective_attention_block_size"} <= labels, labels
    fields = class_fields(sdist, "vllm.config.cache", "CacheConfig")
    missing = sorted(labels - set(fields))
    assert not missing, f"vllm/config/cache.py CacheConfig has no fields {missing}: vllm:cache_config_info lacks them"


def test_cache_config_info_exports_every_cache_config_field(sdist: SourceTree) -> None:
    info = method(sdist, "vllm.config.cache", "CacheConfig", "metrics_info")
    assert info is not None, "vllm/config/cache.py CacheConfig.metrics_info is gone"
    assert "self.__dict__.items()" in ast.unparse(info[0]), f"{info[1]}: labels are no longer every field"
    loggers = "vllm/v1/metrics/loggers.py"
    where = [w.qualname for w in string_constants(sdist, "vllm:cache_config_info", loggers)]
    assert where == ["PrometheusStatLogger.log_metrics_info"], f"{loggers}: vllm:cache_config_info defined in {where}"
    log_info = method(sdist, "vllm.v1.metrics.loggers", "PrometheusStatLogger", "log_metrics_info")
    assert log_info is not None and "config_obj.metrics_info()" in ast.unparse(log_info[0])
    assert 'self.log_metrics_info("cache_config", self.vllm_config.cache_config)' in sdist.read(loggers).replace(
        "'", '"'
    ), f"{loggers}: cache_config_info is no longer logged from vllm_config.cache_config"


def test_effective_attention_block_size_is_the_logical_block(sdist: SourceTree) -> None:
    """Set from the KV cache manager's block size of the full-attention groups: the LOGICAL block
    (--block-size), never the kernel block. The kernel block shows only in NIXL's log line."""
    found = method(sdist, "vllm.v1.engine.core", "EngineCore", "_initialize_effective_attention_block_size")
    assert found is not None, "vllm/v1/engine/core.py EngineCore._initialize_effective_attention_block_size is gone"
    func, where = found
    source = ast.unparse(func)
    assigned = [
        node
        for node in ast.walk(func)
        if isinstance(node, ast.Assign)
        and any(isinstance(t, ast.Attribute) and t.attr == "effective_attention_block_size" for t in node.targets)
    ]
    assert assigned, f"{where} no longer sets cache_config.effective_attention_block_size"
    for piece in ("'kv_cache_manager'", "single_type_managers", "manager.block_size", "is_full_attention_spec"):
        assert piece in source, f"{where}: {piece} no longer in the derivation:\n{source}"
    assert "kernel" not in source.lower(), f"{where} now mentions kernel blocks:\n{source}"
    init = method(sdist, "vllm.v1.engine.core", "EngineCore", "__init__")
    assert init is not None and "self._initialize_effective_attention_block_size()" in ast.unparse(init[0]), (
        "vllm/v1/engine/core.py EngineCore.__init__ no longer calls _initialize_effective_attention_block_size"
    )
