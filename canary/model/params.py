"""Build parameters of the tiny model and its content-addressed cache location.

Stdlib only, so the controller (no torch) can find a built model without importing the
builder::

    python -m canary.model.params --out-root .cache/models [--seed 0]   # prints the model dir

The cache key hashes the sources of the data generator and the builder together with every
parameter; changing any of them selects a fresh directory.
"""

from __future__ import annotations

import argparse
import hashlib
import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from canary.model.dataset import DatasetSpec

MANIFEST_NAME = "canary-model.json"
"""Written last by a build; a directory holding it is complete."""
FORMAT_VERSION = 1
"""Bump when the on-disk layout changes without a source change (part of the cache key)."""
KEY_LENGTH = 16
"""Hex digits of the cache key used as the directory name."""
HASHED_SOURCES = ("dataset.py", "params.py", "build.py")
"""Modules (in this package) whose source goes into the cache key."""


@dataclass(frozen=True)
class ModelParams:
    """Llama shape. CPU_ATTN needs head_dim >= 32."""

    hidden_size: int = 128
    intermediate_size: int = 512
    num_hidden_layers: int = 2
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    head_dim: int = 32
    max_position_embeddings: int = 2048
    vocab_size: int = 1024
    """Upper bound of the BPE vocabulary (the trainer stops when no pair is left to merge)."""


@dataclass(frozen=True)
class TrainParams:
    """Optimisation schedule; a fixed step count, so the weights do not depend on timing."""

    steps: int = 300
    batch_size: int = 32
    max_pairs: int = 6
    """Each training sequence holds 1..max_pairs QA pairs (a 5-shot prompt + target is 6)."""
    chat_fraction: float = 0.1
    """Share of training sequences in the chat template instead of the few-shot format."""
    learning_rate: float = 3e-3
    warmup_steps: int = 20
    weight_decay: float = 0.01
    grad_clip: float = 1.0
    threads: int = 2


@dataclass(frozen=True)
class BuildParams:
    """Every input of a build besides the source code."""

    seed: int = 0
    data: DatasetSpec = field(default_factory=DatasetSpec)
    model: ModelParams = field(default_factory=ModelParams)
    train: TrainParams = field(default_factory=TrainParams)
    eval_size: int = 200
    """Held-out questions scored by the in-build greedy check (0 skips it)."""
    eval_shots: int = 5


def default_params(seed: int = 0) -> BuildParams:
    """The parameters ``make model`` builds with, for a given seed."""
    return BuildParams(seed=seed, data=DatasetSpec(seed=seed))


def params_dict(params: BuildParams) -> dict[str, object]:
    """The parameters as plain JSON-able data."""
    return asdict(params)


def cache_key(params: BuildParams) -> str:
    """sha256 over the hashed sources, the parameters and the format version."""
    digest = hashlib.sha256()
    package_dir = Path(__file__).parent
    for name in HASHED_SOURCES:
        digest.update(name.encode() + b"\0" + (package_dir / name).read_bytes() + b"\0")
    digest.update(json.dumps(params_dict(params), sort_keys=True).encode())
    digest.update(f"format={FORMAT_VERSION}".encode())
    return digest.hexdigest()


def model_dir(out_root: Path, params: BuildParams) -> Path:
    """Where the cached build for ``params`` lives (or will live) under ``out_root``."""
    return out_root / cache_key(params)[:KEY_LENGTH]


def is_complete(directory: Path) -> bool:
    """True for a finished model directory (its manifest is written last)."""
    return (directory / MANIFEST_NAME).is_file()


def main(argv: Sequence[str] | None = None) -> int:
    """Print the cached model directory; exit 1 if it has not been built yet."""
    parser = argparse.ArgumentParser(description="Print the tiny model's cache directory.")
    parser.add_argument("--out-root", type=Path, required=True, help="cache root")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    path = model_dir(args.out_root, default_params(args.seed)).resolve()
    print(path)
    return 0 if is_complete(path) else 1


if __name__ == "__main__":
    raise SystemExit(main())
