"""The matrix a config expands: axes, cell matches, expectations (known bugs), extra cells."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from canary.config.base import ExpectKind, PositiveInt, Runner, Strict, Topology
from canary.config.checks import CheckName

PREFIX_CACHING_FLAGS = ("--enable-prefix-caching", "--no-enable-prefix-caching")
"""vLLM's prefix-caching switch, on and off: a cell's prefix_caching passes one; a config that plans it may not
also pass either in extra_args (canary.config.root refuses that)."""


class CellMatch(Strict):
    """Selects cells by their axis values; unset fields match anything."""

    model: str | None = Field(None, description="Served model name.")
    family: str | None = Field(None, description="The model's KV family (models[].family).")
    backend: str | None = Field(None, description="Attention backend name.")
    block_size: PositiveInt | None = Field(None, description="Matches a prefill OR decode block size.")
    prefill_block_size: PositiveInt | None = Field(None, description="Prefill (or aggregated) block size.")
    decode_block_size: PositiveInt | None = Field(None, description="Decode block size.")
    kv_cache_dtype: str | None = Field(None, description="KV cache dtype.")
    runner: Runner | None = Field(None, description="Model runner.")
    topology: Topology | None = Field(None, description="aggregated or pd-nixl.")
    image: str | None = Field(None, description="Image key (of prefill, in a mixed pair).")
    decode_runner: Runner | None = Field(None, description="Decode's model runner (P/D; == runner unless mixed).")
    decode_image: str | None = Field(None, description="Decode's image key (P/D; == image unless mixed).")
    prefill_tp: PositiveInt | None = Field(
        None, description="Prefill's (or the aggregated server's) --tensor-parallel-size."
    )
    decode_tp: PositiveInt | None = Field(
        None, description="Decode's --tensor-parallel-size (aggregated: == prefill_tp)."
    )
    prefix_caching: bool | None = Field(
        None,
        description="Prefix caching asked of the cell's engines (matrix.prefix_caching or an include's): true or "
        "false matches only cells that set it; a cell left to the engine's default is matched by leaving this unset.",
    )


class Expectation(Strict):
    """A known outcome for matching cells (like vLLM's xfail configs): reported as expected."""

    match: CellMatch = Field(description="Which cells this expectation covers.")
    expect: ExpectKind = Field(description="startup-fail, check-fail, or pass.")
    reason: str = Field(min_length=1, description="Why (an issue link or a sentence); shown in every report.")
    failure_class: str | None = Field(
        None, description="For startup-fail: the signature id the failure must be classified as."
    )
    failing_checks: list[CheckName] | None = Field(
        None,
        min_length=1,
        description="For check-fail: the checks that must all fail (e.g. [parity, accuracy]); any other "
        "check failing still fails the cell, and a named check that passes makes it unexpected-pass. A named "
        "check that does not run (disabled) or cannot judge (invalid, skipped) counts neither way; when none "
        "of them judged, the cell is skipped (invalid if one was). Unset: any failing check meets the expectation.",
    )
    engine_dies: bool = Field(
        False,
        description="For check-fail: an engine (or the router) dying while the cell is checked is part of the known "
        "bug (e.g. a prefix-caching crash on long prompts). Unset, a death is a finding of its own that fails the "
        "cell whatever else is expected, and a check that crashed (error) never meets an expectation.",
    )

    @model_validator(mode="after")
    def _fields_fit_the_kind(self) -> Expectation:
        if self.failing_checks is not None and self.expect != "check-fail":
            raise ValueError(f"failing_checks applies to expect: check-fail, not {self.expect}")
        if self.engine_dies and self.expect != "check-fail":
            raise ValueError(f"engine_dies applies to expect: check-fail, not {self.expect}")
        if self.failure_class is not None and self.expect != "startup-fail":
            raise ValueError(f"failure_class applies to expect: startup-fail, not {self.expect}")
        return self


class ExtraCell(Strict):
    """A cell added by hand on top of the cross product (e.g. one P/D block-size mismatch)."""

    backend: str = Field(description="Attention backend name.")
    prefill_block_size: PositiveInt = Field(description="Prefill block size.")
    decode_block_size: PositiveInt = Field(description="Decode block size (topology aggregated: equal to prefill's).")
    kv_cache_dtype: str = Field("auto", description="KV cache dtype.")
    runner: Runner = Field("v1", description="Model runner.")
    topology: Topology = Field("pd-nixl", description="Topology.")
    image: str | None = Field(None, description="Image key (default: every image).")
    model: str | None = Field(None, description="Served model name (default: every model).")
    decode_runner: Runner | None = Field(
        None,
        description="pd-nixl only: decode's model runner when it differs from prefill's (a mixed pair, as in a "
        "rolling upgrade; unset: the same).",
    )
    decode_image: str | None = Field(
        None,
        description="pd-nixl only: decode's image key when it differs from prefill's (a rolling upgrade that "
        "reached one side first; unset: the same).",
    )
    prefill_tp: PositiveInt | None = Field(
        None,
        description="--tensor-parallel-size of prefill (of the server, when aggregated); unset: the model's "
        "tensor_parallel_size. With decode_tp it makes a P/D shape such as 2p1d (cell id part tp2p1d).",
    )
    decode_tp: PositiveInt | None = Field(
        None, description="pd-nixl only: --tensor-parallel-size of decode; unset: the model's tensor_parallel_size."
    )
    prefix_caching: bool | None = Field(
        None,
        description="Prefix caching on (true: --enable-prefix-caching) or off (false: --no-enable-prefix-caching) on "
        "every engine of the cell (cell id part pc-on / pc-off); unset: the engine's default, and no id part.",
    )

    @model_validator(mode="after")
    def _mixed_pairs_are_pd(self) -> ExtraCell:
        if self.topology != "pd-nixl" and (self.decode_runner is not None or self.decode_image is not None):
            raise ValueError("decode_runner / decode_image make a mixed P/D pair: they need topology: pd-nixl")
        if self.topology != "pd-nixl" and self.decode_tp is not None:
            raise ValueError(
                "decode_tp is decode's tensor-parallel size: it needs topology: pd-nixl (aggregated: prefill_tp)"
            )
        return self


class MatrixSpec(Strict):
    """The axes of the matrix; their cross product (filtered by the capability catalog) is the plan."""

    attention_backends: list[str] = Field(min_length=1, description="Backends by vLLM enum name.")
    prefill_block_sizes: list[PositiveInt] = Field(
        min_length=1, description="Logical block sizes of prefill servers (and of aggregated servers)."
    )
    decode_block_sizes: list[PositiveInt] | None = Field(
        None, description="Decode block sizes. Unset: decode uses the prefill block size (P == D only)."
    )
    kv_cache_dtypes: list[str] = Field(["auto"], min_length=1, description="--kv-cache-dtype values.")
    runners: list[Runner] = Field(["v1"], min_length=1, description="v1 or v2 (VLLM_USE_V2_MODEL_RUNNER).")
    topologies: list[Topology] = Field(
        ["aggregated", "pd-nixl"], min_length=1, description="aggregated control and/or P/D over NIXL."
    )
    images: list[str] | None = Field(None, description="Image keys to run (default: every image).")
    prefill_tp_sizes: list[PositiveInt] | None = Field(
        None,
        description="pd-nixl cells: prefill --tensor-parallel-size values, crossed with decode_tp_sizes (a P/D shape "
        "per pair, e.g. [1, 2] x [1, 2]: 1p1d, 1p2d, 2p1d, 2p2d). Unset: the model's tensor_parallel_size. "
        "Aggregated cells (the controls) keep the model's.",
    )
    decode_tp_sizes: list[PositiveInt] | None = Field(
        None,
        description="pd-nixl cells: decode --tensor-parallel-size values. Unset: the model's tensor_parallel_size.",
    )
    prefix_caching: list[bool] | None = Field(
        None,
        description="Prefix caching as a dimension: [true, false] runs every cell with it on and off "
        "(--enable-prefix-caching / --no-enable-prefix-caching, cell id part pc-on / pc-off). Startup verifies "
        "the engines run what was asked (vllm:cache_config_info enable_prefix_caching) and kv_transfer proves it on "
        "decode (a prefix it saw comes from its own cache when on, over NIXL when off). Unset: the engine's "
        "default, no id part.",
    )
    include: list[ExtraCell] = Field(default_factory=list, description="Cells added by hand.")
    exclude: list[CellMatch] = Field(default_factory=list, description="Cells removed from the plan.")
    expectations: list[Expectation] = Field(default_factory=list, description="Known outcomes (xfail).")
    reduction: Literal["full", "pairwise"] = Field(
        "full", description="full cross product, or pairwise covering (always keeps high-risk cells)."
    )
    run_unsupported: bool = Field(
        False, description="Run cells the platform cannot honour anyway (to prove fallback detection)."
    )
    select: list[str] = Field(
        default_factory=list,
        description="Cell ids a run or plan takes when the command line names none (`--only`); `--all` takes "
        "every cell. Empty: every cell. The embedded default uses it for a first run of a few minutes.",
    )

    @field_validator("attention_backends", "kv_cache_dtypes", "prefill_tp_sizes", "decode_tp_sizes", "prefix_caching")
    @classmethod
    def _no_duplicates(
        cls, values: list[str] | list[int] | list[bool] | None
    ) -> list[str] | list[int] | list[bool] | None:
        if values is None:
            return values
        if len(set(values)) != len(values):
            raise ValueError(f"duplicate entries in {values}")
        if not values:
            raise ValueError("an empty list plans nothing: leave it unset for the model's value")
        return values

    @field_validator("attention_backends")
    @classmethod
    def _upper_backends(cls, values: list[str]) -> list[str]:
        return [v.upper() for v in values]
