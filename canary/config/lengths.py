"""Whether the requests a config's checks send fit every model's max_model_len.

vLLM answers a request whose prompt plus max_tokens exceeds --max-model-len with HTTP 400, so a config
that sends one would start engines only to judge every cell failed. The throughput load's longest prompt
plus its output, the parity prompts plus their generated tokens and the accuracy answers are checked
here against every model of the config, at load time.
"""

from __future__ import annotations

from canary.config.checks import ThroughputCheckConfig
from canary.config.models import ModelSpec
from canary.config.root import CanaryConfig
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
        _check_throughput(checks.throughput, index, model, source)
    if checks.parity.enabled:
        _check_parity(config, index, model, source)
    if checks.accuracy.enabled and checks.accuracy.max_gen_toks >= model.max_model_len:
        raise ConfigError(
            source,
            "checks.accuracy.max_gen_toks",
            f"{checks.accuracy.max_gen_toks} answer tokens leave no room for a question within "
            f"{_model_label(index, model)}",
        )


def _check_throughput(settings: ThroughputCheckConfig, index: int, model: ModelSpec, source: str) -> None:
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
