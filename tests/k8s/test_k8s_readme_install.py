"""helm/README.md's install is what renders: its fenced bash blocks (heredoc files, `helm install`,
`canary render-values`, `helm template`) are run as `helm template` with the real helm binary and the
real canary CLI, and the results claim, its mount at /results, the kept model cache the waves mount and
the pull secrets of the controller and of the cells must appear; the `kubectl` commands that open
summary.html must name what the install renders. The chart's defaults refuse to install with the
messages the README quotes. The README must never tell anyone to `helm install` the vllm-pd chart."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from k8s_helpers import CANARY_READER, CHARTS, REPO, by_kind, load_crd_schemas, render, run_helm, validate

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


def _configmap_values(docs: list[dict[str, Any]]) -> dict[str, Any]:
    (configmap,) = [d for d in by_kind(docs, "ConfigMap") if d["metadata"]["name"].endswith("-config")]
    values: dict[str, Any] = yaml.safe_load(configmap["data"]["vllm-pd-values.yaml"])
    return values


def test_the_documented_install_keeps_the_model_cache_and_the_waves_only_mount_it(tmp_path: Path) -> None:
    """The waves' objects are created and deleted every run: the weights' claim is not one of them."""
    (install,) = [argv for argv in _documented(tmp_path) if argv[:2] == ["helm", "install"]]
    docs = _helm_template(install, tmp_path / "helm-home")
    (cache,) = [d for d in by_kind(docs, "PersistentVolumeClaim") if d["metadata"]["name"].endswith("-model-cache")]
    assert cache["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    assert cache["metadata"]["namespace"] == NAMESPACE  # where the cells run
    assert cache["spec"]["resources"]["requests"]["storage"] == "200Gi"
    assert cache["spec"]["storageClassName"] == "shared-nfs"
    wave_values = _configmap_values(docs)
    assert wave_values["modelCache"] == {"enabled": True, "existingClaim": cache["metadata"]["name"]}
    values_file = tmp_path / "wave-cluster.yaml"
    values_file.write_text(yaml.safe_dump(wave_values), encoding="utf-8")
    cells = render(
        "vllm-pd", tmp_path / "helm-home", [CHARTS / "vllm-pd" / "ci" / "pd-and-aggregated-values.yaml", values_file]
    )
    assert by_kind(cells, "PersistentVolumeClaim") == []  # a wave creates (and deletes) no claim
    mounted = {
        v["persistentVolumeClaim"]["claimName"]
        for spec in _pod_specs(cells)
        for v in spec.get("volumes") or []
        if "persistentVolumeClaim" in v
    }
    assert mounted == {cache["metadata"]["name"]}


def test_a_wave_cache_claim_of_vllm_pd_is_refused(tmp_path: Path) -> None:
    done = run_helm(
        [
            "template",
            "t",
            str(CHARTS / "canary"),
            "--set-file",
            f"config={REPO / 'configs' / 'h200-mrv2-pd.yaml'}",
            "--set",
            "modelCache.enabled=false",
            "--set",
            "vllmPdValues.modelCache.enabled=true",
        ],
        tmp_path,
    )
    assert done.returncode != 0
    assert "vllmPdValues.modelCache without existingClaim" in done.stderr, done.stderr


def _quoted_errors() -> list[str]:
    """The install errors helm/README.md quotes (`...` spans that end in ' ...')."""
    return re.findall(r"`([a-z][^`]*?) \.\.\.`", README.read_text(encoding="utf-8"))


def test_the_defaults_refuse_to_install_with_the_messages_the_readme_quotes(tmp_path: Path) -> None:
    quoted = _quoted_errors()
    assert len(quoted) == 2, quoted
    config_required, no_budget = quoted
    defaults = run_helm(["template", "canary", str(CHARTS / "canary")], tmp_path)
    assert defaults.returncode != 0 and config_required in defaults.stderr, defaults.stderr
    assert "--set-file config=configs/h200-mrv2-pd.yaml" in defaults.stderr  # says what to set
    reader_config = tmp_path / "no-budget.yaml"
    reader_config.write_text(yaml.safe_load(CANARY_READER.read_text())["config"], encoding="utf-8")
    no_release = run_helm(
        ["template", "canary", str(CHARTS / "canary"), "--set-file", f"config={reader_config}"], tmp_path
    )
    assert no_release.returncode != 0 and no_budget in no_release.stderr, no_release.stderr
    assert "target.kubernetes.gpu_budget" in no_release.stderr and "targetRelease" in no_release.stderr
    named = run_helm(
        [
            "template",
            "canary",
            str(CHARTS / "canary"),
            "--set-file",
            f"config={reader_config}",
            "--set",
            "targetRelease=my-cells",
        ],
        tmp_path,
    )
    assert named.returncode == 0, named.stderr
    (cronjob,) = by_kind([d for d in yaml.safe_load_all(named.stdout) if d], "CronJob")
    args = cronjob["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "target.kubernetes.release=my-cells" in args


def test_the_documented_results_server_reads_the_installed_claim_on_loopback(tmp_path: Path) -> None:
    documented = _documented(tmp_path)
    (install,) = [argv for argv in documented if argv[:2] == ["helm", "install"]]
    docs = _helm_template(install, tmp_path / "helm-home")
    (claim,) = [d for d in by_kind(docs, "PersistentVolumeClaim") if d["metadata"]["name"].endswith("-results")]
    (cronjob,) = by_kind(docs, "CronJob")
    (controller,) = _pod_specs([cronjob])[0]["containers"]
    (start,) = [argv for argv in documented if argv[:3] == ["kubectl", "-n", NAMESPACE] and "run" in argv]
    pod_name = start[start.index("run") + 1]
    image = next(a.split("=", 1)[1] for a in start if a.startswith("--image="))
    overrides = json.loads(next(a.split("=", 1)[1] for a in start if a.startswith("--overrides=")))
    (server,) = overrides["spec"]["containers"]
    assert image == server["image"] == controller["image"]  # the image the install runs
    (volume,) = overrides["spec"]["volumes"]
    assert volume["persistentVolumeClaim"] == {"claimName": claim["metadata"]["name"], "readOnly": True}
    command = server["command"]
    assert command[:3] == ["python", "-m", "http.server"] and command[command.index("--bind") + 1] == "127.0.0.1"
    assert command[command.index("--directory") + 1] == server["volumeMounts"][0]["mountPath"] == "/results"
    (forward,) = [argv for argv in documented if "port-forward" in argv]
    assert forward[forward.index("port-forward") + 1] == f"pod/{pod_name}"
    assert forward[-1] == f"{command[3]}:{command[3]}"
    assert [argv for argv in documented if argv[-3:] == ["delete", "pod", pod_name]]  # and it is removed


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
    kept_by_default = render("canary", home, [CANARY_READER])
    assert [d for d in by_kind(kept_by_default, "PersistentVolumeClaim") if d["metadata"]["name"].endswith("-results")]
    plain = render("canary", home, [CANARY_READER], extra=["--set", "results.persistence.enabled=false"])
    assert not [d for d in by_kind(plain, "PersistentVolumeClaim") if d["metadata"]["name"].endswith("-results")]
    (pod,) = _pod_specs(by_kind(plain, "CronJob"))
    (results,) = [m for m in pod["containers"][0]["volumeMounts"] if m["mountPath"] == "/results"]
    assert results["name"] == "scratch" and "emptyDir" in {v["name"]: v for v in pod["volumes"]}["scratch"]
    kept = render("canary", home, [CANARY_READER], extra=["--set", "results.persistence.existingClaim=mine"])
    assert not [d for d in by_kind(kept, "PersistentVolumeClaim") if d["metadata"]["name"].endswith("-results")]
    (pod,) = _pod_specs(by_kind(kept, "CronJob"))
    claims = [v["persistentVolumeClaim"]["claimName"] for v in pod["volumes"] if "persistentVolumeClaim" in v]
    assert claims == ["mine"]


@pytest.mark.parametrize(
    ("setting", "message"),
    [("results.persistence.accessModes={ReadOnlyMany}", "accessModes"), ("results.persistence.size=lots", "size")],
)
def test_the_schema_refuses_a_bad_results_setting(setting: str, message: str, tmp_path: Path) -> None:
    done = run_helm(
        ["template", "t", str(REPO / "helm" / "canary"), "-f", str(CANARY_READER), "--set", setting], tmp_path
    )
    assert done.returncode != 0 and message in done.stderr, done.stderr
