"""What each engine of a started cell says about its own image: the ref it runs, the image digest the
target resolved (the container target records it in deployment.evidence["image_digests"]), and the
vLLM version the server reports on GET /version (vLLM's OpenAI server serves {"version": "..."}).

A version that cannot be read (no /version, not JSON, a deadline passed) is None, never a guess.
"""

from __future__ import annotations

import json
import threading
import urllib.request
from collections.abc import Mapping

from canary.targets.base import Deployment

VERSION_TIMEOUT_S = 5.0
"""Deadline of one GET /version."""
MAX_BODY = 65536
"""Bytes of a /version answer read at most."""


def engine_version(base_url: str, timeout_s: float = VERSION_TIMEOUT_S) -> str | None:
    """The vLLM version a server reports on <base_url>/version (None on any failure). The whole request,
    headers and body included, has one deadline: it runs in a daemon thread that is waited for timeout_s."""
    if not base_url:
        return None
    found: list[str | None] = []
    worker = threading.Thread(
        target=lambda: found.append(_fetch_version(base_url.rstrip("/") + "/version", timeout_s)),
        name="canary-engine-version",
        daemon=True,
    )
    worker.start()
    worker.join(timeout_s)
    return found[0] if found else None


def _fetch_version(url: str, timeout_s: float) -> str | None:
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            body = json.loads(response.read(MAX_BODY))
    except (OSError, ValueError):  # URLError and HTTPError are OSErrors; a non-JSON body a ValueError
        return None
    version = body.get("version") if isinstance(body, dict) else None
    return version if isinstance(version, str) and version else None


def _role_mapping(evidence: Mapping[str, object], key: str) -> Mapping[str, object]:
    value = evidence.get(key)
    return value if isinstance(value, Mapping) else {}


def image_facts(deployment: Deployment, timeout_s: float = VERSION_TIMEOUT_S) -> dict[str, dict[str, str | None]]:
    """Per engine role: {ref, digest, vllm_version}. The ref is the image the target ran (the container
    target's evidence["containers"][role]["image"]), else the cell's ref for the role."""
    digests = _role_mapping(deployment.evidence, "image_digests")
    containers = _role_mapping(deployment.evidence, "containers")
    out: dict[str, dict[str, str | None]] = {}
    for role in deployment.engine_roles:
        ran = containers.get(role)
        ref = ran.get("image") if isinstance(ran, Mapping) else None
        digest = digests.get(role)
        out[role] = {
            "ref": ref if isinstance(ref, str) and ref else deployment.cell.image_ref_for(role),
            "digest": digest if isinstance(digest, str) and digest else None,
            "vllm_version": engine_version(deployment.servers[role].base_url, timeout_s),
        }
    return out
