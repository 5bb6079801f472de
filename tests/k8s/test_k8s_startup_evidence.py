"""End to end on the Kubernetes path: startup evidence of long-lived pods (issue 11, point 2).

The runner drives the Kubernetes target (against kmock, the HTTP Kubernetes API emulator, which
serves pod logs honouring tailLines and limitBytes as the API server does) and the startup check.
The emulated engine pods serve a startup log built from vLLM 0.33's own format strings and
messages, read from the pinned sdist at test time (not hand-written), followed by many thousands
of uvicorn access lines ("GET /metrics" every scrape), as a pair that has run for hours logs. The
engines' /health, /v1/models and /metrics (with `vllm:cache_config_info`, its label names read from
vLLM 0.33's CacheConfig) are served on loopback.

Shown: a v1 cell, a v2 cell and a FLASHINFER block-128 P/D cell (logical block 128, kernel block
64, as vLLM 0.33's NIXL worker logs it) all get their true verdict (pass); reading only the log
tail, as the target did before, misjudges the v2 cell (its "Using V2 Model Runner" line has
scrolled out of the last 5,000 lines). Also: each cell's startup record is kept as
logs/<role>.startup.log, and its NIXL placement and transport are in the cell's evidence.
"""

from __future__ import annotations

import ast
import json
import logging
import os
import tarfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml
from k8s_helpers import REPO
from kmock_cluster import KmockCluster, kmock_cluster

from canary.checks.base import CheckContext
from canary.checks.startup.check import startup_check
from canary.config import CanaryConfig
from canary.config.load import validate_config
from canary.judge.results import CellResult
from canary.plan.cell import Cell
from canary.plan.matrix import plan
from canary.run.cells import execute
from canary.targets.kubernetes.target import STARTUP_COMPLETE, KubernetesTarget

NAMESPACE = "gpu"
RELEASE = "vllm-pd"
NODE = "gpu-node-7"
ENGINE_PROCESS = "EngineCore_DP0"  # the engine core's multiprocessing name (vllm/utils/system_utils.py decorate_logs)
UCX_TLS = "cuda_copy,cuda_ipc,rc"
ACCESS_LINES = 20_000  # 4x the target's 5,000-line tail: about 2 1/2 days of 10 s probes + 15 s scrapes
T0 = datetime(2026, 11, 29, 10, 0, 0, tzinfo=UTC)

# The sdist files the log lines and metric labels come from (paths inside vllm-0.33.0/).
LOGGER = "vllm/logger.py"  # _FORMAT, _DATE_FORMAT: vLLM's log line format
UVICORN_LOGGING = "vllm/logging_utils/uvicorn_logging.py"  # the access-line format vLLM gives uvicorn
CUDA_PLATFORM = "vllm/platforms/cuda.py"  # "Using %s attention backend out of potential backends: %s."
GPU_WORKER = "vllm/v1/worker/gpu_worker.py"  # "Using V2 Model Runner"
NIXL_WORKER = "vllm/distributed/kv_transfer/kv_connector/v1/nixl/base_worker.py"  # logical vs kernel block
KV_CACHE_UTILS = "vllm/v1/core/kv_cache_utils.py"  # "%s KV cache size: %s tokens, ..."
ENGINE_CORE = "vllm/v1/engine/core.py"  # "init engine (profile, create kv cache, warmup model) took ..."
CACHE_CONFIG = "vllm/config/cache.py"  # CacheConfig: the labels of vllm:cache_config_info (metrics_info)
FRONTEND_ARGS = "vllm/entrypoints/common/cli_args.py"  # FrontendArgs.disable_access_log_for_endpoints
SERVER_UTILS = "vllm/entrypoints/launchers/utils/server_utils.py"  # how that flag's value is split
SDIST_FILES = (
    LOGGER,
    UVICORN_LOGGING,
    CUDA_PLATFORM,
    GPU_WORKER,
    NIXL_WORKER,
    KV_CACHE_UTILS,
    ENGINE_CORE,
    CACHE_CONFIG,
    FRONTEND_ARGS,
    SERVER_UTILS,
)
CHART_HELPERS = REPO / "helm" / "vllm-pd" / "templates" / "_helpers.tpl"
CHART_VALUES = REPO / "helm" / "vllm-pd" / "values.yaml"

CONFIG: dict[str, Any] = {
    "version": 1,
    "name": "startup-evidence",
    "platform": "sm90",
    "models": [{"name": "qwen3-0-6b", "source": "Qwen/Qwen3-0.6B", "max_model_len": 4096}],
    "images": {"baseline": {"ref": "vllm/vllm-openai:v0.33.0"}},
    "matrix": {
        "attention_backends": ["FLASH_ATTN", "FLASHINFER"],
        "prefill_block_sizes": [16, 128],
        "runners": ["v1", "v2"],
        "topologies": ["pd-nixl"],
    },
    "checks": {name: {"enabled": False} for name in ("parity", "accuracy", "throughput", "kv_transfer")},
    "target": {
        "kind": "kubernetes",
        "kubernetes": {
            "namespace": NAMESPACE,
            "release": RELEASE,
            "ready_timeout_s": 30,
            "nixl": {"placement": "same-node", "ucx_tls": UCX_TLS},
        },
    },
}


# --------------------------------------------------------------------------- vLLM 0.33 from the sdist


@dataclass(frozen=True)
class Vllm033:
    """Format strings, messages and metric labels of vLLM 0.33.0, read from its sdist."""

    line_format: str
    date_format: str
    access_format: str
    backend_line: str
    v2_runner_line: str
    kernel_block_line: str
    kv_cache_line: str
    init_engine_line: str
    cache_config_fields: tuple[str, ...]
    frontend_args: dict[str, str]
    server_utils: str


def _literal(source: str, needle: str, where: str) -> str:
    """The one string literal of a module that contains `needle` (ast joins implicit concatenation)."""
    found = {
        node.value
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and needle in node.value
    }
    assert len(found) == 1, f"{where}: expected one string literal containing {needle!r}, found {sorted(found)}"
    return found.pop()


def _assigned(source: str, name: str, where: str) -> ast.expr:
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            return node.value
    raise AssertionError(f"{where}: no assignment to {name}")


def _line_format(source: str) -> str:
    """vLLM's _FORMAT, an f-string whose only placeholder is VLLM_LOGGING_PREFIX (default "")."""
    value = _assigned(source, "_FORMAT", LOGGER)
    assert isinstance(value, ast.JoinedStr), f"{LOGGER}: _FORMAT is no longer an f-string"
    parts: list[str] = []
    for part in value.values:
        if isinstance(part, ast.Constant):
            parts.append(str(part.value))
        else:
            assert "VLLM_LOGGING_PREFIX" in ast.unparse(part), f"{LOGGER}: unexpected _FORMAT field {ast.unparse(part)}"
    return "".join(parts)


def _class_fields(source: str, name: str) -> dict[str, str]:
    """A dataclass's fields and their annotations (as source text)."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ClassDef) and node.name == name:
            return {
                item.target.id: ast.unparse(item.annotation)
                for item in node.body
                if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name)
            }
    raise AssertionError(f"no class {name}")


def _cache_config_fields(source: str) -> tuple[str, ...]:
    """CacheConfig's fields: metrics_info() exports every one of them as a label."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ClassDef) and node.name == "CacheConfig":
            return tuple(
                item.target.id
                for item in node.body
                if isinstance(item, ast.AnnAssign)
                and isinstance(item.target, ast.Name)
                and "ClassVar" not in ast.unparse(item.annotation)
            )
    raise AssertionError(f"{CACHE_CONFIG}: no class CacheConfig")


@pytest.fixture(scope="module")
def vllm033() -> Vllm033:
    sdist = Path(os.environ.get("VLLM_SDIST", str(REPO / ".cache" / "sdist" / "vllm-0.33.0.tar.gz")))
    if not sdist.is_file():
        pytest.fail(f"{sdist} is missing: run `make k8s-tools` (or set VLLM_SDIST)")
    sources: dict[str, str] = {}
    with tarfile.open(sdist, "r:gz") as tar:
        for path in SDIST_FILES:
            member = tar.extractfile(f"vllm-0.33.0/{path}")
            assert member is not None, f"{path} is not a file in {sdist}"
            sources[path] = member.read().decode("utf-8")
    date_format = _assigned(sources[LOGGER], "_DATE_FORMAT", LOGGER)
    assert isinstance(date_format, ast.Constant) and isinstance(date_format.value, str)
    fields = _cache_config_fields(sources[CACHE_CONFIG])
    assert {"block_size", "cache_dtype", "effective_attention_block_size", "num_gpu_blocks"} <= set(fields)
    return Vllm033(
        line_format=_line_format(sources[LOGGER]),
        date_format=date_format.value,
        access_format=_literal(sources[UVICORN_LOGGING], "%(request_line)s", UVICORN_LOGGING),
        backend_line=_literal(sources[CUDA_PLATFORM], "attention backend out of potential backends", CUDA_PLATFORM),
        v2_runner_line=_literal(sources[GPU_WORKER], "Using V2 Model Runner", GPU_WORKER),
        kernel_block_line=_literal(sources[NIXL_WORKER], "does not match physical kernel block size", NIXL_WORKER),
        kv_cache_line=_literal(sources[KV_CACHE_UTILS], "KV cache size: %s tokens", KV_CACHE_UTILS),
        init_engine_line=_literal(sources[ENGINE_CORE], "warmup model) took %.2f s (compilation: %.2f s)", ENGINE_CORE),
        cache_config_fields=fields,
        frontend_args=_class_fields(sources[FRONTEND_ARGS], "FrontendArgs"),
        server_utils=sources[SERVER_UTILS],
    )


# --------------------------------------------------------------------------- the engine logs


def _uvicorn_prefix(level: str) -> str:
    # uvicorn/logging.py ColourizedFormatter.formatMessage (uvicorn 0.54): levelname + ":" padded to 9
    return level + ":" + " " * (8 - len(level))


def vllm_line(v: Vllm033, process: str, file: str, lineno: int, msg: str, *args: object, second: int = 0) -> str:
    """One line as vLLM 0.33's logging prints it."""
    record = logging.LogRecord(
        "vllm", logging.INFO, f"/usr/local/lib/python3.12/site-packages/vllm/{file}", lineno, msg, args, None
    )
    record.created = (T0 + timedelta(seconds=second)).timestamp()
    record.vllm_process_name = process
    record.fileinfo = file.rsplit("/", 1)[-1]
    return logging.Formatter(v.line_format, v.date_format).format(record)


def access_line(v: Vllm033, index: int) -> str:
    """A uvicorn access line in the format vLLM configures (client_addr - "request_line" status)."""
    fields = {
        "levelprefix": _uvicorn_prefix("INFO"),
        "client_addr": f"10.42.3.{1 + index % 200}:{30000 + index % 30000}",
        "request_line": "GET /metrics HTTP/1.1" if index % 3 else "GET /health HTTP/1.1",
        "status_code": 200,
    }
    return v.access_format % fields


def engine_log(v: Vllm033, cell: Cell, role: str, *, access_lines: int = ACCESS_LINES) -> str:
    """An engine's startup record (vLLM 0.33 lines, in the order an engine prints them), then access lines."""
    block = cell.decode_block_size if role == "decode" else cell.prefill_block_size
    kernel = cell.kernel_block_decode if role == "decode" else cell.kernel_block_prefill
    backend = cell.backend.upper()
    candidates = "[" + ", ".join(f"'{name}'" for name in (backend, "TRITON_ATTN", "FLEX_ATTENTION")) + "]"
    lines = [vllm_line(v, ENGINE_PROCESS, "platforms/cuda.py", 509, v.backend_line, backend, candidates, second=41)]
    if cell.runner == "v2":
        lines.append(vllm_line(v, ENGINE_PROCESS, "v1/worker/gpu_worker.py", 513, v.v2_runner_line, second=42))
    if kernel is not None and kernel != block:
        lines.append(
            vllm_line(
                v,
                ENGINE_PROCESS,
                "distributed/kv_transfer/kv_connector/v1/nixl/base_worker.py",
                1071,
                v.kernel_block_line,
                block,
                kernel,
                second=77,
            )
        )
    lines += [
        vllm_line(
            v,
            ENGINE_PROCESS,
            "v1/core/kv_cache_utils.py",
            1147,
            v.kv_cache_line,
            "GPU",
            "1,048,576",
            "4,096",
            256.0,
            second=78,
        ),
        vllm_line(v, ENGINE_PROCESS, "v1/engine/core.py", 412, v.init_engine_line, 52.31, 21.07, second=93),
        # uvicorn/lifespan/on.py LifespanOn.startup (uvicorn 0.54): the end of the startup record
        f"{_uvicorn_prefix('INFO')} {STARTUP_COMPLETE}",
    ]
    lines += [access_line(v, i) for i in range(access_lines)]
    return "\n".join(lines) + "\n"


def cache_config_metrics(v: Vllm033, cell: Cell, role: str) -> str:
    """/metrics with vllm:cache_config_info as vLLM 0.33 exports it: every CacheConfig field a label;
    block_size and effective_attention_block_size both the LOGICAL block (KV cache manager)."""
    block = cell.decode_block_size if role == "decode" else cell.prefill_block_size
    known = {
        "block_size": block,
        "effective_attention_block_size": block,
        "cache_dtype": cell.kv_cache_dtype,
        "num_gpu_blocks": 1_048_576 // block,
        "kv_cache_size_tokens": 1_048_576,
        "gpu_memory_utilization": 0.9,
    }
    labels = {name: str(known.get(name, "None")) for name in v.cache_config_fields}
    labels["engine"] = "0"
    rendered = ",".join(f'{k}="{value}"' for k, value in labels.items())
    return (
        "# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig\n"
        "# TYPE vllm:cache_config_info gauge\n"
        f"vllm:cache_config_info{{{rendered}}} 1.0\n"
    )


# --------------------------------------------------------------------------- engines' HTTP side


class Endpoints:
    """/health, /v1/models and /metrics of every Service, on one loopback server (path /<service>/...)."""

    def __init__(self) -> None:
        self.metrics: dict[str, str] = {}
        routes = self.metrics

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                _, service, rest = self.path.split("/", 2)
                if service not in routes:
                    self.send_error(404)
                    return
                if rest == "health":
                    body, kind = b"", "text/plain"
                elif rest == "v1/models":
                    body, kind = (
                        json.dumps({"object": "list", "data": [{"id": "qwen3-0-6b"}]}).encode(),
                        "application/json",
                    )
                elif rest == "metrics":
                    body, kind = routes[service].encode(), "text/plain; version=0.0.4"
                else:
                    self.send_error(404)
                    return
                self.send_response(200)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base = f"http://127.0.0.1:{self.server.server_address[1]}"

    def url_for(self, name: str, namespace: str, port: int) -> str:
        return f"{self.base}/{name}"


@pytest.fixture()
def endpoints() -> Iterator[Endpoints]:
    served = Endpoints()
    thread = threading.Thread(target=served.server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
    thread.start()
    try:
        yield served
    finally:
        served.server.shutdown()
        served.server.server_close()
        thread.join(timeout=10)


@pytest.fixture()
def cluster() -> Iterator[KmockCluster]:
    with kmock_cluster() as running:
        running.declare("v1/pods", "Pod")
        running.declare("v1/services", "Service")
        yield running


# --------------------------------------------------------------------------- cells in the cluster


def _config() -> CanaryConfig:
    return validate_config(json.loads(json.dumps(CONFIG)), "startup-evidence test config")


def _cells(config: CanaryConfig) -> dict[str, Cell]:
    planned = plan(config).planned()

    def pick(backend: str, block: int, runner: str) -> Cell:
        return next(c for c in planned if c.backend == backend and c.prefill_block_size == block and c.runner == runner)

    cells = {
        "v1": pick("FLASH_ATTN", 16, "v1"),
        "v2": pick("FLASH_ATTN", 16, "v2"),
        "flashinfer-128": pick("FLASHINFER", 128, "v2"),
    }
    fi = cells["flashinfer-128"]
    assert (fi.prefill_block_size, fi.kernel_block_prefill) == (128, 64), "the catalog's FLASHINFER kernel grain"
    return cells


def _ts(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def _pod(name: str, cell: Cell, role: str, ready_after: int) -> dict[str, Any]:
    """A running, Ready pod as the kubelet reports it, with the spec the chart renders (node, UCX_TLS)."""
    container = "router" if role == "router" else "vllm"
    env = (
        []
        if role == "router"
        else [
            {"name": "UCX_TLS", "value": UCX_TLS},
            {"name": "VLLM_USE_V2_MODEL_RUNNER", "value": "1" if cell.runner == "v2" else "0"},
        ]
    )
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": NAMESPACE,
            "creationTimestamp": _ts(T0),
            "labels": {
                "app.kubernetes.io/name": "vllm-pd",
                "app.kubernetes.io/instance": RELEASE,
                "canary.vllm.dev/run": "nightly",
                "canary.vllm.dev/cell": cell.k8s_name,
                "canary.vllm.dev/role": role,
            },
        },
        "spec": {"nodeName": NODE, "containers": [{"name": container, "image": cell.image_ref, "env": env}]},
        "status": {
            "phase": "Running",
            "conditions": [
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": _ts(T0)},
                {"type": "Ready", "status": "True", "lastTransitionTime": _ts(T0 + timedelta(seconds=ready_after))},
            ],
            "containerStatuses": [
                {
                    "name": container,
                    "ready": True,
                    "restartCount": 0,
                    "image": cell.image_ref,
                    "imageID": "",
                    "started": True,
                    "state": {"running": {"startedAt": _ts(T0)}},
                }
            ],
        },
    }


def _service(cell: Cell, role: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": f"{cell.k8s_name}-{role}",
            "namespace": NAMESPACE,
            "labels": {
                "app.kubernetes.io/name": "vllm-pd",
                "app.kubernetes.io/instance": RELEASE,
                "canary.vllm.dev/run": "nightly",
                "canary.vllm.dev/cell": cell.k8s_name,
                "canary.vllm.dev/role": role,
            },
        },
        "spec": {"ports": [{"name": "http", "port": 8000, "targetPort": "http", "protocol": "TCP"}]},
    }


def deploy(cluster: KmockCluster, endpoints: Endpoints, v: Vllm033, cell: Cell) -> dict[str, str]:
    """A long-lived P/D cell: pods, Services, engine logs and endpoints. Returns the engine logs by role."""
    logs: dict[str, str] = {}
    for role, ready_after in (("prefill", 95), ("decode", 120), ("router", 130)):
        name = f"{cell.k8s_name}-{role}-7d9f-abcde"
        cluster.put("v1/pods", NAMESPACE, _pod(name, cell, role, ready_after))
        cluster.put("v1/services", NAMESPACE, _service(cell, role))
        service = f"{cell.k8s_name}-{role}"
        if role == "router":
            cluster.log(NAMESPACE, name, "router", "router listening on 0.0.0.0:8000\n")
            endpoints.metrics[service] = ""
            continue
        logs[role] = engine_log(v, cell, role)
        cluster.log(NAMESPACE, name, "vllm", logs[role])
        endpoints.metrics[service] = cache_config_metrics(v, cell, role)
    return logs


def target_for(cluster: KmockCluster, endpoints: Endpoints, config: CanaryConfig) -> KubernetesTarget:
    from kubernetes import client

    configuration = client.Configuration()
    configuration.host = cluster.url
    api = client.CoreV1Api(client.ApiClient(configuration))
    return KubernetesTarget(config, api=api, run="nightly", url_for=endpoints.url_for)


# --------------------------------------------------------------------------- tests


def test_the_log_lines_are_vllm_033s(vllm033: Vllm033) -> None:
    """The fixture lines are what vLLM 0.33 prints (and what the canary's readers look for)."""
    config = _config()
    cell = _cells(config)["flashinfer-128"]
    lines = engine_log(vllm033, cell, "decode", access_lines=2).splitlines()
    assert lines[0].startswith(f"({ENGINE_PROCESS} pid=") and "INFO 11-29 " in lines[0] and "[cuda.py:509]" in lines[0]
    assert lines[0].endswith(
        "Using FLASHINFER attention backend out of potential backends: ['FLASHINFER', 'TRITON_ATTN', 'FLEX_ATTENTION']."
    )
    assert lines[1].endswith("] Using V2 Model Runner")
    assert lines[2].endswith(
        "User-specified logical block size (128) does not match physical kernel block size (64). Using the latter."
    )
    assert lines[3].endswith(
        "GPU KV cache size: 1,048,576 tokens, Maximum concurrency for 4,096 tokens per request: 256.00x"
    )
    assert lines[5] == "INFO:     Application startup complete."
    assert lines[6].startswith('INFO:     10.42.3.1:30000 - "GET /health HTTP/1.1" 200')
    assert lines[7] == 'INFO:     10.42.3.2:30001 - "GET /metrics HTTP/1.1" 200'


def test_the_chart_passes_vllm_033s_access_log_flag(vllm033: Vllm033) -> None:
    """--disable-access-log-for-endpoints is a vLLM 0.33 frontend flag taking ONE comma-separated
    string; the chart passes it that way, with /health and /metrics by default."""
    assert vllm033.frontend_args.get("disable_access_log_for_endpoints") == "str | None"
    assert '(args.disable_access_log_for_endpoints or "").split(",")' in vllm033.server_utils
    helpers = CHART_HELPERS.read_text()
    assert '- --disable-access-log-for-endpoints\n- {{ join "," . | quote }}' in helpers
    defaults = yaml.safe_load(CHART_VALUES.read_text())["vllm"]["disableAccessLogForEndpoints"]
    assert defaults == ["/health", "/metrics"]


def test_long_lived_cells_get_true_startup_verdicts(
    cluster: KmockCluster, endpoints: Endpoints, vllm033: Vllm033, tmp_path: Path
) -> None:
    config = _config()
    cells = _cells(config)
    engine_logs = {key: deploy(cluster, endpoints, vllm033, cell) for key, cell in cells.items()}
    target = target_for(cluster, endpoints, config)
    the_plan = plan(config).model_copy(update={"cells": tuple(cells.values())})
    progress: list[str] = []
    run = execute(config, the_plan, tmp_path / "run", target=target, progress=progress.append)

    results: dict[str, CellResult] = {
        key: next(r for r in run.cells if r.cell.id == cell.id) for key, cell in cells.items()
    }
    for key, result in results.items():
        startup = result.check("startup")
        assert startup is not None, progress
        assert (result.verdict, startup.verdict) == ("pass", "pass"), f"{key}: {startup.summary} {startup.evidence}"
        live = startup.evidence["live_config"]
        assert isinstance(live, dict)
        cell = cells[key]
        for role in ("prefill", "decode"):
            observed = live[role]["observed"]
            assert observed["runner"] == cell.runner, (key, role, observed["sources"])
            assert observed["backend"] == cell.backend
            assert observed["block_size"] == observed["effective_attention_block_size"] == cell.prefill_block_size
            assert startup.metrics[f"kv_cache_tokens_{role}"] == 1_048_576
            # the start is measured from the pod's creation (kube_state.role_created_at)
            phases = startup.evidence["start_phases"][role]
            assert phases["ready_s"] == round(startup.metrics[f"ready_s_{role}"], 1)

            log_dir = tmp_path / "run" / "cells" / cell.id / "logs"
            record = (log_dir / f"{role}.startup.log").read_text()
            full = (log_dir / f"{role}.log").read_text()
            assert STARTUP_COMPLETE in record and record.count('"GET /metrics HTTP/1.1"') <= 20
            assert ("Using V2 Model Runner" in record) == (cell.runner == "v2")
            # the role log: the startup record, then the last 5,000 lines (crash and transfer evidence)
            assert full.split("\n", 1)[1].startswith(record.split("\n", 1)[1])
            assert engine_logs[key][role].splitlines()[-1] in full
            assert 5_000 < len(full.splitlines()) < 5_100 < len(engine_logs[key][role].splitlines())
        fi_line = "does not match physical kernel block size (64)"
        assert (fi_line in (tmp_path / "run" / "cells" / cell.id / "logs" / "decode.log").read_text()) == (
            key == "flashinfer-128"
        )
        evidence = json.loads((tmp_path / "run" / "cells" / cell.id / "logs" / "deployment.json").read_text())
        assert evidence["nixl"] == {
            "placement": {
                "asked": "same-node",
                "observed": "same-node",
                "nodes": {"prefill": [NODE], "decode": [NODE]},
            },
            "ucx_tls": {"asked": UCX_TLS, "observed": {"prefill": [UCX_TLS], "decode": [UCX_TLS]}},
            "as_asked": True,
        }


def test_a_tail_alone_misjudges_the_v2_cell(
    cluster: KmockCluster, endpoints: Endpoints, vllm033: Vllm033, tmp_path: Path
) -> None:
    """The fault fixed: with only the last 5,000 lines (the target's former reading), the v2 cell's
    runner line is gone and the startup check cannot give its true verdict (pass)."""
    config = _config()
    cell = _cells(config)["v2"]
    deploy(cluster, endpoints, vllm033, cell)
    target = target_for(cluster, endpoints, config)
    with target.deploy(cell, tmp_path / "logs") as deployment:
        ctx = CheckContext(cell=cell, deployment=deployment, config=config, cell_dir=tmp_path)
        assert startup_check(ctx).verdict == "pass"
        for role in ("prefill", "decode"):
            server = deployment.servers[role]
            tail = target.pod_log(f"{cell.k8s_name}-{role}-7d9f-abcde", "vllm", previous=False)
            assert tail is not None and len(tail.splitlines()) == target.log_tail_lines
            assert "Using V2 Model Runner" not in tail and "Using V2 Model Runner" in server.log_text()
            server.log_path = tmp_path / f"{role}.tail-only.log"
            server.log_path.write_text(tail)
        tail_only = startup_check(ctx)
    assert tail_only.verdict != "pass", tail_only.summary
    live = tail_only.evidence.get("live_config", {})
    assert isinstance(live, dict)
    for role in ("prefill", "decode"):
        assert live.get(role, {}).get("observed", {}).get("runner") != "v2", live
