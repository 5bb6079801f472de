"""How canary names and labels a cell's Kubernetes objects (the helm/vllm-pd chart's side of a cell).

A cell's Kubernetes name is its id as a DNS-1123 label of at most K8S_NAME_MAX characters (a short
hash keeps cut names unique); every object the chart renders carries the LABEL_* labels below, and
the targets find a cell's pods and Services by them.
"""

from __future__ import annotations

import hashlib
import re

K8S_NAME_MAX = 40

LABEL_NAME = "app.kubernetes.io/name"
LABEL_INSTANCE = "app.kubernetes.io/instance"
LABEL_RUN = "canary.vllm.dev/run"
LABEL_CELL = "canary.vllm.dev/cell"
LABEL_ROLE = "canary.vllm.dev/role"
LABEL_LWS_ROLE = "canary.vllm.dev/lws-role"
LABEL_MANAGED = "canary.vllm.dev/managed-by"
MANAGED_VALUE = "canary-waves"
CHART_NAME = "vllm-pd"

DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
LABEL_VALUE_MAX = 63


def k8s_name_for(identifier: str) -> str:
    """A DNS-1123 label (<= K8S_NAME_MAX chars) derived from a cell id, unique by a short hash if cut."""
    name = re.sub(r"[^a-z0-9]+", "-", identifier.lower()).strip("-")
    if len(name) <= K8S_NAME_MAX:
        return name
    digest = hashlib.sha256(identifier.encode()).hexdigest()[:6]
    return f"{name[: K8S_NAME_MAX - 7].rstrip('-')}-{digest}"


def is_dns_label(name: str) -> bool:
    """Whether a name is a DNS-1123 label that fits a cell's Kubernetes name (<= K8S_NAME_MAX chars)."""
    return bool(DNS_LABEL.match(name)) and len(name) <= K8S_NAME_MAX


def is_label_value(value: str) -> bool:
    """Whether a text can be a Kubernetes label value."""
    return bool(LABEL_VALUE.match(value)) and len(value) <= LABEL_VALUE_MAX
