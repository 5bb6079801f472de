"""Build the canary's tiny Llama model: tokenizer, training, held-out check, HF checkpoint.

Run with the engine venv's python (torch, transformers, tokenizers, safetensors)::

    python -m canary.model.build --out DIR [--seed 0]          # build into DIR
    python -m canary.model.build --out-root .cache/models      # cached: .cache/models/<key>/

The model is trained on prompts shaped exactly like lm-eval's 5-shot ``gsm8k`` task
(``Question: ...\\nAnswer: ...`` pairs joined by blank lines), so served through vLLM it scores
well above zero on the held-out split and a corrupted KV cache shows as an accuracy collapse.
Everything is seeded and runs on two threads; the same inputs give the same weights.
The last line on stdout is always the model directory.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import random
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from canary.model import dataset
from canary.model.dataset import Problem
from canary.model.params import (
    FORMAT_VERSION,
    MANIFEST_NAME,
    BuildParams,
    ModelParams,
    TrainParams,
    cache_key,
    default_params,
    is_complete,
    model_dir,
    params_dict,
)

BOS, EOS, PAD, IM_START, IM_END = "<s>", "</s>", "<pad>", "<|im_start|>", "<|im_end|>"
SPECIAL_TOKENS = (BOS, EOS, PAD, IM_START, IM_END)
SERVING_DTYPE = torch.bfloat16
FEWSHOT_SEPARATOR = "\n\n"
"""lm-eval's fewshot_delimiter; the answer follows ``Answer:`` after its target_delimiter " "."""
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
"""ChatML; the model is trained on a few chat-formatted items so chat completions answer too."""


def log(message: str) -> None:
    """Progress goes to stderr; stdout carries only the model path."""
    print(f"[canary.model.build] {message}", file=sys.stderr, flush=True)


# --- text formatting -----------------------------------------------------------------------


def fewshot_block(problem: Problem) -> tuple[str, str]:
    """``(prompt, continuation)`` of one pair as lm-eval's gsm8k task renders it."""
    return f"Question: {problem.question}\nAnswer:", f" {problem.answer}"


def fewshot_text(problems: Sequence[Problem]) -> tuple[str, list[tuple[int, int]]]:
    """Join pairs like a k-shot prompt; return the text and the character spans to learn.

    A learned span covers an answer plus the following ``\\n\\nQuestion:``, so the model also
    learns to end its answer where lm-eval's stop sequence cuts it.
    """
    text, spans = "", []
    for problem in problems:
        prompt, answer = fewshot_block(problem)
        text += prompt
        start = len(text)
        text += answer + FEWSHOT_SEPARATOR
        spans.append((start, len(text) + len("Question:")))
    text += "Question:"
    return text, spans


def chat_text(problem: Problem) -> tuple[str, list[tuple[int, int]]]:
    """One exchange rendered through :data:`CHAT_TEMPLATE`, learning the assistant turn."""
    prompt, _ = fewshot_block(problem)
    head = f"{IM_START}user\n{prompt}{IM_END}\n{IM_START}assistant\n"
    text = head + problem.answer + IM_END
    return text, [(len(head), len(text))]


# --- tokenizer -------------------------------------------------------------------------------


def train_tokenizer(problems: Sequence[Problem], vocab_size: int) -> PreTrainedTokenizerFast:
    """Byte-level BPE trained on the train split; adds ``<s>`` in front of every encoding."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    corpus = [fewshot_text([p])[0] for p in problems]
    tokenizer.train_from_iterator(corpus, trainer=trainer)
    bos_id = tokenizer.token_to_id(BOS)
    tokenizer.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A", pair=f"{BOS} $A $B", special_tokens=[(BOS, bos_id)]
    )
    wrapped = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        bos_token=BOS,
        eos_token=EOS,
        pad_token=PAD,
        additional_special_tokens=[IM_START, IM_END],
        model_max_length=2048,
        clean_up_tokenization_spaces=False,
    )
    wrapped.chat_template = CHAT_TEMPLATE
    return wrapped


def encode_with_mask(
    tokenizer: PreTrainedTokenizerFast, text: str, spans: Sequence[tuple[int, int]]
) -> tuple[list[int], list[bool]]:
    """Token ids (with ``<s>``) and, per token, whether its first character lies in a span."""
    encoding = tokenizer(text, return_offsets_mapping=True)
    ids: list[int] = encoding["input_ids"]
    learn = [
        end > start and any(lo <= start < hi for lo, hi in spans)
        for start, end in encoding["offset_mapping"]
    ]
    return ids, learn


# --- training --------------------------------------------------------------------------------


def make_model(params: ModelParams, tokenizer: PreTrainedTokenizerFast) -> LlamaForCausalLM:
    """A randomly initialised tiny Llama sized to the tokenizer."""
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=params.hidden_size,
        intermediate_size=params.intermediate_size,
        num_hidden_layers=params.num_hidden_layers,
        num_attention_heads=params.num_attention_heads,
        num_key_value_heads=params.num_key_value_heads,
        head_dim=params.head_dim,
        max_position_embeddings=params.max_position_embeddings,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=True,
    )
    return LlamaForCausalLM(config)


def sample_sequence(
    rng: random.Random, train: Sequence[Problem], params: TrainParams
) -> tuple[str, list[tuple[int, int]]]:
    """One training text: mostly k-shot style, sometimes a chat exchange."""
    if rng.random() < params.chat_fraction:
        return chat_text(rng.choice(train))
    return fewshot_text(rng.sample(train, rng.randint(1, params.max_pairs)))


def make_batch(
    rng: random.Random,
    train: Sequence[Problem],
    tokenizer: PreTrainedTokenizerFast,
    params: TrainParams,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(input_ids, attention_mask, labels)``, right-padded; unlearned positions are -100."""
    rows = [encode_with_mask(tokenizer, *sample_sequence(rng, train, params))
            for _ in range(params.batch_size)]
    width = max(len(ids) for ids, _ in rows)
    pad_id = tokenizer.pad_token_id
    input_ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    attention = torch.zeros((len(rows), width), dtype=torch.long)
    labels = torch.full((len(rows), width), -100, dtype=torch.long)
    for row, (ids, learn) in enumerate(rows):
        input_ids[row, : len(ids)] = torch.tensor(ids)
        attention[row, : len(ids)] = 1
        labels[row, : len(ids)] = torch.tensor([i if keep else -100 for i, keep in zip(ids, learn, strict=True)])
    return input_ids, attention, labels


def learning_rate(step: int, params: TrainParams) -> float:
    """Linear warmup, then cosine decay to 10% of the peak."""
    if step < params.warmup_steps:
        return params.learning_rate * (step + 1) / params.warmup_steps
    progress = (step - params.warmup_steps) / max(1, params.steps - params.warmup_steps)
    return params.learning_rate * (0.1 + 0.45 * (1 + math.cos(math.pi * progress)))


def train_model(
    model: LlamaForCausalLM,
    tokenizer: PreTrainedTokenizerFast,
    train: Sequence[Problem],
    params: TrainParams,
    seed: int,
) -> list[float]:
    """Run the fixed schedule; return the loss every 25 steps."""
    rng = random.Random(seed)
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=params.learning_rate, betas=(0.9, 0.95),
        weight_decay=params.weight_decay,
    )
    model.train()
    losses: list[float] = []
    for step in range(params.steps):
        for group in optimizer.param_groups:
            group["lr"] = learning_rate(step, params)
        input_ids, attention, labels = make_batch(rng, train, tokenizer, params)
        loss = model(input_ids=input_ids, attention_mask=attention, labels=labels).loss
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), params.grad_clip)
        optimizer.step()
        if step % 25 == 0 or step == params.steps - 1:
            losses.append(round(loss.item(), 4))
            log(f"step {step}/{params.steps} loss {loss.item():.4f}")
    model.eval()
    return losses


def to_serving_dtype(model: LlamaForCausalLM) -> LlamaForCausalLM:
    """Cast to :data:`SERVING_DTYPE` for the held-out check and the saved weights.

    vLLM serves a float32 checkpoint in bfloat16 on CPU anyway; saving bfloat16 means the
    in-build check, transformers and vLLM all see the same weights and precision.
    """
    model = model.to(SERVING_DTYPE)
    model.config.dtype = SERVING_DTYPE
    return model


# --- held-out check --------------------------------------------------------------------------


def heldout_exact_match(
    model: LlamaForCausalLM,
    tokenizer: PreTrainedTokenizerFast,
    train: Sequence[Problem],
    test: Sequence[Problem],
    shots: int,
    seed: int,
) -> float:
    """Share of test items whose whole answer greedy decoding reproduces, 5-shot prompted.

    Teacher-forced: an item counts if the argmax at every answer position equals the reference
    token, which is exactly when greedy decoding emits the reference tokens. One forward pass per
    item instead of a decode loop; a lower bound on lm-eval's strict-match.
    """
    rng = random.Random(seed)
    correct = 0
    for problem in test:
        text, spans = fewshot_text([*rng.sample(train, shots), problem])
        ids, learn = encode_with_mask(tokenizer, text, spans[-1:])
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([ids])).logits[0]
        hits = logits[:-1].argmax(-1) == torch.tensor(ids[1:])
        correct += bool(hits[torch.tensor(learn[1:])].all())
    return correct / max(1, len(test))


# --- output ----------------------------------------------------------------------------------


def sha256_file(path: Path) -> str:
    """Hex sha256 of a file's bytes."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def save_tokenizer(out: Path, tokenizer: PreTrainedTokenizerFast) -> None:
    """Tokenizer files readable by transformers 4 and 5 and by vLLM, offline.

    transformers 5 names the class ``TokenizersBackend`` and keeps the chat template in
    ``chat_template.jinja``; older readers want ``PreTrainedTokenizerFast``, the template inside
    ``tokenizer_config.json`` and a ``special_tokens_map.json``, so write those too.
    """
    tokenizer.save_pretrained(out)
    config_path = out / "tokenizer_config.json"
    config = json.loads(config_path.read_text(encoding="utf-8"))
    config.update(tokenizer_class="PreTrainedTokenizerFast", chat_template=CHAT_TEMPLATE,
                  add_bos_token=True, add_eos_token=False)
    config_path.write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    special = {"bos_token": BOS, "eos_token": EOS, "pad_token": PAD,
               "additional_special_tokens": [IM_START, IM_END]}
    (out / "special_tokens_map.json").write_text(json.dumps(special, indent=2) + "\n",
                                                 encoding="utf-8")


def save_checkpoint(
    out: Path, model: LlamaForCausalLM, tokenizer: PreTrainedTokenizerFast
) -> None:
    """Weights (safetensors), config, generation config and tokenizer files."""
    model.generation_config.eos_token_id = [tokenizer.eos_token_id,
                                            tokenizer.convert_tokens_to_ids(IM_END)]
    model.generation_config.bos_token_id = tokenizer.bos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(out, safe_serialization=True)
    save_tokenizer(out, tokenizer)


def write_manifest(out: Path, facts: dict[str, Any]) -> None:
    """Write the manifest last: its presence marks a complete model directory."""
    facts["files_sha256"] = {
        path.relative_to(out).as_posix(): sha256_file(path)
        for path in sorted(out.rglob("*")) if path.is_file()
    }
    (out / MANIFEST_NAME).write_text(json.dumps(facts, indent=2) + "\n", encoding="utf-8")


def build(out: Path, params: BuildParams) -> dict[str, Any]:
    """Build the whole model directory into ``out`` (an existing, empty directory)."""
    started = time.monotonic()
    torch.set_num_threads(params.train.threads)
    torch.manual_seed(params.seed)
    torch.use_deterministic_algorithms(True)

    train, test = dataset.generate_splits(params.data)
    dataset.write_splits(out / "data", params.data)
    tokenizer = train_tokenizer(train, params.model.vocab_size)
    log(f"tokenizer: {len(tokenizer)} tokens; train {len(train)}, test {len(test)}")

    model = make_model(params.model, tokenizer)
    losses = train_model(model, tokenizer, train, params.train, params.seed)
    train_seconds = time.monotonic() - started
    model = to_serving_dtype(model)

    eval_items = test[: params.eval_size]
    accuracy = heldout_exact_match(model, tokenizer, train, eval_items, params.eval_shots,
                                   params.seed)
    log(f"held-out greedy exact match: {accuracy:.3f} on {len(eval_items)}")

    save_checkpoint(out, model, tokenizer)
    manifest: dict[str, Any] = {
        "format_version": FORMAT_VERSION,
        "cache_key": cache_key(params),
        "params": params_dict(params),
        "train_size": len(train),
        "test_size": len(test),
        "num_parameters": sum(p.numel() for p in model.parameters()),
        "vocab_size": len(tokenizer),
        "losses_every_25_steps": losses,
        "heldout": {
            "metric": "teacher-forced greedy exact match of the whole answer, "
                      f"{params.eval_shots}-shot, first {len(eval_items)} test items",
            "n": len(eval_items),
            "accuracy": accuracy,
        },
        "train_seconds": round(train_seconds, 1),
        "build_seconds": round(time.monotonic() - started, 1),
        "torch_version": torch.__version__,
    }
    write_manifest(out, manifest)
    return manifest


def make_world_readable(directory: Path) -> None:
    """Directories 0755, files 0644: mkdtemp and safetensors create owner-only entries."""
    directory.chmod(0o755)
    for path in directory.rglob("*"):
        path.chmod(0o755 if path.is_dir() else 0o644)


def build_atomically(final: Path, params: BuildParams) -> Path:
    """Build into a temp sibling of ``final``, then rename it into place.

    Nothing ever sees a half-written model directory; if a concurrent build finished first,
    its result is kept and ours is discarded.
    """
    final.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{final.name}.tmp-", dir=final.parent))
    try:
        build(staging, params)
        make_world_readable(staging)
        try:
            os.rename(staging, final)
        except OSError:
            if not is_complete(final):
                raise
            log(f"{final} appeared while building; keeping it")
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return final


def cached_build(out_root: Path, params: BuildParams) -> Path:
    """The model directory for ``params`` under ``out_root``, built first if missing."""
    final = model_dir(out_root, params)
    if is_complete(final):
        log(f"cached: {final}")
        return final
    return build_atomically(final, params)


def link_name(out_root: Path, name: str, target: Path) -> Path:
    """Point ``out_root/name`` at ``target`` (a relative symlink, swapped in atomically)."""
    link = out_root / name
    staging = out_root / f".{name}.link-{os.getpid()}"
    staging.unlink(missing_ok=True)
    staging.symlink_to(os.path.relpath(target, out_root))
    os.replace(staging, link)
    return link


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """Command-line options."""
    parser = argparse.ArgumentParser(description="Build the canary's tiny Llama model.")
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--out", type=Path, help="build into this directory (must not exist)")
    where.add_argument("--out-root", type=Path, help="cache root: build into ROOT/<key>/")
    parser.add_argument("--seed", type=int, default=0, help="seed for data, init and batches")
    parser.add_argument("--steps", type=int, default=TrainParams.steps,
                        help="training steps (fewer for quick smoke builds)")
    parser.add_argument("--link", metavar="NAME",
                        help="with --out-root: also point ROOT/NAME at the build (builtin:NAME in configs)")
    parser.add_argument("--print-path", action="store_true",
                        help="with --out-root: print the cached model's path, build nothing")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; the last stdout line is the model directory."""
    args = parse_args(argv)
    base = default_params(args.seed)
    params = replace(base, train=replace(base.train, steps=args.steps))
    if args.out_root is not None:
        path = model_dir(args.out_root, params) if args.print_path else cached_build(args.out_root, params)
        if args.link and not args.print_path:
            log(f"{link_name(args.out_root, args.link, path)} -> {path.name}")
    elif args.out.exists():
        log(f"{args.out} already exists; remove it or use --out-root for a cached build")
        return 2
    else:
        path = build_atomically(args.out, params)
    print(path.resolve())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
