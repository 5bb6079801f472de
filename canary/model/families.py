"""Build the tiny random-weight model of each KV family (canary.model.family_params) with the engine venv.

    python -m canary.model.families --out-root .cache/models --link   # every family, cached, linked

Each is `AutoModelForCausalLM.from_config(<config class>(...))` with a seeded random init, saved in
bf16 with the tiny Llama's tokenizer files and data splits (the tiny model must be built first:
`make model`). Cached like the tiny model: a directory per content hash, built in a temp sibling and
renamed into place, `<root>/<name>` pointing at it. The last stdout line is the last directory built.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
import transformers
from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast

from canary.model.build import IM_END, SERVING_DTYPE, link_name, make_world_readable, write_manifest
from canary.model.family_params import (
    FAMILY_FORMAT_VERSION,
    FAMILY_MODELS,
    FAMILY_NAMES,
    FamilyModel,
    family_cache_key,
    family_dir,
    family_model,
    family_params_dict,
)
from canary.model.params import default_params, is_complete, model_dir

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja")
"""The tiny model's tokenizer files a family model shares."""


def log(message: str) -> None:
    """Progress goes to stderr; stdout carries only model paths."""
    print(f"[canary.model.families] {message}", file=sys.stderr, flush=True)


def make_config(model: FamilyModel, tokenizer: PreTrainedTokenizerFast) -> Any:
    """The transformers config of a family model, sized to the tokenizer."""
    config_class = getattr(transformers, model.config_class)
    return config_class(
        **dict(model.config),
        vocab_size=len(tokenizer),
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )


def build(out: Path, model: FamilyModel, tiny_dir: Path, seed: int) -> dict[str, Any]:
    """Write one family model into out (an existing, empty directory)."""
    started = time.monotonic()
    params = family_params_dict(model, seed)
    torch.manual_seed(int(str(params["seed"])))
    tokenizer = PreTrainedTokenizerFast.from_pretrained(tiny_dir)
    network = AutoModelForCausalLM.from_config(make_config(model, tokenizer)).to(SERVING_DTYPE)
    network.generation_config.eos_token_id = [tokenizer.eos_token_id, tokenizer.convert_tokens_to_ids(IM_END)]
    network.generation_config.bos_token_id = tokenizer.bos_token_id
    network.generation_config.pad_token_id = tokenizer.pad_token_id
    network.save_pretrained(out, safe_serialization=True)
    for name in TOKENIZER_FILES:
        if (tiny_dir / name).is_file():
            shutil.copyfile(tiny_dir / name, out / name)
    if (tiny_dir / "data").is_dir():
        shutil.copytree(tiny_dir / "data", out / "data")
    manifest: dict[str, Any] = {
        "format_version": FAMILY_FORMAT_VERSION,
        "cache_key": family_cache_key(model, seed),
        "params": params,
        "description": model.description,
        "architectures": list(network.config.architectures or []),
        "weights": "random (seeded); no accuracy figure",
        "tokenizer_from": str(tiny_dir.name),
        "num_parameters": sum(p.numel() for p in network.parameters()),
        "vocab_size": len(tokenizer),
        "build_seconds": round(time.monotonic() - started, 1),
        "torch_version": torch.__version__,
        "transformers_version": transformers.__version__,
    }
    write_manifest(out, manifest)
    return manifest


def cached_build(out_root: Path, model: FamilyModel, tiny_dir: Path, seed: int) -> Path:
    """The family model's directory under out_root, built first (atomically) if missing."""
    final = family_dir(out_root, model, seed)
    if is_complete(final):
        log(f"cached: {final}")
        return final
    staging = Path(tempfile.mkdtemp(prefix=f".{final.name}.tmp-", dir=out_root))
    try:
        manifest = build(staging, model, tiny_dir, seed)
        make_world_readable(staging)
        try:
            os.rename(staging, final)
        except OSError:
            if not is_complete(final):
                raise
        log(f"{model.name}: {manifest['num_parameters']} parameters, {json.dumps(manifest['architectures'])}")
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return final


def main(argv: Sequence[str] | None = None) -> int:
    """Build (or reuse) the family models; with --link point <root>/<name> at each."""
    parser = argparse.ArgumentParser(description="Build the tiny KV family models.")
    parser.add_argument("--out-root", type=Path, required=True, help="cache root (holds the tiny model)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--only", action="append", choices=FAMILY_NAMES, help="build only these (repeatable)")
    parser.add_argument("--link", action="store_true", help="point ROOT/NAME at each build (builtin:NAME)")
    args = parser.parse_args(argv)
    tiny_dir = model_dir(args.out_root, default_params(args.seed))
    if not is_complete(tiny_dir):
        log(f"the tiny model (its tokenizer) is not built at {tiny_dir}: run `make model` first")
        return 2
    torch.set_num_threads(2)
    models = [family_model(name) for name in args.only] if args.only else list(FAMILY_MODELS)
    path = tiny_dir
    for model in models:
        path = cached_build(args.out_root, model, tiny_dir, args.seed)
        if args.link:
            link_name(args.out_root, model.name, path)
    print(path.resolve())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
