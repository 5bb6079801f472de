"""The shared_prefix workload's requests: group g's prefix is drawn once; request i belongs to group
i % prefix_groups and is that prefix followed by a fresh suffix of a sampled length (prompt_tokens,
length_distribution)."""

from __future__ import annotations

import random

from canary.load.shapes import Draw, ShapedRequest, ShapeInputs, generator, lengths


@generator("shared_prefix")
def generate(spec: ShapeInputs, rng: random.Random) -> list[ShapedRequest]:
    shape, draw = spec.shape, Draw(spec)
    suffixes, outputs = lengths(spec, rng)
    prefixes = [draw.units(shape.prefix_tokens, rng) for _ in range(shape.prefix_groups)]
    requests = []
    for i, (suffix, output) in enumerate(zip(suffixes, outputs, strict=True)):
        group = i % shape.prefix_groups
        prompt = draw.prompt(prefixes[group] + draw.units(suffix, rng))
        requests.append(ShapedRequest(prompt, shape.prefix_tokens + suffix, output, group=group))
    return requests
