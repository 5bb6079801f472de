"""A NetworkPolicy ingress evaluator: would this pod reach that pod on this port?

The semantics of networking.k8s.io/v1 as the API documents them (no CNI runs here):

- a policy applies to the pods of its own namespace that its `podSelector` selects (an empty
  selector selects all), and only for ingress when `policyTypes` names Ingress (absent: Ingress);
- a pod no ingress policy selects accepts everything; a selected pod accepts what at least one
  rule of one selecting policy admits (policies and rules are OR'ed);
- a rule admits a source when its `from` is absent or empty, or when one of its peers matches
  (OR across peers), and the port when its `ports` is absent or empty, or one entry matches
  (a named port is the destination container's port of that name; protocol defaults to TCP;
  `endPort` makes a range);
- within one peer the selectors are AND'ed: `podSelector` alone means pods of the policy's
  namespace, `namespaceSelector` alone every pod of the selected namespaces, both the selected
  pods in the selected namespaces; `ipBlock` peers never match (pods here have no addresses);
- a label selector: every `matchLabels` pair, and every `matchExpressions` term (In, NotIn,
  Exists, DoesNotExist; NotIn also matches when the key is absent).

Namespaces carry the label `kubernetes.io/metadata.name` as the API server sets it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Pod:
    """A pod as the policies see it: namespace, labels and named container ports."""

    name: str
    namespace: str
    labels: Mapping[str, str]
    ports: Mapping[str, int] = field(default_factory=dict)


def selector_matches(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    """Whether a LabelSelector selects these labels (an empty selector selects everything)."""
    selector = selector or {}
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != str(value):
            return False
    for term in selector.get("matchExpressions") or []:
        key, operator, values = term["key"], term["operator"], [str(v) for v in term.get("values") or []]
        present = key in labels
        if operator == "In" and not (present and labels[key] in values):
            return False
        if operator == "NotIn" and present and labels[key] in values:
            return False
        if operator == "Exists" and not present:
            return False
        if operator == "DoesNotExist" and present:
            return False
        if operator not in ("In", "NotIn", "Exists", "DoesNotExist"):
            raise ValueError(f"unknown matchExpressions operator {operator!r}")
    return True


def namespace_labels(namespace: str, extra: Mapping[str, Mapping[str, str]] | None = None) -> dict[str, str]:
    """A namespace's labels: its name label plus any the test gives it."""
    return {"kubernetes.io/metadata.name": namespace, **dict((extra or {}).get(namespace, {}))}


def peer_matches(
    peer: Mapping[str, Any],
    policy_namespace: str,
    source: Pod,
    namespaces: Mapping[str, Mapping[str, str]] | None = None,
) -> bool:
    """Whether one NetworkPolicyPeer matches the source pod (its selectors AND'ed)."""
    if "ipBlock" in peer:
        return False
    if "podSelector" not in peer and "namespaceSelector" not in peer:
        raise ValueError(f"a NetworkPolicyPeer needs podSelector, namespaceSelector or ipBlock: {peer}")
    if "namespaceSelector" in peer:
        if not selector_matches(peer["namespaceSelector"], namespace_labels(source.namespace, namespaces)):
            return False
    elif source.namespace != policy_namespace:
        return False
    return "podSelector" not in peer or selector_matches(peer["podSelector"], source.labels)


def port_matches(entry: Mapping[str, Any], destination: Pod, port: int, protocol: str) -> bool:
    """Whether one NetworkPolicyPort entry admits this destination port."""
    if str(entry.get("protocol", "TCP")) != protocol:
        return False
    if "port" not in entry:
        return True
    wanted = entry["port"]
    if isinstance(wanted, str):
        return destination.ports.get(wanted) == port
    end = int(entry.get("endPort", wanted))
    return int(wanted) <= port <= end


def rule_admits(
    rule: Mapping[str, Any],
    policy_namespace: str,
    source: Pod,
    destination: Pod,
    port: int,
    protocol: str,
    namespaces: Mapping[str, Mapping[str, str]] | None,
) -> bool:
    """Whether one ingress rule admits the connection (peers OR'ed, ports OR'ed)."""
    peers = rule.get("from") or []
    if peers and not any(peer_matches(p, policy_namespace, source, namespaces) for p in peers):
        return False
    ports = rule.get("ports") or []
    return not ports or any(port_matches(p, destination, port, protocol) for p in ports)


def selecting_policies(policies: Iterable[Mapping[str, Any]], destination: Pod) -> list[Mapping[str, Any]]:
    """The ingress NetworkPolicies that select a pod."""
    out: list[Mapping[str, Any]] = []
    for policy in policies:
        if policy.get("kind") != "NetworkPolicy":
            continue
        spec = policy.get("spec") or {}
        if "Ingress" not in (spec.get("policyTypes") or ["Ingress"]):
            continue
        if policy["metadata"].get("namespace") != destination.namespace:
            continue
        if selector_matches(spec.get("podSelector"), destination.labels):
            out.append(policy)
    return out


def admitted(
    policies: Iterable[Mapping[str, Any]],
    source: Pod,
    destination: Pod,
    port: int | str,
    *,
    protocol: str = "TCP",
    namespaces: Mapping[str, Mapping[str, str]] | None = None,
) -> bool:
    """Whether the policies let `source` open a connection to `destination` on `port` (a number,
    or the name of one of the destination's container ports)."""
    number = destination.ports[port] if isinstance(port, str) else port
    selecting = selecting_policies(list(policies), destination)
    if not selecting:
        return True
    return any(
        rule_admits(rule, policy["metadata"]["namespace"], source, destination, number, protocol, namespaces)
        for policy in selecting
        for rule in (policy.get("spec") or {}).get("ingress") or []
    )
