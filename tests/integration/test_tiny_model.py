"""The tiny-model builder, run for real in the engine venv with a short schedule.

Builds are smoke builds (a few training steps): the point is the layout, loading, determinism
and the cache, not accuracy (the canary's accuracy check measures that against a served model).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from canary.model.params import MANIFEST_NAME
from canary.paths import DEFAULT_ENGINE_PYTHON, REPO_ROOT


@pytest.fixture(autouse=True, scope="module")
def _engine_venv() -> None:
    """Every test here runs the builder in the engine venv, which `make test` installs first."""
    assert DEFAULT_ENGINE_PYTHON.exists(), "no .venv-engine: run `make engine-venv` (make test does)"


SMOKE_STEPS = "3"
OFFLINE_ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}


def run_engine_python(*args: str, timeout: float = 600) -> str:
    """Run the engine venv's python in the repo root; return stdout (stderr shown on failure)."""
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO_ROOT), **OFFLINE_ENV}
    done = subprocess.run(
        [str(DEFAULT_ENGINE_PYTHON), *args], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=timeout
    )
    if done.returncode != 0:
        sys.stderr.write(done.stderr[-4000:])
    done.check_returncode()
    return done.stdout


def build(*args: str) -> Path:
    """Run the builder; its last stdout line is the model directory."""
    return Path(run_engine_python("-m", "canary.model.build", "--steps", SMOKE_STEPS, *args).splitlines()[-1])


@pytest.fixture(scope="module")
def smoke_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build("--out", str(tmp_path_factory.mktemp("a") / "model"))


def test_layout(smoke_model: Path) -> None:
    names = {p.name for p in smoke_model.iterdir()}
    assert {
        "config.json",
        "generation_config.json",
        "model.safetensors",
        "tokenizer.json",
        "tokenizer_config.json",
        "special_tokens_map.json",
        MANIFEST_NAME,
        "data",
    } <= names
    assert {p.name for p in (smoke_model / "data").iterdir()} == {"train.jsonl", "test.jsonl"}
    config = json.loads((smoke_model / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"]
    assert config["head_dim"] >= 32 and config["num_key_value_heads"] == 2
    manifest = json.loads((smoke_model / MANIFEST_NAME).read_text())
    assert 0.0 <= manifest["heldout"]["accuracy"] <= 1.0
    assert not [p for p in smoke_model.parent.iterdir() if p.name.startswith(".")], "staging dir left behind"


def test_same_seed_builds_identical_files(smoke_model: Path, tmp_path: Path) -> None:
    again = build("--out", str(tmp_path / "model"))
    first = json.loads((smoke_model / MANIFEST_NAME).read_text())["files_sha256"]
    second = json.loads((again / MANIFEST_NAME).read_text())["files_sha256"]
    assert first == second


def test_transformers_loads_it_offline(smoke_model: Path) -> None:
    script = """
import json, sys, torch
from transformers import AutoModelForCausalLM, AutoTokenizer
path = sys.argv[1]
tok = AutoTokenizer.from_pretrained(path)
model = AutoModelForCausalLM.from_pretrained(path)
ids = tok("Question: Tom has 3 apples.\\nAnswer:")["input_ids"]
chat = tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True)
with torch.no_grad():
    logits = model(input_ids=torch.tensor([ids])).logits
print(json.dumps({"first": ids[0], "bos": tok.bos_token_id, "chat": chat, "shape": list(logits.shape),
                  "vocab": len(tok)}))
"""
    facts = json.loads(run_engine_python("-c", script, str(smoke_model)).splitlines()[-1])
    assert facts["first"] == facts["bos"]
    assert facts["chat"] == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    assert facts["shape"][-1] == facts["vocab"]


def test_cached_build_reuses_and_links(tmp_path: Path) -> None:
    root = tmp_path / "models"
    first = build("--out-root", str(root), "--link", "tiny")
    second = build("--out-root", str(root), "--link", "tiny")
    assert first == second
    assert (root / "tiny").resolve() == first.resolve()
    assert first.parent == root.resolve()
    assert [p.name for p in root.iterdir() if p.name.startswith(".")] == []
