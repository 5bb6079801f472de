"""The vendored CRD schemas (tests/k8s/crds) are the pinned upstream files and nothing else."""

from __future__ import annotations

import hashlib

import yaml
from k8s_helpers import CRD_DIR, load_crd_schemas


def test_vendored_crds_match_their_checksums() -> None:
    sums = {}
    for line in (CRD_DIR / "SHA256SUMS").read_text(encoding="utf-8").splitlines():
        digest, name = line.split(maxsplit=1)
        sums[name] = digest
    files = {path.name: hashlib.sha256(path.read_bytes()).hexdigest() for path in CRD_DIR.glob("*.yaml")}
    assert files == sums, "tests/k8s/crds changed without `make crds CRDS_REFRESH=1` (or SHA256SUMS is stale)"


def test_vendored_crds_cover_every_custom_kind_the_charts_render() -> None:
    kinds = {kind for _, kind in load_crd_schemas()}
    assert kinds == {"ServiceMonitor", "PodMonitor", "PrometheusRule", "LeaderWorkerSet"}
    readme = (CRD_DIR / "README.md").read_text(encoding="utf-8")
    for path in CRD_DIR.glob("*.yaml"):
        assert f"`{path.name}`" in readme, f"{path.name} has no source line in tests/k8s/crds/README.md"
        for crd in yaml.safe_load_all(path.read_text(encoding="utf-8")):
            if crd and "operator.prometheus.io/version" in crd["metadata"].get("annotations", {}):
                assert crd["metadata"]["annotations"]["operator.prometheus.io/version"] == "0.93.0"
