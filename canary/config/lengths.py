"""Whether the requests a config's checks send fit every model's max_model_len.

vLLM answers a request whose prompt plus max_tokens exceeds --max-model-len with HTTP 400, so a config
that sends one would start engines only to judge every cell failed. The throughput load's longest prompt
plus its output (a named workload's longest request: a shared prefix with its suffix, a conversation's
last turn, the largest block residue of the matrix's logical blocks, a trace's longest line), the parity
prompts plus their generated tokens and the accuracy answers are checked here against every model of
the config, at load time.
"""

from __future__ import annotations

from pathlib import Path

from canary.checks.throughput.settings import ThroughputCheckConfig
from canary.config.models import ModelSpec
from canary.config.root import CanaryConfig
from canary.config.trace import load_trace
from canary.errors import ConfigError

PARITY_MIN_PROMPT = 2
"""The shortest prompt parity sends (canary.plan.parity_lengths keeps lengths from 2 up)."""
NORMAL_SIGMAS = 4
"""A normal length distribution is unbounded: lengths up to mean + this many standard deviations must
fit (with 200 requests, the chance that one draws beyond is under 1%)."""


def parity_prompt_limit(config: CanaryConfig) -> int:
    """The longest prompt every model of the config takes with parity's max_tokens and one re-scored token."""
    return min(m.max_model_len for m in config.models) - config.checks.parity.max_tokens - 1


def longest(mean: int, settings: ThroughputCheckConfig) -> int:
    """The longest length the load draws around a mean (canary.load.workload.sample_lengths)."""
    if settings.length_distribution == "fixed" or settings.length_spread == 0:
        return mean
    sigmas = 1 if settings.length_distribution == "uniform" else NORMAL_SIGMAS
    return max(1, round(mean * (1 + sigmas * settings.length_spread)))


def _shortest_model(config: CanaryConfig) -> tuple[int, ModelSpec]:
    return min(enumerate(config.models), key=lambda item: item[1].max_model_len)


def _model_label(index: int, model: ModelSpec) -> str:
    return f"models.{index}.max_model_len {model.max_model_len} (model {model.name!r})"


def check_lengths(config: CanaryConfig, source: str) -> None:
    """ConfigError (file and key path) for an enabled check whose requests exceed a model's max_model_len."""
    index, model = _shortest_model(config)
    checks = config.checks
    if checks.throughput.enabled:
        _check_throughput(config, index, model, source)
    if checks.parity.enabled:
        _check_parity(config, index, model, source)
    if checks.accuracy.enabled and checks.accuracy.max_gen_toks >= model.max_model_len:
        raise ConfigError(
            source,
            "checks.accuracy.max_gen_toks",
            f"{checks.accuracy.max_gen_toks} answer tokens leave no room for a question within "
            f"{_model_label(index, model)}",
        )


def logical_block_sizes(config: CanaryConfig) -> list[int]:
    """Every logical block size the matrix names (axes and hand-added cells)."""
    matrix = config.matrix
    sizes = {*matrix.prefill_block_sizes, *(matrix.decode_block_sizes or [])}
    sizes |= {size for cell in matrix.include for size in (cell.prefill_block_size, cell.decode_block_size)}
    return sorted(sizes)


def workload_longest(config: CanaryConfig) -> tuple[int, str, str] | None:
    """The longest request (prompt + output tokens) a named workload sends, the key that sets it and how it
    is made up; None for synthetic (prompt_tokens and output_tokens alone, checked on their own)."""
    settings = config.checks.throughput
    shape = settings.workload
    prompt, output = longest(settings.prompt_tokens, settings), longest(settings.output_tokens, settings)
    key = "checks.throughput.workload"
    if shape.kind == "shared_prefix":
        return (
            shape.prefix_tokens + prompt + output,
            f"{key}.prefix_tokens",
            (f"prefix_tokens {shape.prefix_tokens} + a suffix up to {prompt} + output up to {output}"),
        )
    if shape.kind == "multi_turn":  # the last turn: every turn's new tokens and every earlier turn's output
        turns = shape.turns
        return (
            turns * (prompt + output),
            f"{key}.turns",
            (f"turn {turns} of a conversation: {turns} x (up to {prompt} new + up to {output} output) tokens"),
        )
    if shape.kind == "block_residues":  # a cell's kernel block divides its logical block: the logical is the top
        sizes = shape.block_sizes or logical_block_sizes(config)
        top = max(shape.block_multiples) * max(sizes) + 1
        return (
            top + output,
            f"{key}.block_multiples",
            (f"a {top}-token prompt ({max(shape.block_multiples)} x block {max(sizes)} + 1) + output up to {output}"),
        )
    if shape.kind == "trace":
        trace = load_trace(Path(str(shape.trace_path)))[: settings.warmup_requests + settings.num_requests]
        line = max(trace, key=lambda r: r.input_length + r.output_length)
        return (
            line.input_length + line.output_length,
            f"{key}.trace_path",
            (f"{shape.trace_path}:{line.line} asks {line.input_length} + {line.output_length} tokens"),
        )
    return None


def _check_throughput(config: CanaryConfig, index: int, model: ModelSpec, source: str) -> None:
    settings = config.checks.throughput
    named = workload_longest(config)
    if named is not None:
        total, key, how = named
        if total > model.max_model_len:
            raise ConfigError(
                source,
                key,
                f"the {settings.workload.kind} workload's longest request is {total} tokens ({how}): beyond "
                f"{_model_label(index, model)}, vLLM would answer it with HTTP 400",
            )
    prompt, output = longest(settings.prompt_tokens, settings), longest(settings.output_tokens, settings)
    if prompt + output <= model.max_model_len:
        return
    spread = (
        ""
        if prompt == settings.prompt_tokens and output == settings.output_tokens
        else (f" ({settings.length_distribution} lengths, spread {settings.length_spread}: up to {prompt} + {output})")
    )
    key = "output_tokens" if output >= model.max_model_len else "prompt_tokens"
    raise ConfigError(
        source,
        f"checks.throughput.{key}",
        f"prompt_tokens {settings.prompt_tokens} + output_tokens {settings.output_tokens}{spread} exceed "
        f"{_model_label(index, model)}: vLLM would answer every request with HTTP 400",
    )


def _check_parity(config: CanaryConfig, index: int, model: ModelSpec, source: str) -> None:
    settings = config.checks.parity
    limit = parity_prompt_limit(config)
    if limit < PARITY_MIN_PROMPT:
        raise ConfigError(
            source,
            "checks.parity.max_tokens",
            f"max_tokens {settings.max_tokens} leaves no parity prompt (of {PARITY_MIN_PROMPT} tokens or more, plus "
            f"max_tokens + 1) within {_model_label(index, model)}",
        )
    for position, length in enumerate(settings.prompt_lengths):
        if length > limit:
            raise ConfigError(
                source,
                f"checks.parity.prompt_lengths.{position}",
                f"a {length}-token prompt + max_tokens {settings.max_tokens} + 1 exceeds {_model_label(index, model)}"
                f" (it would be dropped silently): the longest that fits is {limit}",
            )
