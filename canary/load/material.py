"""Prompt material of the load client: plain words and seeded request lengths (no I/O, no spec)."""

from __future__ import annotations

import random
from typing import Literal

LengthDistribution = Literal["fixed", "uniform", "normal"]

# Plain words used for text prompts (chat, or completions when no token pool is known) and for
# asking a server's /tokenize for a pool of ordinary token ids.
_WORD_TEXT = (
    "the of and to in is was for on are with as his they be at one have this from or had by word but "
    "what some we can out other were all there when up use your how said an each she which do their "
    "time if will way about many then them write would like so these her long make thing see him two "
    "has look more day could go come did number sound no most people my over know water than call "
    "first who may down side been now find any new work part take get place made live where after "
    "back little only round man year came show every good me give our under name very through just "
    "form sentence great think say help low line differ turn cause much mean before move right boy "
    "old too same tell does set three want air well also play small end put home read hand port large "
    "spell add even land here must big high such follow act why ask men change went light kind off "
    "need house picture try us again animal point mother world near build self earth father head stand"
)
WORDS: tuple[str, ...] = tuple(_WORD_TEXT.split())


def sample_lengths(
    mean: int, distribution: LengthDistribution, spread: float, count: int, rng: random.Random
) -> list[int]:
    """`count` lengths (>= 1) around `mean`."""
    if distribution == "fixed" or spread == 0:
        return [mean] * count
    if distribution == "uniform":
        low, high = max(1, round(mean * (1 - spread))), max(1, round(mean * (1 + spread)))
        return [rng.randint(low, high) for _ in range(count)]
    return [max(1, round(rng.gauss(mean, mean * spread))) for _ in range(count)]


def text_prompt(tokens: int, words_per_token: float, rng: random.Random) -> str:
    """A prompt of plain words meant to be about `tokens` tokens long."""
    count = max(1, round(tokens * words_per_token))
    return " ".join(rng.choice(WORDS) for _ in range(count))
