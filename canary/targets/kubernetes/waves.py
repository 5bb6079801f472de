"""Deploy a wave of cells on Kubernetes and tear it down: the controller side of the GPU budget.

With `target.kubernetes.gpu_budget` set, the controller owns the cells' lifecycle: for each wave it
renders the vllm-pd chart for just that wave's cells (`helm template`, the same chart and the same
`canary render-values` values as a Helm install, plus `target.kubernetes.chart_values`), creates
the objects through the Kubernetes API, and afterwards deletes every object it created and waits
until the wave's pods are gone, before the next wave may take the GPUs. Teardown runs on any exit
of the wave (checks done, an exception, Ctrl-C, SIGTERM at the CronJob's deadline). A controller
killed outright (SIGKILL) leaves objects behind: `sweep()` at the start of the next run deletes
the objects a wave created (they carry the label canary.vllm.dev/managed-by=canary-waves) of its own
run or of a dead one, never a live run's: each object carries its run's id (canary.vllm.dev/run),
and a run deploys and sweeps only while it holds the release's run lease
(canary.targets.kubernetes.lease), which a second run of the release cannot take while the first
renews it.

Objects without a cell (the release's ServiceAccount, NetworkPolicies, model-cache PVC, the KV layout
probe's ConfigMap) are created
once per run and deleted at its end; one that already exists (installed by Helm) is used and left.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from canary.config import CanaryConfig
from canary.errors import CanaryError
from canary.paths import REPO_ROOT
from canary.plan.cell import Cell
from canary.plan.kube_names import (
    CHART_NAME,
    LABEL_CELL,
    LABEL_INSTANCE,
    LABEL_MANAGED,
    LABEL_NAME,
    LABEL_RUN,
    MANAGED_VALUE,
)
from canary.targets.cli_deadline import run_with_deadline
from canary.targets.kubernetes.lease import LeaseError, RunLease
from canary.targets.kubernetes.values import render_values

HELM_TIMEOUT_S = 120.0

# (apiVersion, kind) -> plural: every kind the vllm-pd chart renders. helm/canary's Role grants
# exactly these (tests/k8s/test_k8s_waves.py keeps the two equal).
RESOURCES: dict[tuple[str, str], str] = {
    ("apps/v1", "Deployment"): "deployments",
    ("v1", "Service"): "services",
    ("v1", "ServiceAccount"): "serviceaccounts",
    ("v1", "ConfigMap"): "configmaps",
    ("v1", "PersistentVolumeClaim"): "persistentvolumeclaims",
    ("networking.k8s.io/v1", "NetworkPolicy"): "networkpolicies",
    ("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet"): "leaderworkersets",
}
# Kinds a wave's cells consist of (swept when a killed run left them).
CELL_KINDS: tuple[tuple[str, str], ...] = (
    ("apps/v1", "Deployment"),
    ("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet"),
    ("v1", "Service"),
    ("networking.k8s.io/v1", "NetworkPolicy"),
)


class WaveError(CanaryError):
    """A wave could not be rendered, created or torn down."""


@dataclass(frozen=True)
class ObjectRef:
    """An object the controller created."""

    api_version: str
    kind: str
    name: str

    def __str__(self) -> str:
        return f"{self.kind}/{self.name}"


def collection_path(api_version: str, kind: str, namespace: str) -> str:
    """The REST path of a namespaced collection."""
    plural = RESOURCES.get((api_version, kind))
    if plural is None:
        known = ", ".join(f"{k} ({v})" for v, k in RESOURCES)
        raise WaveError(
            f"the vllm-pd chart rendered {kind} ({api_version}), which the controller cannot create: {known}"
        )
    prefix = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
    return f"{prefix}/namespaces/{namespace}/{plural}"


def find_helm() -> str:
    """The helm binary: $HELM, helm on PATH, or the project's .cache/tools/helm."""
    candidates = [os.environ.get("HELM", ""), shutil.which("helm") or "", str(REPO_ROOT / ".cache" / "tools" / "helm")]
    for candidate in candidates:
        if candidate and Path(candidate).is_file() and os.access(candidate, os.X_OK):
            return candidate
    raise WaveError("helm not found (set HELM, put helm on PATH, or run `make k8s-tools`): waves are rendered with it")


def resolve_chart(path_text: str) -> Path:
    """The chart directory: absolute, relative to the working directory, or to the repository."""
    path = Path(path_text)
    for candidate in [path] if path.is_absolute() else [Path.cwd() / path, REPO_ROOT / path]:
        if (candidate / "Chart.yaml").is_file():
            return candidate
    raise WaveError(f"target.kubernetes.chart: no chart at {path_text!r} (looked for Chart.yaml)")


def gpu_requests(obj: Mapping[str, Any], resource: str = "nvidia.com/gpu") -> int:
    """GPUs an object holds: the sum over its pod templates' containers x replicas (LWS: x size)."""
    kind = obj.get("kind")
    spec = obj.get("spec") or {}
    templates: list[tuple[int, Mapping[str, Any]]] = []
    if kind == "Pod":
        templates.append((1, spec))
    elif kind == "Deployment":
        templates.append((int(spec.get("replicas", 1)), (spec.get("template") or {}).get("spec") or {}))
    elif kind == "LeaderWorkerSet":
        lwt = spec.get("leaderWorkerTemplate") or {}
        replicas, size = int(spec.get("replicas", 1)), int(lwt.get("size", 1))
        leader = (lwt.get("leaderTemplate") or lwt.get("workerTemplate") or {}).get("spec") or {}
        worker = (lwt.get("workerTemplate") or {}).get("spec") or {}
        templates += [(replicas, leader), (replicas * (size - 1), worker)]
    total = 0
    for count, pod_spec in templates:
        for container in pod_spec.get("containers") or []:
            requests = (container.get("resources") or {}).get("requests") or {}
            limits = (container.get("resources") or {}).get("limits") or {}
            total += count * int(requests.get(resource, limits.get(resource, 0)) or 0)
    return total


class WaveDeployer:
    """Renders, creates and deletes the objects of one wave at a time."""

    def __init__(
        self,
        config: CanaryConfig,
        api_client: Any,
        *,
        run: str,
        helm: str | None = None,
        config_dir: Path | None = None,
        poll_interval_s: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        settings = config.target.kubernetes
        self.config = config
        self.api_client = api_client
        self.namespace = settings.namespace
        self.release = settings.release
        self.run = run
        self.helm = helm
        self.config_dir = config_dir
        self.poll_interval_s = poll_interval_s
        self.teardown_timeout_s = float(settings.teardown_timeout_s)
        self._clock = clock
        self._sleep = sleep
        self.release_objects: list[ObjectRef] = []
        self.lease = RunLease(
            self._call,
            namespace=self.namespace,
            release=self.release,
            run=run,
            duration_s=settings.lease_duration_s,
            wait_s=float(settings.lease_wait_s),
            poll_interval_s=poll_interval_s,
            clock=clock,
            sleep=sleep,
        )

    # ------------------------------------------------------------------ REST

    def _call(
        self, method: str, path: str, body: Any = None, query: list[tuple[str, str]] | None = None
    ) -> tuple[int, dict[str, Any]]:
        """(status, parsed JSON body) of one request."""
        headers = {"Accept": "application/json"}
        if body is not None:  # a PATCH is a JSON merge patch (the run lease's renewals)
            headers["Content-Type"] = "application/merge-patch+json" if method == "PATCH" else "application/json"
        serialized = self.api_client.param_serialize(
            method=method,
            resource_path=path,
            query_params=query or [],
            header_params=headers,
            body=body,
            auth_settings=["BearerToken"],
        )
        try:
            response = self.api_client.call_api(*serialized[:4])
            response.read()
        except (OSError, ValueError) as exc:
            raise WaveError(f"{method} {path} failed: {exc}") from None
        try:
            data = json.loads(response.data) if response.data else {}
        except ValueError:
            data = {"message": response.data[:200].decode("utf-8", "replace")}
        return int(response.status), data if isinstance(data, dict) else {}

    def _create(self, obj: dict[str, Any]) -> int:
        path = collection_path(str(obj.get("apiVersion")), str(obj.get("kind")), self.namespace)
        status, data = self._call("POST", path, body=obj)
        if status not in (200, 201, 202, 409):
            name = obj.get("metadata", {}).get("name")
            raise WaveError(f"creating {obj.get('kind')}/{name} failed: HTTP {status} {data.get('message', '')}")
        return status

    def _delete(self, ref: ObjectRef) -> None:
        path = f"{collection_path(ref.api_version, ref.kind, self.namespace)}/{ref.name}"
        status, data = self._call("DELETE", path, body={"propagationPolicy": "Background"})
        if status not in (200, 202, 404):
            raise WaveError(f"deleting {ref} failed: HTTP {status} {data.get('message', '')}")

    def _list(self, api_version: str, kind: str, selector: str) -> list[dict[str, Any]]:
        path = (
            collection_path(api_version, kind, self.namespace)
            if (api_version, kind) in RESOURCES
            else (f"/api/v1/namespaces/{self.namespace}/pods")
        )
        status, data = self._call("GET", path, query=[("labelSelector", selector)])
        if status == 404:  # the kind is not installed (e.g. no LeaderWorkerSet CRD)
            return []
        if status != 200:
            raise WaveError(f"listing {kind} in {self.namespace} failed: HTTP {status} {data.get('message', '')}")
        return [item for item in data.get("items") or [] if isinstance(item, dict)]

    # ------------------------------------------------------------------ rendering

    def render(self, cells: Sequence[Cell]) -> list[dict[str, Any]]:
        """The vllm-pd chart rendered for these cells (helm template), labelled as ours."""
        settings = self.config.target.kubernetes
        values = render_values(self.config, list(cells), run=self.run, config_dir=self.config_dir)
        chart = resolve_chart(settings.chart)
        helm = self.helm or find_helm()
        with tempfile.TemporaryDirectory(prefix="canary-wave-") as scratch:
            values_file = Path(scratch) / "wave-values.yaml"
            values_file.write_text(yaml.safe_dump(values, sort_keys=False), encoding="utf-8")
            args = [helm, "template", self.release, str(chart), "--namespace", self.namespace]
            for extra in settings.chart_values:
                args += ["-f", extra]
            args += ["-f", str(values_file)]
            env = {**os.environ, **{name: str(Path(scratch) / name.lower()) for name in _HELM_HOMES}}
            try:  # a helm past its deadline is asked for its Go stacks first (cli_deadline)
                done = run_with_deadline(args, env=env, timeout_s=HELM_TIMEOUT_S)
            except (OSError, subprocess.TimeoutExpired) as exc:
                raise WaveError(f"helm template {chart} failed: {exc}") from None
        if done.returncode != 0:
            raise WaveError(f"helm template {chart} failed: {done.stderr.strip()[-2000:]}")
        docs = [doc for doc in yaml.safe_load_all(done.stdout) if isinstance(doc, dict) and doc.get("kind")]
        for doc in docs:
            metadata = doc.setdefault("metadata", {})
            metadata["namespace"] = self.namespace
            metadata.setdefault("labels", {})[LABEL_MANAGED] = MANAGED_VALUE
        return docs

    # ------------------------------------------------------------------ lifecycle

    def _selector(self) -> str:
        return f"{LABEL_NAME}={CHART_NAME},{LABEL_INSTANCE}={self.release},{LABEL_MANAGED}={MANAGED_VALUE}"

    def _live_runs(self) -> set[str]:
        """Runs other than this one that hold a live run lease of the release (none while we hold it)."""
        try:
            holder = self.lease.live_other()
        except LeaseError as exc:
            raise WaveError(f"not sweeping: {exc}") from None
        return {holder.run} if holder is not None else set()

    def sweep(self) -> list[str]:
        """Delete cell objects that this run or a dead run left (our label); returns what went.

        A live run's objects (its run id is the holder of a live lease) are never touched."""
        gone: list[str] = []
        live = self._live_runs()
        for api_version, kind in CELL_KINDS:
            for item in self._list(api_version, kind, self._selector()):
                labels = (item.get("metadata") or {}).get("labels") or {}
                if labels.get(LABEL_MANAGED) != MANAGED_VALUE or labels.get(LABEL_INSTANCE) != self.release:
                    continue  # the API server filters; kmock does not, and we never delete a stranger
                if labels.get(LABEL_RUN) in live:
                    continue  # another live run's cell
                ref = ObjectRef(api_version, kind, str(item["metadata"]["name"]))
                self._delete(ref)
                gone.append(str(ref))
        return gone

    def live_pods(self, cells: Sequence[Cell]) -> list[str]:
        """Names of this run's pods that belong to these cells."""
        names = {cell.k8s_name for cell in cells}
        selector = f"{LABEL_NAME}={CHART_NAME},{LABEL_INSTANCE}={self.release},{LABEL_RUN}={self.run}"
        out: list[str] = []
        for pod in self._list("v1", "Pod", selector):
            labels = (pod.get("metadata") or {}).get("labels") or {}
            if labels.get(LABEL_RUN) == self.run and labels.get(LABEL_CELL) in names:
                out.append(str(pod["metadata"]["name"]))
        return out

    def wait_gone(self, cells: Sequence[Cell]) -> None:
        """Wait until the cells' pods are gone (their GPUs free); WaveError at the deadline."""
        started = self._clock()
        while True:
            left = self.live_pods(cells)
            if not left:
                return
            if self._clock() - started >= self.teardown_timeout_s:
                raise WaveError(
                    f"{len(left)} pod(s) still there {self.teardown_timeout_s:.0f}s after the wave was deleted "
                    f"({', '.join(sorted(left)[:5])}); not starting another wave (target.kubernetes.teardown_timeout_s)"
                )
            self._sleep(self.poll_interval_s)

    @contextmanager
    def wave(self, cells: Sequence[Cell]) -> Iterator[list[ObjectRef]]:
        """Create the wave's objects; on exit delete every one of them and wait for the pods to go."""
        try:
            self.lease.check()
        except LeaseError as exc:
            raise WaveError(str(exc)) from None
        docs = self.render(cells)
        created: list[ObjectRef] = []
        try:
            for doc in docs:
                ref = ObjectRef(str(doc["apiVersion"]), str(doc["kind"]), str(doc["metadata"]["name"]))
                is_cell = LABEL_CELL in (doc["metadata"].get("labels") or {})
                if not is_cell and ref in self.release_objects:
                    continue
                status = self._create(doc)
                if status == 409:
                    if is_cell:
                        raise WaveError(f"{ref} already exists: another run or release owns it")
                    continue  # a release object Helm installed: use it, leave it
                (created if is_cell else self.release_objects).append(ref)
            yield created
        finally:
            errors = self._delete_all(created)
            if errors:
                raise WaveError("tearing the wave down failed: " + "; ".join(errors))
            self.wait_gone(cells)

    def _delete_all(self, refs: Sequence[ObjectRef]) -> list[str]:
        errors: list[str] = []
        for ref in reversed(refs):
            try:
                self._delete(ref)
            except WaveError as exc:
                errors.append(str(exc))
        return errors

    def close(self) -> None:
        """Delete the release objects this run created."""
        errors = self._delete_all(self.release_objects)
        self.release_objects = []
        if errors:
            raise WaveError("deleting the release objects failed: " + "; ".join(errors))

    @contextmanager
    def session(self) -> Iterator[WaveDeployer]:
        """Sweep leftovers first; delete the run's release objects at the end (inside `self.lease.held()`)."""
        self.sweep()
        try:
            yield self
        finally:
            self.close()


_HELM_HOMES = ("HELM_CACHE_HOME", "HELM_CONFIG_HOME", "HELM_DATA_HOME")
