"""Real tools for the chart tests: helm, strict schema validation, CRD schemas.

Tool paths come from the environment (HELM, CHECKOV, CANARY_CRD_DIR) or from where `make k8s-tools`
puts them (.cache/tools); the CRD schemas are vendored in tests/k8s/crds. A missing tool fails the
test with the command that installs it.
"""

from __future__ import annotations

import copy
import os
import subprocess
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
TOOLS = REPO / ".cache" / "tools"
CHARTS = REPO / "helm"
KUBERNETES_VERSION = "1.33.0"
CANARY_READER = CHARTS / "canary" / "ci" / "reader-values.yaml"
"""helm/canary reading an installed vllm-pd release: what tests render for "a plain install" (the chart's
own defaults refuse to install: they name no config)."""


def tool(env_var: str, default: Path) -> Path:
    """A tool binary, or a test failure that says how to install it."""
    path = Path(os.environ.get(env_var, str(default)))
    if not path.is_file() or not os.access(path, os.X_OK):
        pytest.fail(f"{path} is missing: run `make k8s-tools` (or set {env_var})")
    return path


def helm_bin() -> Path:
    return tool("HELM", TOOLS / "helm")


def checkov_bin() -> Path:
    return tool("CHECKOV", TOOLS / "checkov-venv" / "bin" / "checkov")


CRD_DIR = Path(__file__).resolve().parent / "crds"
"""The vendored CRD schemas (their source and release: crds/README.md; `make crds` checks them)."""


def crd_dir() -> Path:
    path = Path(os.environ.get("CANARY_CRD_DIR", str(CRD_DIR)))
    if not path.is_dir():
        pytest.fail(f"CRD directory {path} is missing (the repository keeps it at {CRD_DIR}; or set CANARY_CRD_DIR)")
    return path


def helm_env(home: Path) -> dict[str, str]:
    """Environment for helm with its cache, config and data in a scratch directory."""
    env = dict(os.environ)
    for name in ("HELM_CACHE_HOME", "HELM_CONFIG_HOME", "HELM_DATA_HOME"):
        directory = home / name.lower()
        directory.mkdir(parents=True, exist_ok=True)
        env[name] = str(directory)
    return env


def run_helm(args: list[str], home: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(helm_bin()), *args], capture_output=True, text=True, env=helm_env(home), timeout=120, check=False
    )


def render(
    chart: str,
    home: Path,
    values: list[Path] | None = None,
    *,
    release: str = "t",
    namespace: str = "vllm-canary",
    extra: list[str] | None = None,
) -> list[dict[str, Any]]:
    """`helm template` a chart; fails the test with helm's stderr if it does not render."""
    args = ["template", release, str(CHARTS / chart), "--namespace", namespace]
    for file in values or []:
        args += ["-f", str(file)]
    result = run_helm(args + (extra or []), home)
    if result.returncode != 0:
        pytest.fail(f"helm template {chart} failed:\n{result.stderr}")
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def render_error(chart: str, home: Path, values: list[Path], extra: list[str] | None = None) -> str:
    """stderr of a `helm template` that must fail."""
    args = ["template", "t", str(CHARTS / chart), "--namespace", "vllm-canary"]
    for file in values:
        args += ["-f", str(file)]
    result = run_helm(args + (extra or []), home)
    assert result.returncode != 0, f"helm template {chart} should have failed but rendered:\n{result.stdout[:2000]}"
    return result.stderr


# --------------------------------------------------------------------------- validation


def _strict(schema: Any) -> Any:
    """A CRD schema as the API server applies it with strict field validation: unknown fields are
    errors unless the schema preserves them."""
    if isinstance(schema, dict):
        out = {key: _strict(value) for key, value in schema.items()}
        int_or_string = out.pop("x-kubernetes-int-or-string", False)
        if int_or_string and "type" not in out and "anyOf" not in out:
            out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
        if (
            out.get("type") == "object"
            and "properties" in out
            and "additionalProperties" not in out
            and not out.get("x-kubernetes-preserve-unknown-fields")
        ):
            out["additionalProperties"] = False
        return out
    if isinstance(schema, list):
        return [_strict(item) for item in schema]
    return schema


def load_crd_schemas() -> dict[tuple[str, str], dict[str, Any]]:
    """(apiVersion, kind) -> strict openAPIV3Schema of every CRD in the CRD directory."""
    schemas: dict[tuple[str, str], dict[str, Any]] = {}
    for file in sorted(crd_dir().glob("*.yaml")):
        for crd in yaml.safe_load_all(file.read_text(encoding="utf-8")):
            if not crd or crd.get("kind") != "CustomResourceDefinition":
                continue
            group = crd["spec"]["group"]
            kind = crd["spec"]["names"]["kind"]
            for version in crd["spec"]["versions"]:
                if version.get("served", True):
                    schema = _strict(version["schema"]["openAPIV3Schema"])
                    schemas[(f"{group}/{version['name']}", kind)] = schema
    return schemas


def _walk_pod_templates(doc: Mapping[str, Any]) -> Iterator[tuple[str, Mapping[str, Any]]]:
    if doc.get("kind") == "LeaderWorkerSet":
        lwt = doc["spec"]["leaderWorkerTemplate"]
        for key in ("leaderTemplate", "workerTemplate"):
            if key in lwt:
                yield key, lwt[key]


def validate(docs: list[dict[str, Any]], crds: Mapping[tuple[str, str], dict[str, Any]]) -> list[str]:
    """Errors of every document: built-in kinds with kubernetes-validate (strict, Kubernetes
    1.33), custom resources against their CRD schema (strict), their metadata as ObjectMeta, and the
    pod templates inside a LeaderWorkerSet as Pods."""
    errors: list[str] = []
    for doc in docs:
        name = f"{doc.get('kind')}/{doc.get('metadata', {}).get('name')}"
        key = (doc.get("apiVersion", ""), doc.get("kind", ""))
        if key in crds:
            validator = jsonschema.Draft7Validator(crds[key])
            errors += [f"{name}: {'.'.join(map(str, e.path))}: {e.message}" for e in validator.iter_errors(doc)]
            wrapped = [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": doc.get("metadata", {})}]
            for where, template in _walk_pod_templates(doc):
                pod = {"apiVersion": "v1", "kind": "Pod", "metadata": copy.deepcopy(template.get("metadata", {}))}
                pod["metadata"].setdefault("name", f"{doc['metadata']['name']}-{where.lower()}")
                pod["spec"] = template["spec"]
                wrapped.append(pod)
            for inner in wrapped:
                try:
                    kubernetes_validate.validate(inner, KUBERNETES_VERSION, strict=True)
                except kubernetes_validate.ValidationError as exc:
                    path = ".".join(str(p) for p in exc.path)
                    errors.append(f"{name} ({inner['kind']} part): {path}: {exc.message}")
            continue
        try:
            kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)
        except kubernetes_validate.ValidationError as exc:
            errors.append(f"{name}: {'.'.join(str(p) for p in exc.path)}: {exc.message}")
        except kubernetes_validate.SchemaNotFoundError:
            errors.append(f"{name}: no schema for {key[0]} {key[1]} (neither built in nor a known CRD)")
    return errors


# --------------------------------------------------------------------------- manifest helpers


def kinds(docs: list[dict[str, Any]]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for doc in docs:
        counts[doc["kind"]] = counts.get(doc["kind"], 0) + 1
    return counts


def by_kind(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [doc for doc in docs if doc["kind"] == kind]


def named(docs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    for doc in docs:
        if doc["kind"] == kind and doc["metadata"]["name"] == name:
            return doc
    raise AssertionError(f"no {kind} {name} in {[d['metadata']['name'] for d in by_kind(docs, kind)]}")


def pod_specs(docs: list[dict[str, Any]]) -> Iterator[tuple[str, dict[str, Any], dict[str, Any]]]:
    """(object name, pod template metadata, pod spec) of every workload."""
    for doc in docs:
        kind, spec = doc["kind"], doc.get("spec", {})
        name = f"{kind}/{doc['metadata']['name']}"
        if kind in ("Deployment", "StatefulSet", "DaemonSet", "Job"):
            yield name, spec["template"].get("metadata", {}), spec["template"]["spec"]
        elif kind == "CronJob":
            template = spec["jobTemplate"]["spec"]["template"]
            yield name, template.get("metadata", {}), template["spec"]
        elif kind == "LeaderWorkerSet":
            for where, template in _walk_pod_templates(doc):
                yield f"{name}[{where}]", template.get("metadata", {}), template["spec"]


def env_of(container: Mapping[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container.get("env", [])}


def selects(selector: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """Whether a LabelSelector (matchLabels + matchExpressions) selects these labels."""
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expression in selector.get("matchExpressions") or []:
        key, operator, values = expression["key"], expression["operator"], expression.get("values", [])
        if operator == "In" and labels.get(key) not in values:
            return False
        if operator == "NotIn" and labels.get(key) in values:
            return False
        if operator == "Exists" and key not in labels:
            return False
        if operator == "DoesNotExist" and key in labels:
            return False
    return True
