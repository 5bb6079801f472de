"""The multi_turn workload's requests: request i is turn i // C of conversation i % C (C = ceil(total / turns)),
so turns of different conversations interleave. A turn's prompt is the previous turn's prompt, then as many
tokens as the previous turn's output (`max_tokens`, exact under ignore_eos) and new user tokens. The
"previous output" tokens are STAND-IN ids drawn from the pool, not the text the server generated: the
prompt has the right length and the right shared prefix with the previous turn (what the prefix cache
sees), without waiting for the answer's token ids. Each turn names its predecessor (`after`); the closed
loop sends it only once that one finished (user.RequestSource)."""

from __future__ import annotations

import math
import random
from typing import Any

from canary.load.shapes import Draw, ShapedRequest, ShapeInputs, generator, lengths


@generator("multi_turn")
def generate(spec: ShapeInputs, rng: random.Random) -> list[ShapedRequest]:
    draw = Draw(spec)
    total = spec.total
    conversations = math.ceil(total / spec.shape.turns)
    news, outputs = lengths(spec, rng)
    history: list[list[Any]] = [[] for _ in range(conversations)]
    history_tokens = [0] * conversations
    requests = []
    for i in range(total):
        conv, turn = i % conversations, i // conversations
        units = history[conv] + draw.units(news[i], rng)
        tokens = history_tokens[conv] + news[i]
        requests.append(
            ShapedRequest(draw.prompt(units), tokens, outputs[i], after=i - conversations if turn else None, group=conv)
        )
        history[conv] = units + draw.units(outputs[i], rng)  # stand-in for the answer: its length, not its ids
        history_tokens[conv] = tokens + outputs[i]
    return requests
