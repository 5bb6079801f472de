"""helm/README.md's install is what renders: its fenced bash blocks (heredoc files, `helm install`,
`canary render-values`, `helm template`) are run as `helm template` with the real helm binary and the
real canary CLI, and the results claim, its mount at /results and the pull secrets of the controller and
of the cells must appear. The README must never tell anyone to `helm install` the vllm-pd chart."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from k8s_helpers import REPO, by_kind, load_crd_schemas, render, run_helm, validate

README = REPO / "helm" / "README.md"
NAMESPACE = "vllm-canary"
_FENCE = re.compile(r"^```bash\n(.*?)^```", re.M | re.S)
_HEREDOC = re.compile(r"^cat > (\S+) <<'EOF'\n(.*?)^EOF\n", re.M | re.S)


def _blocks() -> list[str]:
    return _FENCE.findall(README.read_text(encoding="utf-8"))


def _commands(block: str) -> list[list[str]]:
    """The block's commands (heredocs taken out, continuations joined, comments dropped, pipes cut)."""
    text = _HEREDOC.sub("", block).replace("\\\n", " ")
    lines = [line.split(" | ")[0].strip() for line in text.splitlines()]
    return [shlex.split(line, comments=True) for line in lines if line and not line.startswith("#")]


def _documented(tmp_path: Path) -> list[list[str]]:
    """Every documented command, with $NS set, heredoc files written under tmp_path and output files
    redirected there."""
    files: dict[str, str] = {}
    commands: list[list[str]] = []
    for block in _blocks():
        for name, body in _HEREDOC.findall(block):
            (tmp_path / name).write_text(body, encoding="utf-8")
            files[name] = str(tmp_path / name)
        commands += _commands(block)
    out = []
    for argv in commands:
        argv = [NAMESPACE if a == "$NS" else a for a in argv]
        argv = [files.get(a, a) for a in argv]
        if "-o" in argv and argv[:2] == ["canary", "render-values"]:
            at = argv.index("-o") + 1
            files[argv[at]] = str(tmp_path / argv[at])
            argv[at] = files[argv[at]]
        out.append(argv)
    # a file named before the block that writes it (wave.yaml) is resolved in a second pass
    return [[files.get(a, a) for a in argv] for argv in out]


def _helm_template(argv: list[str], home: Path) -> list[dict[str, Any]]:
    assert argv[:2] in (["helm", "install"], ["helm", "template"]), argv
    result = run_helm(["template", *argv[2:]], home)
    assert result.returncode == 0, f"{shlex.join(argv)}:\n{result.stderr}"
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def _pod_specs(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    specs = []
    for doc in docs:
        spec = doc.get("spec", {})
        if doc["kind"] == "CronJob":
            specs.append(spec["jobTemplate"]["spec"]["template"]["spec"])
        elif doc["kind"] in ("Job", "Deployment", "StatefulSet"):
            specs.append(spec["template"]["spec"])
        elif doc["kind"] == "LeaderWorkerSet":
            lwt = spec["leaderWorkerTemplate"]
            specs += [lwt[k]["spec"] for k in ("leaderTemplate", "workerTemplate") if k in lwt]
        elif doc["kind"] == "Pod":
            specs.append(spec)
    return specs


def test_the_readme_never_installs_a_rendered_matrix() -> None:
    installs = [argv for block in _blocks() for argv in _commands(block) if argv[:2] == ["helm", "install"]]
    assert installs and all(argv[3] == "helm/canary" for argv in installs), installs
    assert "gpu_budget" in README.read_text(encoding="utf-8")


def test_the_documented_install_keeps_results_and_pulls_with_the_secret(tmp_path: Path) -> None:
    (install,) = [argv for argv in _documented(tmp_path) if argv[:2] == ["helm", "install"]]
    docs = _helm_template(install, tmp_path / "helm-home")
    assert validate(docs, load_crd_schemas()) == []
    (claim,) = [d for d in by_kind(docs, "PersistentVolumeClaim") if d["metadata"]["name"].endswith("-results")]
    assert claim["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    assert claim["spec"]["resources"]["requests"]["storage"] == "20Gi"
    assert claim["spec"]["accessModes"] == ["ReadWriteOnce"] and claim["spec"]["storageClassName"] == "standard"
    (cronjob,) = by_kind(docs, "CronJob")
    (pod,) = _pod_specs([cronjob])
    volumes = {v["name"]: v for v in pod["volumes"]}
    (container,) = pod["containers"]
    (results,) = [m for m in container["volumeMounts"] if m["mountPath"] == "/results"]
    assert "subPath" not in results
    assert volumes[results["name"]]["persistentVolumeClaim"]["claimName"] == claim["metadata"]["name"]
    assert pod["imagePullSecrets"] == [{"name": "regcred"}]
    args = container["args"]
    assert args[args.index("target.kubernetes.image_pull_secrets=[regcred]") - 1] == "--set"
    assert "--results-dir" in args and args[args.index("--results-dir") + 1] == "/results"


def test_the_documented_wave_preview_pulls_every_cell_with_the_secret(tmp_path: Path) -> None:
    documented = _documented(tmp_path)
    (values_cmd,) = [argv for argv in documented if argv[:2] == ["canary", "render-values"]]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-m", "canary", *values_cmd[1:]],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    (preview,) = [argv for argv in documented if argv[:2] == ["helm", "template"]]
    docs = _helm_template(preview, tmp_path / "helm-home")
    specs = _pod_specs(docs)
    assert specs, [d["kind"] for d in docs]
    for spec in specs:
        assert spec.get("imagePullSecrets") == [{"name": "regcred"}], spec.get("containers", [{}])[0].get("name")


def test_without_persistence_results_go_with_the_pod_and_an_existing_claim_is_used(tmp_path: Path) -> None:
    home = tmp_path / "helm-home"
    plain = render("canary", home)
    assert not [d for d in by_kind(plain, "PersistentVolumeClaim") if d["metadata"]["name"].endswith("-results")]
    (pod,) = _pod_specs(by_kind(plain, "CronJob"))
    (results,) = [m for m in pod["containers"][0]["volumeMounts"] if m["mountPath"] == "/results"]
    assert results["name"] == "scratch" and "emptyDir" in {v["name"]: v for v in pod["volumes"]}["scratch"]
    kept = render(
        "canary",
        home,
        extra=["--set", "results.persistence.enabled=true", "--set", "results.persistence.existingClaim=mine"],
    )
    assert not [d for d in by_kind(kept, "PersistentVolumeClaim") if d["metadata"]["name"].endswith("-results")]
    (pod,) = _pod_specs(by_kind(kept, "CronJob"))
    claims = [v["persistentVolumeClaim"]["claimName"] for v in pod["volumes"] if "persistentVolumeClaim" in v]
    assert claims == ["mine"]


@pytest.mark.parametrize(
    ("setting", "message"),
    [("results.persistence.accessModes={ReadOnlyMany}", "accessModes"), ("results.persistence.size=lots", "size")],
)
def test_the_schema_refuses_a_bad_results_setting(setting: str, message: str, tmp_path: Path) -> None:
    done = run_helm(["template", "t", str(REPO / "helm" / "canary"), "--set", setting], tmp_path)
    assert done.returncode != 0 and message in done.stderr, done.stderr
