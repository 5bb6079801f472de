"""A Docker-compatible container CLI (docker or podman) as the container target drives it.

Every call has a deadline and a clear error. The CLI runs with an explicit environment: a minimal
PATH and HOME, the variables that point a CLI at its engine or storage (DOCKER_HOST, CONTAINERS_CONF,
...) passed through from the caller, and for podman without a containers.conf of the caller's the
repository's daemonless settings (docker/podman/: runc, cgroupfs, host network, and the overlay or
vfs store docker/podman/storage-conf.sh picks), which are what runs on a machine without a Docker
engine. Containers the canary starts carry labels
(MANAGED_LABEL, OWNER_LABEL) so that leftovers of a killed controller can be found and removed.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, Literal

from canary.errors import CanaryError, warn_stderr
from canary.paths import REPO_ROOT
from canary.targets.cli_deadline import CliHung, run_with_deadline
from canary.targets.engine_env import SYSTEM_PATH

MANAGED_LABEL = "dev.vllm-canary.managed"
OWNER_LABEL = "dev.vllm-canary.owner"
"""`<hostname>:<pid>` of the controller that started the container."""
CELL_LABEL = "dev.vllm-canary.cell"
ROLE_LABEL = "dev.vllm-canary.role"
Flavour = Literal["docker", "podman"]
SOURCE_HASH_LABEL = "dev.vllm-canary.source-hash"
"""On images the canary derives itself: the hash of what went into the build (cache key)."""

PASSTHROUGH_ENV = (
    "DOCKER_HOST",
    "DOCKER_CONFIG",
    "DOCKER_CONTEXT",
    "CONTAINER_HOST",
    "CONTAINERS_CONF",
    "CONTAINERS_STORAGE_CONF",
    "CONTAINERS_REGISTRIES_CONF",
    "REGISTRY_AUTH_FILE",
    "XDG_RUNTIME_DIR",
)
"""What the CLI itself needs from the caller's environment (never handed to a container)."""
PODMAN_CONF_DIR = REPO_ROOT / "docker" / "podman"
STORAGE_CONF_PICKER = PODMAN_CONF_DIR / "storage-conf.sh"
STORAGE_PICK_TIMEOUT_S = 90.0


@cache
def repo_storage_conf() -> Path | None:
    """The store `make` builds images into: what docker/podman/storage-conf.sh picks (overlay where podman
    opens it, else vfs), asked once per process; None where the repository's podman settings are absent."""
    if not STORAGE_CONF_PICKER.is_file():
        return None
    env = {k: v for k, v in os.environ.items() if k != "CONTAINERS_STORAGE_CONF"}
    try:
        picked = subprocess.run(
            ["bash", str(STORAGE_CONF_PICKER)], env=env, capture_output=True, text=True, timeout=STORAGE_PICK_TIMEOUT_S
        )
    except subprocess.TimeoutExpired as exc:
        raise ContainerError(f"{STORAGE_CONF_PICKER} did not answer within {STORAGE_PICK_TIMEOUT_S:.0f} s") from exc
    path = Path(picked.stdout.strip())
    if picked.returncode != 0 or not path.is_file():
        raise ContainerError(f"{STORAGE_CONF_PICKER} failed (exit {picked.returncode}): {picked.stderr.strip()[-300:]}")
    return path


def repo_podman_conf() -> dict[str, Path]:
    """CONTAINERS_CONF and CONTAINERS_STORAGE_CONF of the repository's daemonless podman settings."""
    conf: dict[str, Path] = {}
    if (PODMAN_CONF_DIR / "containers.conf").is_file():
        conf["CONTAINERS_CONF"] = PODMAN_CONF_DIR / "containers.conf"
    storage = repo_storage_conf()
    if storage is not None:
        conf["CONTAINERS_STORAGE_CONF"] = storage
    return conf


QUERY_TIMEOUT_S = 300.0
"""podman with vfs storage holds its storage lock while it copies a new container's whole image (3.2 GB for
the CPU engine): a `ps` waits that long on a loaded machine (over 60 s was seen). overlay does not copy."""
PULL_TIMEOUT_S = 1800.0
BUILD_TIMEOUT_S = 1800.0


class ContainerError(CanaryError):
    """A container prerequisite is missing or broken (CLI, image, build): found before anything starts. Exits 2."""

    exit_code = 2


class ContainerCliHung(ContainerError):
    """A CLI command missed its deadline; `hung` holds what it printed and its stacks."""

    def __init__(self, message: str, hung: CliHung) -> None:
        super().__init__(message)
        self.hung = hung


def owner_id(pid: int | None = None) -> str:
    """This controller's owner label value."""
    return f"{socket.gethostname()}:{os.getpid() if pid is None else pid}"


@dataclass(frozen=True)
class ContainerCli:
    """One Docker-compatible CLI: its flavour, its program and the environment it runs with."""

    flavour: Flavour
    program: str
    env: Mapping[str, str]

    def argv(self, *args: str) -> list[str]:
        """A command line of this CLI."""
        return [self.program, *args]

    def call(self, *args: str, timeout_s: float = QUERY_TIMEOUT_S, what: str = "") -> subprocess.CompletedProcess[str]:
        """Run one CLI command to completion; an unreachable engine or a timeout is a ContainerError (a
        timeout: ContainerCliHung, with where the CLI was when it missed it)."""
        try:
            return run_with_deadline(self.argv(*args), env=self.env, timeout_s=timeout_s)
        except CliHung as hung:
            raise ContainerCliHung(f"{self.program} {what or args[0]}: {hung.detail()}", hung) from None
        except OSError as exc:
            raise ContainerError(f"cannot run {self.program}: {exc.strerror or exc}") from None

    def check(self, *args: str, timeout_s: float = QUERY_TIMEOUT_S, what: str = "") -> str:
        """Run a command that must succeed; its stdout."""
        done = self.call(*args, timeout_s=timeout_s, what=what)
        if done.returncode != 0:
            detail = (done.stderr or done.stdout).strip().splitlines()
            raise ContainerError(
                f"{self.program} {what or ' '.join(args[:2])} failed (exit {done.returncode}): "
                f"{detail[-1] if detail else 'no output'}"
            )
        return done.stdout

    # ------------------------------------------------------------------ images

    def image_inspect(self, ref: str) -> dict[str, Any] | None:
        """The image's inspect record, None when it is not in local storage."""
        done = self.call("image", "inspect", ref, what=f"image inspect {ref}")
        if done.returncode != 0:
            return None
        try:
            records = json.loads(done.stdout)
        except ValueError:
            return None
        return records[0] if isinstance(records, list) and records and isinstance(records[0], dict) else None

    def pull(self, ref: str) -> None:
        """Pull an image (a ContainerError naming it on failure)."""
        self.check("pull", ref, timeout_s=PULL_TIMEOUT_S, what=f"pull {ref}")

    def build(
        self,
        context: Path,
        containerfile: Path,
        tag: str,
        *,
        build_args: Mapping[str, str] | None = None,
        labels: Mapping[str, str] | None = None,
        log_path: Path | None = None,
    ) -> None:
        """Build an image (podman: daemonless, chroot isolation, host network for RUN steps)."""
        args = ["build", "-f", str(containerfile), "-t", tag]
        if self.flavour == "podman":
            args += ["--isolation", "chroot", "--network", "host"]
        for key, value in (build_args or {}).items():
            args += ["--build-arg", f"{key}={value}"]
        for key, value in (labels or {}).items():
            args += ["--label", f"{key}={value}"]
        done = self.call(*args, str(context), timeout_s=BUILD_TIMEOUT_S, what=f"build {tag}")
        if log_path is not None:
            log_path.parent.mkdir(parents=True, exist_ok=True)
            log_path.write_text(done.stdout + done.stderr, encoding="utf-8")
        if done.returncode != 0:
            tail = (done.stderr or done.stdout).strip().splitlines()[-5:]
            where = f" (log: {log_path})" if log_path is not None else ""
            raise ContainerError(f"building {tag} failed{where}: " + " | ".join(tail))

    # ------------------------------------------------------------------ containers

    def labelled(self, label: str) -> list[dict[str, str]]:
        """Containers (running or not) carrying a label `key` or `key=value`: name and labels.

        podman prints one JSON array for `--format json`, docker one JSON object per line for
        `--format '{{json .}}'`; both are read. A CLI that cannot list is an error, never "none"."""
        fmt = "json" if self.flavour == "podman" else "{{json .}}"
        text = self.check("ps", "-a", "--filter", f"label={label}", "--format", fmt, what="ps")
        return [_container_record(r) for r in _json_records(text)]

    def remove(self, names: Sequence[str], *, stop_timeout_s: float) -> None:
        """Stop (SIGTERM, then SIGKILL after stop_timeout_s) and remove containers; missing ones are fine.

        A CLI that does the work and then does not exit (podman 4.3 was seen to) is not a failure when
        the containers are gone: `rm -f` stops what a hung `stop` did not, and after a hung `rm -f`
        what counts is whether any of them is still listed."""
        if not names:
            return
        try:
            self.call("stop", "-t", str(int(stop_timeout_s)), *names, timeout_s=stop_timeout_s + QUERY_TIMEOUT_S)
        except ContainerCliHung as hung:
            warn_stderr(f"{hung} (rm -f follows)")
        try:
            self.call("rm", "-f", *names, timeout_s=QUERY_TIMEOUT_S)
        except ContainerCliHung as hung:
            left = sorted(set(names) & set(self.names()))
            if left:
                raise ContainerError(f"{hung}\nstill there: {', '.join(left)}") from None
            warn_stderr(f"{hung} (every container named is gone)")

    def cgroup_manager(self) -> str:
        """How the CLI creates cgroups: `cgroupfs` (plain directories) or `systemd` (units); "" if unknown."""
        fmt = "{{.Host.CgroupManager}}" if self.flavour == "podman" else "{{.CgroupDriver}}"
        done = self.call("info", "--format", fmt, what="info")
        return done.stdout.strip() if done.returncode == 0 else ""

    def names(self) -> list[str]:
        """The names of every container the CLI lists (running or not)."""
        return self.check("ps", "-a", "--format", "{{.Names}}", what="ps").split()

    def main_pid(self, name: str) -> int | None:
        """The host pid of a running container's first process (its session leader), None if not running."""
        done = self.call("inspect", "--format", "{{.State.Pid}}", name, what=f"inspect {name}")
        try:
            pid = int(done.stdout.strip())
        except ValueError:
            return None
        return pid if done.returncode == 0 and pid > 0 else None


def _json_records(text: str) -> list[dict[str, Any]]:
    """Records of a JSON array, or of one JSON object per line."""
    text = text.strip()
    if not text:
        return []
    try:
        loaded = json.loads(text)
    except ValueError:
        loaded = [json.loads(line) for line in text.splitlines() if line.strip()]
    items = loaded if isinstance(loaded, list) else [loaded]
    return [item for item in items if isinstance(item, dict)]


def _container_record(record: dict[str, Any]) -> dict[str, str]:
    """name and `label:<key>` entries of one `ps` record (podman: Names list, Labels map; docker: strings)."""
    names = record.get("Names")
    name = names[0] if isinstance(names, list) and names else str(names or record.get("Name", ""))
    labels = record.get("Labels") or {}
    if isinstance(labels, str):  # docker: "k=v,k2=v2"
        labels = dict(item.partition("=")[::2] for item in labels.split(",") if item)
    return {"name": name, **{f"label:{k}": str(v) for k, v in labels.items()}}


def cli_env(flavour: Flavour, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The CLI's own environment (see the module doc)."""
    environ = os.environ if environ is None else environ
    env = {"PATH": SYSTEM_PATH + ":/usr/sbin:/sbin", "HOME": environ.get("HOME", "/root"), "LANG": "C.UTF-8"}
    env.update({key: environ[key] for key in PASSTHROUGH_ENV if key in environ})
    if flavour == "podman":
        for key, path in repo_podman_conf().items():
            env.setdefault(key, str(path))
    return env


def find_cli(configured: str | None, environ: Mapping[str, str] | None = None) -> ContainerCli:
    """The CLI to use: the configured one (name or path), else podman, else docker on PATH."""
    candidates = [configured] if configured else ["podman", "docker"]
    for candidate in candidates:
        program = shutil.which(candidate) if "/" not in candidate else candidate
        if program and os.access(program, os.X_OK):
            name = Path(program).name
            flavour: Flavour = "docker" if "docker" in name else "podman"
            return ContainerCli(flavour, program, cli_env(flavour, environ))
    if configured:
        raise ContainerError(f"target.container.cli: {configured!r} not found or not executable")
    raise ContainerError(
        "target.kind container needs docker or podman: neither is on PATH "
        "(this machine: `make container-tools` installs podman; or set target.container.cli)"
    )
