"""The Kubernetes target: find the cells the helm/vllm-pd chart deployed and report their state.

Helm owns the cells' lifecycle; this target only reads (its Role allows get/list/watch on pods,
pods/log and services in one namespace). For every cell it finds the pods by label
(app.kubernetes.io/instance=<release>, canary.vllm.dev/cell=<k8s_name>, canary.vllm.dev/role),
and reports:

- readiness and the seconds from pod creation to Ready,
- restarts and the last termination reason (OOMKilled, Error, exit code),
- the current and previous container logs (the startup classifier reads them: a crash-looping
  server's failure is in its *previous* log). Each log is read twice: from its START, up to and
  including uvicorn's `Application startup complete.` plus a few lines (bounded in bytes), which
  is the startup record (runner, backend, KV cache size, kernel block lines) kept as
  `<role>.startup.log`; and its last `log_tail_lines` lines for crash and transfer evidence. A
  long-lived server logs one access line per /health and /metrics request, so a tail alone loses
  the startup lines within hours. `<role>.log` holds the startup record followed by the tail,
- where the NIXL peers run: each engine pod's node and UCX_TLS, next to the placement and transport
  the config asked for (`Deployment.evidence["nixl"]`, also `deployment.json` in the log dir),
- the Service URLs: the router of a P/D cell or the aggregated server, and each server's /metrics,
- cells whose pods are missing, crash-looping or failed (image pull, config errors).

API responses are read as plain JSON (`_preload_content=False`), so the target depends only on
the wire format, not on the client's generated models. What the JSON means (a pod's state, a
cell's status) is decided in canary.targets.kubernetes.state; the names and labels are
canary.plan.kube_names'.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from urllib3.exceptions import HTTPError

from canary.config import CanaryConfig
from canary.core.atomic import write_atomic
from canary.errors import CanaryError
from canary.plan.cell import Cell
from canary.plan.kube_names import (
    CHART_NAME,
    LABEL_CELL,
    LABEL_INSTANCE,
    LABEL_NAME,
    LABEL_ROLE,
    LABEL_RUN,
)
from canary.targets import target_kind
from canary.targets.base import Deployment, ServerInfo
from canary.targets.kubernetes.state import (
    ENGINE_ROLES_PD,
    ROLES_AGGREGATED,
    TERMINAL_STATUSES,
    CellDeployment,
    ContainerLog,
    PodState,
    as_list,
    as_mapping,
    expected_roles,
    joined_logs,
    judge_cell,
    pod_state,
)
from canary.targets.liveness import ExitStatus

# uvicorn's line once the OpenAI server listens (uvicorn/lifespan/on.py): the end of the startup
# record. vLLM's own startup lines (runner, backend, KV cache size) all come before it.
STARTUP_COMPLETE = "Application startup complete."
LOG_CHUNK_BYTES = 64 * 1024
LOG_TIMEOUT_S = (10.0, 60.0)  # connect, read (per chunk): a log read never waits forever


class KubernetesTargetError(CanaryError):
    """The Kubernetes API could not be read, or a cell did not become ready."""


def service_url(name: str, namespace: str, port: int) -> str:
    """The in-cluster URL of a Service port."""
    return f"http://{name}.{namespace}.svc:{port}"


@target_kind("kubernetes")
class KubernetesTarget:
    """Finds the cells of a vllm-pd release and reports their state; deploys nothing.

    `discover(cells)` is one look at the cluster; `deploy(cell, log_dir)` (the runner's Target
    interface) waits for the cell to become ready or fail, then hands the checks its URLs and logs.
    """

    kind = "kubernetes"

    def __init__(
        self,
        config: CanaryConfig,
        *,
        source: str = "config",
        api: Any | None = None,
        run: str | None = None,
        url_for: Callable[[str, str, int], str] = service_url,
        poll_interval_s: float = 5.0,
        missing_grace_s: float = 60.0,
        log_tail_lines: int = 5000,
        startup_extra_lines: int = 20,
        startup_limit_bytes: int = 8 * 1024 * 1024,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        settings = config.target.kubernetes
        self.config = config
        self.source = source
        self.namespace = settings.namespace
        self.release = settings.release
        self.ready_timeout_s = float(settings.ready_timeout_s)
        self.run = run
        self.url_for = url_for
        self.poll_interval_s = poll_interval_s
        self.missing_grace_s = missing_grace_s
        self.log_tail_lines = log_tail_lines
        self.startup_extra_lines = startup_extra_lines
        self.startup_limit_bytes = startup_limit_bytes
        self._clock = clock
        self._sleep = sleep
        self._api = api

    # ------------------------------------------------------------------ API access

    @property
    def api(self) -> Any:
        """The CoreV1Api (created on first use from the pod's service account or a kubeconfig)."""
        if self._api is None:
            self._api = self._connect()
        return self._api

    def _connect(self) -> Any:
        from kubernetes import client
        from kubernetes import config as kube_config

        settings = self.config.target.kubernetes
        configuration = client.Configuration()
        load_incluster: Callable[..., None] = kube_config.load_incluster_config
        load_kubeconfig: Callable[..., None] = kube_config.load_kube_config
        try:
            if settings.in_cluster:
                load_incluster(client_configuration=configuration)
            else:
                load_kubeconfig(config_file=settings.kubeconfig, client_configuration=configuration)
        except (kube_config.ConfigException, OSError) as exc:
            where = (
                "in-cluster service account"
                if settings.in_cluster
                else f"kubeconfig {settings.kubeconfig or '~/.kube/config'}"
            )
            raise KubernetesTargetError(f"cannot configure the Kubernetes client from the {where}: {exc}") from None
        return client.CoreV1Api(client.ApiClient(configuration))

    def _read_json(self, what: str, call: Callable[..., Any], *args: Any, **kwargs: Any) -> Mapping[str, Any]:
        from kubernetes.client.exceptions import ApiException

        try:
            response = call(*args, _preload_content=False, **kwargs)
            data = json.loads(response.data)
        except ApiException as exc:
            raise KubernetesTargetError(
                f"reading {what} in namespace {self.namespace} failed: HTTP {exc.status} {exc.reason}"
            ) from None
        except (OSError, ValueError) as exc:
            raise KubernetesTargetError(f"reading {what} in namespace {self.namespace} failed: {exc}") from None
        return as_mapping(data)

    def _selector(self) -> str:
        selector = f"{LABEL_NAME}={CHART_NAME},{LABEL_INSTANCE}={self.release}"
        return f"{selector},{LABEL_RUN}={self.run}" if self.run else selector

    def _ours(self, labels: Mapping[str, Any]) -> bool:
        # The API server applies the selector; checking again keeps the grouping honest.
        if labels.get(LABEL_NAME) != CHART_NAME or labels.get(LABEL_INSTANCE) != self.release:
            return False
        return self.run is None or labels.get(LABEL_RUN) == self.run

    def list_pods(self) -> dict[str, dict[str, list[PodState]]]:
        """Pods of the release by cell k8s_name, then role."""
        data = self._read_json("pods", self.api.list_namespaced_pod, self.namespace, label_selector=self._selector())
        grouped: dict[str, dict[str, list[PodState]]] = {}
        for item in (as_mapping(i) for i in as_list(data.get("items"))):
            labels = as_mapping(as_mapping(item.get("metadata")).get("labels"))
            if not self._ours(labels) or LABEL_CELL not in labels:
                continue
            state = pod_state(item)
            grouped.setdefault(str(labels[LABEL_CELL]), {}).setdefault(state.role, []).append(state)
        for roles in grouped.values():
            for pods in roles.values():
                pods.sort(key=lambda p: (not p.leader, p.name))
        return grouped

    def list_services(self) -> dict[str, dict[str, Mapping[str, Any]]]:
        """Services of the release by cell k8s_name, then role."""
        data = self._read_json(
            "services", self.api.list_namespaced_service, self.namespace, label_selector=self._selector()
        )
        grouped: dict[str, dict[str, Mapping[str, Any]]] = {}
        for item in (as_mapping(i) for i in as_list(data.get("items"))):
            labels = as_mapping(as_mapping(item.get("metadata")).get("labels"))
            if self._ours(labels) and LABEL_CELL in labels and LABEL_ROLE in labels:
                grouped.setdefault(str(labels[LABEL_CELL]), {})[str(labels[LABEL_ROLE])] = item
        return grouped

    def _log_request(self, pod: str, container: str, previous: bool, **query: Any) -> Any | None:
        """The raw (streamed) log response; None when there is no such log."""
        from kubernetes.client.exceptions import ApiException

        try:
            return self.api.read_namespaced_pod_log(
                pod,
                self.namespace,
                container=container,
                previous=previous,
                _preload_content=False,
                _request_timeout=LOG_TIMEOUT_S,
                **query,
            )
        except ApiException as exc:
            if exc.status in (400, 404):  # no previous instance / container not started yet
                return None
            which = "previous log" if previous else "log"
            raise KubernetesTargetError(
                f"reading the {which} of {pod}/{container} failed: HTTP {exc.status} {exc.reason}"
            ) from None

    def pod_log(self, pod: str, container: str, *, previous: bool) -> str | None:
        """The last `log_tail_lines` lines of a container's log (None when there is none)."""
        response = self._log_request(pod, container, previous, tail_lines=self.log_tail_lines)
        if response is None:
            return None
        try:
            data = response.data
        except (OSError, HTTPError) as exc:
            raise KubernetesTargetError(f"reading the log of {pod}/{container} failed: {exc}") from None
        return data.decode("utf-8", errors="replace") if isinstance(data, bytes) else str(data)

    def pod_log_head(self, pod: str, container: str, *, previous: bool) -> ContainerLog | None:
        """The log from its start: up to and including `Application startup complete.` plus
        `startup_extra_lines` lines, at most `startup_limit_bytes` bytes. The Kubernetes API has no
        "head", so the log is streamed and the connection closed once the record is complete."""
        # The API server may stop "slightly" before limit_bytes: ask for a chunk more and stop here,
        # so a stream that ends below startup_limit_bytes really is the whole log.
        response = self._log_request(pod, container, previous, limit_bytes=self.startup_limit_bytes + LOG_CHUNK_BYTES)
        if response is None:
            return None
        lines: list[bytes] = []
        pending = b""
        read = 0
        after_marker: int | None = None
        eof = True
        marker = STARTUP_COMPLETE.encode()
        try:
            for chunk in response.stream(LOG_CHUNK_BYTES):
                read += len(chunk)
                *complete_lines, pending = (pending + chunk).split(b"\n")
                for line in complete_lines:
                    lines.append(line + b"\n")
                    if after_marker is None and marker in line:
                        after_marker = 0
                    elif after_marker is not None:
                        after_marker += 1
                    if after_marker is not None and after_marker >= self.startup_extra_lines:
                        break
                if (after_marker is not None and after_marker >= self.startup_extra_lines) or (
                    read >= self.startup_limit_bytes
                ):
                    eof = False
                    break
        except (OSError, HTTPError) as exc:
            raise KubernetesTargetError(f"reading the log of {pod}/{container} failed: {exc}") from None
        finally:
            response.close()
            with contextlib.suppress(Exception):
                response.release_conn()
        if eof and pending:
            lines.append(pending)
        text = b"".join(lines).decode("utf-8", errors="replace")
        return ContainerLog(startup=text, complete=eof, startup_complete=after_marker is not None)

    def container_log(self, pod: str, container: str, *, previous: bool) -> ContainerLog | None:
        """A container instance's startup record and, for a log longer than that, its tail."""
        head = self.pod_log_head(pod, container, previous=previous)
        if head is None or head.complete:
            return head
        head.tail = self.pod_log(pod, container, previous=previous) or ""
        return head

    def role_log(self, pods: list[PodState]) -> str:
        """Current and previous logs of a role's pods (startup record + tail), each under a header line."""
        return self.role_logs(pods)[0]

    def role_logs(self, pods: list[PodState]) -> tuple[str, str]:
        """(full, startup): the role's logs as `role_log` gives them, and the startup records alone."""
        full: list[str] = []
        startup: list[str] = []
        for pod in pods:
            instances: list[tuple[bool, str]] = []
            if pod.restarts > 0 or pod.last_termination_reason is not None:
                reason = pod.last_termination_reason or "terminated"
                code = f", exit {pod.last_exit_code}" if pod.last_exit_code is not None else ""
                instances.append((True, f"previous instance ({reason}{code})"))
            instances.append((False, "current instance"))
            for previous, what in instances:
                log = self.container_log(pod.name, pod.container, previous=previous)
                if log is None or not log.startup:
                    continue
                header = f"===== {pod.name}/{pod.container} {what}"
                full.append(f"{header} =====\n{log.text()}")
                note = "" if log.startup_complete else f" (no {STARTUP_COMPLETE!r} line)"
                startup.append(f"{header}{note} =====\n{log.startup}")
        return joined_logs(full), joined_logs(startup)

    # ------------------------------------------------------------------ discovery

    def _urls(self, services: Mapping[str, Mapping[str, Any]]) -> tuple[dict[str, str], dict[str, str]]:
        role_urls: dict[str, str] = {}
        metrics_urls: dict[str, str] = {}
        for role, service in services.items():
            name = str(as_mapping(service.get("metadata")).get("name", ""))
            ports = {
                str(as_mapping(p).get("name")): int(as_mapping(p).get("port", 0))
                for p in as_list(as_mapping(service.get("spec")).get("ports"))
            }
            if "http" in ports:
                role_urls[role] = self.url_for(name, self.namespace, ports["http"])
            if "metrics" in ports:
                metrics_urls[role] = self.url_for(name, self.namespace, ports["metrics"]) + "/metrics"
            elif role in role_urls:
                metrics_urls[role] = role_urls[role] + "/metrics"
        return role_urls, metrics_urls

    def discover(self, cells: list[Cell], *, with_logs: bool = True) -> dict[str, CellDeployment]:
        """One look at the cluster: the state of every cell, by cell id."""
        pods = self.list_pods()
        services = self.list_services()
        found: dict[str, CellDeployment] = {}
        for cell in cells:
            cell_pods = pods.get(cell.k8s_name, {})
            status, detail, failed_role = judge_cell(cell.topology, cell_pods)
            role_urls, metrics_urls = self._urls(services.get(cell.k8s_name, {}))
            front = "aggregated" if cell.topology == "aggregated" else "router"
            all_pods = [p for role_pods in cell_pods.values() for p in role_pods]
            terminated = next((p for p in all_pods if p.last_termination_reason), None)
            deployment = CellDeployment(
                cell_id=cell.id,
                k8s_name=cell.k8s_name,
                topology=cell.topology,
                status=status,
                detail=detail,
                failed_role=failed_role,
                pods=cell_pods,
                restarts=sum(p.restarts for p in all_pods),
                termination_reason=terminated.last_termination_reason if terminated else None,
                base_url=role_urls.get(front),
                role_urls=role_urls,
                metrics_urls=metrics_urls,
            )
            engine_roles = ROLES_AGGREGATED if cell.topology == "aggregated" else ENGINE_ROLES_PD
            engine_seconds = [deployment.role_ready_seconds(role) for role in engine_roles]
            if status == "ready" and all(s is not None for s in engine_seconds):
                deployment.ready_seconds = max(s for s in engine_seconds if s is not None)
            if status == "ready" and deployment.base_url is None:
                deployment.status, deployment.detail = "missing", f"pods ready but no {front} Service"
                deployment.failed_role = front
            if with_logs:
                for role, role_pods in cell_pods.items():
                    deployment.logs[role], deployment.startup_logs[role] = self.role_logs(role_pods)
            found[cell.id] = deployment
        return found

    def wait_for(self, cell: Cell) -> CellDeployment:
        """Poll until the cell is ready, crash-looping or failed, missing past the grace, or the deadline."""
        started = self._clock()
        while True:
            state = self.discover([cell], with_logs=False)[cell.id]
            waited = self._clock() - started
            if state.status == "ready" or state.status in TERMINAL_STATUSES:
                break
            if state.status == "missing" and waited >= self.missing_grace_s:
                break
            if waited >= self.ready_timeout_s:
                state.detail = f"not ready after {self.ready_timeout_s:.0f}s: {state.detail}"
                break
            self._sleep(self.poll_interval_s)
        with_logs = self.discover([cell], with_logs=True)[cell.id]
        state.logs, state.startup_logs = with_logs.logs, with_logs.startup_logs
        return state

    # ------------------------------------------------------------------ Target interface

    def _write_logs(self, state: CellDeployment, log_dir: Path) -> dict[str, Path]:
        log_dir.mkdir(parents=True, exist_ok=True)
        paths: dict[str, Path] = {}
        for role, text in state.logs.items():
            path = log_dir / f"{role}.log"
            path.write_text(text, encoding="utf-8")
            paths[role] = path
        for role, text in state.startup_logs.items():
            (log_dir / f"{role}.startup.log").write_text(text, encoding="utf-8")
        return paths

    def nixl_evidence(self, state: CellDeployment) -> dict[str, object]:
        """Placement and UCX_TLS a P/D cell asked for (target.kubernetes.nixl) and what its engine
        pods run with: their nodes and the UCX_TLS in their spec ({} for aggregated cells)."""
        if state.topology == "aggregated":
            return {}
        asked = self.config.target.kubernetes.nixl
        nodes = {role: sorted({p.node for p in state.pods.get(role, []) if p.node}) for role in ENGINE_ROLES_PD}
        observed: str | None = None
        if all(nodes.values()):
            shared = set(nodes["prefill"]) & set(nodes["decode"])
            if not shared:
                observed = "cross-node"
            elif len(set(nodes["prefill"]) | set(nodes["decode"])) == 1:
                observed = "same-node"
            else:
                observed = "partly shared nodes"
        ucx = {role: sorted({p.env.get("UCX_TLS", "") for p in state.pods.get(role, [])}) for role in ENGINE_ROLES_PD}
        tls_as_asked = all(values == [asked.tls] for values in ucx.values())
        return {
            "placement": {"asked": asked.placement, "observed": observed, "nodes": nodes},
            "ucx_tls": {"asked": asked.tls, "observed": ucx},
            "as_asked": observed == asked.placement and tls_as_asked,
        }

    def to_deployment(self, cell: Cell, state: CellDeployment, log_dir: Path) -> Deployment:
        """The runner's view of a found cell."""
        paths = self._write_logs(state, log_dir)
        servers: dict[str, ServerInfo] = {}
        for role in expected_roles(cell.topology):
            servers[role] = ServerInfo(
                role=role,
                base_url=state.role_urls.get(role, ""),
                metrics_url=state.metrics_urls.get(role),
                log_path=paths.get(role),
                ready_seconds=state.role_ready_seconds(role),
                launched_at=state.role_created_at(role),
            )
            pods = state.pods.get(role, [])
            if pods and pods[0].last_exit_code is not None and not pods[0].ready:
                servers[role].exit_code = pods[0].last_exit_code
        evidence: dict[str, object] = {}
        nixl = self.nixl_evidence(state)
        if nixl:
            evidence["nixl"] = nixl
        if evidence:
            write_atomic(log_dir / "deployment.json", json.dumps(evidence, indent=2) + "\n")
        return Deployment(
            cell=cell,
            base_url=state.base_url or "",
            served_model=cell.model,
            servers=servers,
            started=state.ready,
            ready_seconds=state.ready_seconds,
            failure=None if state.ready else state.failure_text(),
            evidence=evidence,
        )

    @contextmanager
    def deploy(self, cell: Cell, log_dir: Path) -> Iterator[Deployment]:
        """Find the cell, wait for it, hand it to the checks; afterwards save its logs again."""
        state = self.wait_for(cell)
        try:
            deployment = self.to_deployment(cell, state, log_dir)
            if deployment.started:
                deployment.exit_status = self._restart_watch(cell, state, log_dir)
            yield deployment
        finally:
            # logs after the checks ran (KV transfer lines, errors under load)
            with contextlib.suppress(KubernetesTargetError):
                self._write_logs(self.discover([cell], with_logs=True)[cell.id], log_dir)

    def _restart_watch(self, cell: Cell, state: CellDeployment, log_dir: Path) -> ExitStatus:
        """canary.targets.liveness for pods: a role whose containers restarted (or whose pods are gone)
        since the cell was found ready has died while it was checked; its logs are saved again first, so
        the death's log lines (the previous container's) are in the record."""
        seen = {role: sum(p.restarts for p in pods) for role, pods in state.pods.items()}

        def status(role: str) -> str | None:
            now = self.discover([cell], with_logs=False)[cell.id]
            pods = now.pods.get(role, [])
            restarted = sum(p.restarts for p in pods) - seen.get(role, 0)
            if pods and restarted <= 0:
                return None
            with contextlib.suppress(KubernetesTargetError):
                self._write_logs(self.discover([cell], with_logs=True)[cell.id], log_dir)
            if not pods:
                return "its pods are gone"
            last = next((p for p in pods if p.last_exit_code is not None or p.last_termination_reason), None)
            ended = (
                f", last container {last.last_termination_reason or 'terminated'} with exit code {last.last_exit_code}"
                if last is not None
                else ""
            )
            return f"restarted {restarted} time(s) since it was ready{ended}"

        return status

    def describe(self, cell: Cell) -> dict[str, object]:
        """What this target looks for (for --dry-run); reads nothing."""
        roles = expected_roles(cell.topology)
        front = "aggregated" if cell.topology == "aggregated" else "router"
        return {
            "kind": self.kind,
            "namespace": self.namespace,
            "release": self.release,
            "pod_selector": f"{self._selector()},{LABEL_CELL}={cell.k8s_name}",
            "roles": list(roles),
            "service": f"{cell.k8s_name}-{front} (found by label; the name assumes vllm-pd's namePrefix is empty)",
            "ready_timeout_s": self.ready_timeout_s,
            **(
                {}
                if cell.topology == "aggregated"
                else {
                    "nixl_placement": self.config.target.kubernetes.nixl.placement,
                    "ucx_tls": self.config.target.kubernetes.nixl.tls,
                }
            ),
            "note": (
                "Helm deploys the cells (helm/vllm-pd); this target only reads them."
                if self.config.target.kubernetes.gpu_budget is None
                else "this run deploys the cells itself, wave by wave (helm/vllm-pd rendered per wave): "
                "the first wave's manifests are under waves.first_wave"
            ),
        }
