"""Parity prompts the model reads: in-domain text cut at block-relative token lengths.

The text is GSM8K-format items (`Question: ...\\nAnswer: ...`, the shape of the accuracy task)
from the held-out split the accuracy check uses: the tiny model's own `data/test.jsonl` for the
builtin source, the configured test jsonl for a local source; otherwise (hub, parquet mirror) the
project's generated GSM8K-format held-out split (canary.model.dataset), and the evidence says so.
For a real model (not one this project built), `checks.parity.prompt_text: auto` interleaves those
items with natural prose (canary/checks/parity/text.py), the text such models are served for.

Lengths (token counts, BOS included): the configured ones plus, for every block size B of the
config's planned cells, logical and kernel, prefill and decode: B/2 (inside one block), B-1, B,
B+1, 2B, 2B+1 and 4B+1 (several blocks), and the longest prompt that still fits (max_model_len - max_tokens - 1:
teacher-forced re-scoring appends the output and asks for one more token). The aggregated control
records every length; a P/D cell sends only those of its own block sizes (`cell_prompt_lengths`).

Prompt i starts at a different item (offset + i * STRIDE), so no two prompts share a first block
and a P/D decode server never serves one prompt's blocks from its prefix cache filled by another.
Each prompt also gets an *altered* twin whose first block (the smallest block size of the cell set,
at most half the prompt) is replaced by tokens of other items: the evidence check asks whether the
reference output changes.
"""

from __future__ import annotations

import hashlib
import itertools
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from canary.checks.parity.text import PARAGRAPHS
from canary.config import CanaryConfig
from canary.errors import CanaryError
from canary.model.dataset import DatasetSpec, Problem, generate_splits, read_jsonl
from canary.model.params import is_complete
from canary.model.ref import is_builtin, local_model_dir

STRIDE = 37
"""Items between the first items of consecutive prompts (distinct first blocks)."""
ALTER_SHIFT = 251
"""Items between a prompt's first item and the first item of the text its altered block comes from."""
ALTER_WINDOW = 32
"""Offsets into that text tried for the replacement tokens (the one changing most tokens is used)."""


class PromptError(CanaryError):
    """Parity prompts could not be built (no items, a tokenizer that returns too little)."""


@dataclass(frozen=True)
class ParityPrompt:
    """One prompt, its altered-first-block twin and where it came from."""

    length: int
    ids: list[int]
    altered_ids: list[int]
    altered_tokens: int
    """How many leading tokens (after BOS) the altered twin replaces."""
    first_item: int

    @property
    def sha(self) -> str:
        """Short fingerprint (identical prompts across cells)."""
        return prompt_sha(self.ids)


def prompt_sha(ids: Sequence[int]) -> str:
    """Short fingerprint of a token-id prompt."""
    return hashlib.sha256(json.dumps(list(ids)).encode()).hexdigest()[:16]


def source_items(config: CanaryConfig, model_source: str) -> tuple[list[str], str]:
    """The held-out GSM8K-format items as text, and where they came from."""
    dataset = config.checks.accuracy.dataset
    path: Path | None = None
    if dataset.source == "builtin":
        model_dir = local_model_dir(model_source)
        path = None if model_dir is None else model_dir / "data" / "test.jsonl"
    elif dataset.source == "local":
        if dataset.path is not None and (Path(dataset.path) / "test.jsonl").is_file():
            path = Path(dataset.path) / "test.jsonl"
        elif dataset.test_path is not None:
            path = Path(dataset.test_path)
    if path is not None and path.is_file():
        problems, where = read_jsonl(path), f"held-out split {path}"
    else:
        problems = generate_splits(DatasetSpec())[1]
        where = "the project's generated GSM8K-format held-out split (canary.model.dataset)"
        if path is not None:
            where += f" ({path} not found)"
    if not problems:
        raise PromptError(f"no parity items in {where}")
    gsm8k = [item_text(p) for p in problems]
    text = config.checks.parity.prompt_text
    if text == "auto":
        text = "gsm8k" if project_model(model_source) else "mixed"
    if text == "natural":
        return list(PARAGRAPHS), f"the project's prose paragraphs ({len(PARAGRAPHS)}, canary/checks/parity/text.py)"
    if text == "mixed":
        mixed = [item for pair in zip(gsm8k, itertools.cycle(PARAGRAPHS), strict=False) for item in pair]
        return mixed, f"{where} interleaved with the project's prose paragraphs (canary/checks/parity/text.py)"
    return gsm8k, where


def project_model(model_source: str) -> bool:
    """A model this project built (`make model`): builtin:NAME, or a directory with canary-model.json."""
    model_dir = local_model_dir(model_source)
    return is_builtin(model_source) or (model_dir is not None and is_complete(model_dir))


def item_text(problem: Problem) -> str:
    """One item in the accuracy task's format."""
    return f"Question: {problem.question}\nAnswer: {problem.answer}\n\n"


Tokenizer = Callable[[str], list[int]]


def _ids_from(items: Sequence[str], start: int, need: int, tokenize: Tokenizer) -> list[int]:
    """Token ids (BOS first) of items start, start+1, ... (wrapping) until at least `need` tokens."""
    count = max(1, need // 16)
    for _ in range(64):
        text = "".join(items[(start + i) % len(items)] for i in range(count))
        ids = tokenize(text)
        if len(ids) >= need:
            return ids
        count = count * 2 if len(ids) < 2 else max(count + 1, int(count * need / len(ids)) + 1)
    raise PromptError(f"could not tokenize {need} tokens of parity items (the tokenizer returns too little)")


def build_prompts(
    items: Sequence[str], lengths: Sequence[int], alter_block: int, offset: int, tokenize: Tokenizer
) -> list[ParityPrompt]:
    """One prompt per length (see the module doc); `alter_block` = the smallest block size."""
    if not items:
        raise PromptError("no parity items")
    prompts = []
    for index, length in enumerate(lengths):
        start = (offset + index * STRIDE) % len(items)
        ids = _ids_from(items, start, length, tokenize)[:length]
        replaced = max(1, min(alter_block, length // 2))
        other = _ids_from(items, start + ALTER_SHIFT, replaced + 1 + ALTER_WINDOW, tokenize)
        original = ids[1 : replaced + 1]

        def changed(shift: int, original: list[int] = original, other: list[int] = other) -> int:
            return sum(x != y for x, y in zip(original, other[1 + shift :], strict=False))

        shift = max(range(ALTER_WINDOW + 1), key=changed)  # items start alike ("Question:"): most changes
        altered = [ids[0], *other[1 + shift : 1 + shift + replaced], *ids[replaced + 1 :]]
        if altered == ids:
            raise PromptError(f"the altered twin of the {length}-token prompt equals it (item {start})")
        prompts.append(ParityPrompt(length, ids, altered, replaced, start))
    return prompts
