"""checkov on the rendered charts: zero findings, and every skip carries its reason."""

from __future__ import annotations

import json
import re
import subprocess
from typing import Any

import pytest
import yaml
from k8s_helpers import CHARTS, REPO, checkov_bin, render

from canary.config.load import validate_config
from canary.plan.matrix import plan
from canary.targets.kubernetes.values import render_values

CHECKOV_CONFIG = REPO / "tests" / "k8s" / "checkov.yaml"
# Resource-scoped skips allowed in the charts (reason in a checkov.io/skipN annotation).
ALLOWED_ANNOTATION_SKIPS = {("CKV_K8S_38", "CronJob"), ("CKV_K8S_38", "Job")}


@pytest.fixture(scope="module")
def checkov_report(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    home = tmp_path_factory.mktemp("helm-home")
    out = tmp_path_factory.mktemp("rendered")
    cases: dict[str, list[dict[str, Any]]] = {
        "vllm-pd-defaults": render("vllm-pd", home),
    }
    for values in sorted((CHARTS / "vllm-pd" / "ci").glob("*.yaml")):
        cases[f"vllm-pd-{values.stem}"] = render("vllm-pd", home, [values])
    for values in sorted((CHARTS / "canary" / "ci").glob("*.yaml")):
        cases[f"canary-{values.stem}"] = render("canary", home, [values])
    config = validate_config(yaml.safe_load((REPO / "configs" / "h200-mrv2-pd.yaml").read_text()), "h200")
    cells = [c for c in plan(config).planned() if c.backend == "FLASHINFER" and c.runner == "v2"][:6]
    matrix_values = out / "matrix-values.yaml"
    matrix_values.write_text(yaml.safe_dump(render_values(config, cells)))
    cases["vllm-pd-h200-matrix"] = render("vllm-pd", home, [matrix_values])
    manifests = out / "manifests"
    manifests.mkdir()
    for name, docs in cases.items():
        (manifests / f"{name}.yaml").write_text(yaml.safe_dump_all(docs))
    result = subprocess.run(
        [
            str(checkov_bin()),
            "--config-file",
            str(CHECKOV_CONFIG),
            "-d",
            str(manifests),
            "-o",
            "json",
            "--skip-download",
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    try:
        report = json.loads(result.stdout)
    except json.JSONDecodeError:
        pytest.fail(
            f"checkov printed no JSON (exit {result.returncode}):\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
        )
    if isinstance(report, list):  # one entry per framework
        assert len(report) == 1, [r.get("check_type") for r in report]
        report = report[0]
    return dict(report)


def test_checkov_finds_nothing(checkov_report: dict[str, Any]) -> None:
    summary = checkov_report["summary"]
    failed = [
        f"{c['check_id']} {c['check_name']}: {c['resource']} ({c['file_path']})"
        for c in checkov_report["results"]["failed_checks"]
    ]
    assert failed == [], "\n".join(failed)
    assert summary["parsing_errors"] == 0
    assert summary["resource_count"] >= 40
    assert summary["passed"] >= 500  # the checks really ran over every workload


def test_every_skip_is_explained(checkov_report: dict[str, Any]) -> None:
    for skipped in checkov_report["results"]["skipped_checks"]:
        kind = skipped["resource"].split(".")[0]
        assert (skipped["check_id"], kind) in ALLOWED_ANNOTATION_SKIPS, skipped["resource"]
        comment = skipped["check_result"].get("suppress_comment", "")
        assert len(comment) > 20, f"{skipped['check_id']} on {skipped['resource']} is skipped without a reason"


def test_checkov_config_skips_have_written_reasons() -> None:
    config = yaml.safe_load(CHECKOV_CONFIG.read_text())
    lines = CHECKOV_CONFIG.read_text().splitlines()
    for check in config.get("skip-check", []):
        index = next(i for i, line in enumerate(lines) if re.fullmatch(rf"\s*-\s*{check}\s*", line))
        reason = []
        for line in reversed(lines[:index]):
            if not line.strip().startswith("#"):
                break
            reason.append(line)
        assert len(" ".join(reason)) > 80, f"{check} is skipped in {CHECKOV_CONFIG.name} without a written reason"
