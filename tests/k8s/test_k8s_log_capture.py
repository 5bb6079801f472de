"""How the Kubernetes target reads a container log: the startup record from the START of the log
(streamed, stopped after `Application startup complete.` plus a few lines, bounded in bytes) and
the tail, against kmock serving logs with the API server's tailLines / limitBytes semantics."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from kmock_cluster import KmockCluster, kmock_cluster

from canary.config import CanaryConfig
from canary.config.load import validate_config
from canary.targets.kubernetes.state import PodState
from canary.targets.kubernetes.target import STARTUP_COMPLETE, KubernetesTarget

NAMESPACE = "gpu"
STARTUP = [
    "(EngineCore_DP0 pid=212) INFO 11-29 10:00:41 [cuda.py:509] Using FLASHINFER attention backend out of "
    "potential backends: ['FLASHINFER'].",
    "(EngineCore_DP0 pid=212) INFO 11-29 10:00:42 [gpu_worker.py:513] Using V2 Model Runner",
    "(EngineCore_DP0 pid=212) INFO 11-29 10:01:18 [kv_cache_utils.py:1147] GPU KV cache size: 1,048,576 tokens, "
    "Maximum concurrency for 4,096 tokens per request: 256.00x",
    f"INFO:     {STARTUP_COMPLETE}",
]


def access(count: int, start: int = 0) -> list[str]:
    return [f'INFO:     10.42.3.9:{30000 + i} - "GET /metrics HTTP/1.1" 200' for i in range(start, start + count)]


def text(lines: list[str]) -> str:
    return "\n".join(lines) + "\n"


CONFIG: dict[str, Any] = {
    "version": 1,
    "name": "log-capture",
    "platform": "sm90",
    "models": [{"name": "m", "source": "Qwen/Qwen3-0.6B"}],
    "images": {"baseline": {"ref": "vllm/vllm-openai:v0.33.0"}},
    "matrix": {"attention_backends": ["FLASHINFER"], "prefill_block_sizes": [128]},
    "target": {"kind": "kubernetes", "kubernetes": {"namespace": NAMESPACE}},
}


@pytest.fixture()
def cluster() -> Iterator[KmockCluster]:
    with kmock_cluster() as running:
        running.declare("v1/pods", "Pod")
        yield running


def target_for(cluster: KmockCluster, **kwargs: Any) -> KubernetesTarget:
    from kubernetes import client

    configuration = client.Configuration()
    configuration.host = cluster.url
    config: CanaryConfig = validate_config(CONFIG, "log-capture config")
    return KubernetesTarget(config, api=client.CoreV1Api(client.ApiClient(configuration)), **kwargs)


def test_a_short_log_is_read_whole_in_one_request(cluster: KmockCluster) -> None:
    cluster.log(NAMESPACE, "p", "vllm", text(STARTUP + access(5)))
    log = target_for(cluster).container_log("p", "vllm", previous=False)
    assert log is not None and log.complete and log.startup_complete
    assert log.tail == "" and log.text() == text(STARTUP + access(5))
    requests = [str(r.url) for r in list(cluster.emulator) if "/log" in str(r.url)]
    assert len(requests) == 1 and "limitBytes=" in requests[0] and "tailLines" not in requests[0]


def test_a_long_log_keeps_its_start_and_its_tail(cluster: KmockCluster) -> None:
    lines = STARTUP + access(30_000)
    cluster.log(NAMESPACE, "p", "vllm", text(lines))
    target = target_for(cluster, log_tail_lines=100, startup_extra_lines=5)
    log = target.container_log("p", "vllm", previous=False)
    assert log is not None and not log.complete and log.startup_complete
    assert log.startup == text(STARTUP + access(5)), "up to the marker plus startup_extra_lines"
    assert log.tail == text(lines[-100:])
    combined = log.text().splitlines()
    assert combined[: len(STARTUP) + 5] == STARTUP + access(5)
    assert combined[len(STARTUP) + 5].startswith("===== ... last 100 lines of the log")
    assert combined[len(STARTUP) + 6 :] == lines[-100:]


def test_a_tail_that_reaches_into_the_startup_record_is_not_repeated(cluster: KmockCluster) -> None:
    lines = STARTUP + access(40)
    cluster.log(NAMESPACE, "p", "vllm", text(lines))
    log = target_for(cluster, log_tail_lines=42, startup_extra_lines=20).container_log("p", "vllm", previous=False)
    assert log is not None and not log.complete  # stopped after marker + 20: 16 lines were not read
    assert log.text() == text(lines), "startup record + the part of the tail it does not hold"


def test_a_log_without_the_marker_is_read_only_up_to_the_byte_bound(cluster: KmockCluster) -> None:
    """A server still loading (or one that crashed before listening) never prints the marker: the
    start of its log is kept up to startup_limit_bytes, never the whole (possibly huge) log."""
    loading = [
        f"(EngineCore_DP0 pid=212) DEBUG 11-29 10:00:{i % 60:02d} [loader.py:88] shard {i}" for i in range(50_000)
    ]
    cluster.log(NAMESPACE, "p", "vllm", text(loading))
    target = target_for(cluster, log_tail_lines=10, startup_limit_bytes=256 * 1024)
    log = target.container_log("p", "vllm", previous=False)
    assert log is not None and not log.complete and not log.startup_complete
    longest = max(len(line) + 1 for line in loading)  # a partial last line is not kept
    assert 256 * 1024 - longest <= len(log.startup.encode()) <= 256 * 1024 + 64 * 1024
    assert log.startup.splitlines() == loading[: len(log.startup.splitlines())]
    assert log.tail == text(loading[-10:])


def test_role_logs_keep_previous_and_current_instances_with_their_startup_records(cluster: KmockCluster) -> None:
    crashed = [*STARTUP[:2], "ERROR 11-29 10:01:02 [core.py:700] EngineCore failed to start.", "RuntimeError: boom"]
    cluster.log(NAMESPACE, "p", "vllm", text(crashed), previous=True)
    cluster.log(NAMESPACE, "p", "vllm", text(STARTUP + access(3000)))
    pod = PodState(
        name="p",
        role="decode",
        phase="Running",
        ready=True,
        created=None,
        ready_since=None,
        restarts=1,
        waiting_reason=None,
        waiting_message=None,
        last_termination_reason="Error",
        last_exit_code=1,
        unschedulable=None,
        container="vllm",
    )
    full, startup = target_for(cluster, log_tail_lines=50, startup_extra_lines=2).role_logs([pod])
    assert full.index("p/vllm previous instance (Error, exit 1)") < full.index("RuntimeError: boom")
    assert full.index("RuntimeError: boom") < full.index("p/vllm current instance")
    assert full.rstrip().endswith(access(3000)[-1])
    assert "p/vllm previous instance (Error, exit 1) (no 'Application startup complete.' line)" in startup
    assert startup.count("Using V2 Model Runner") == 2 and access(3000)[-1] not in startup
