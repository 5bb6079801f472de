"""Models and images of a config: what is served (`models`) and from which image (`images`)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from canary.config.base import PositiveInt, Probability, Strict


class CompressedCache(Strict):
    """A compressed KV cache (DeepSeek-V4's compressor / indexer caches): one stored entry per
    `compress_ratio` logical tokens, so a logical block of B tokens is stored in a storage block of
    B / compress_ratio slots (vLLM 0.22.1 vllm/v1/kv_cache_interface.py:350-351 `storage_block_size`)."""

    compress_ratio: PositiveInt = Field(
        description="Logical tokens per stored entry; storage block = block size / compress_ratio (DeepSeek-V4's "
        "heavily compressed layers: 128, so --block-size 256 is stored in 2-slot blocks)."
    )

    def storage_block_size(self, block_size: int) -> int | None:
        """Slots per storage block for a logical block size (None: not a whole number of slots)."""
        if block_size % self.compress_ratio:
            return None
        return block_size // self.compress_ratio


class ModelSpec(Strict):
    """A model the matrix is run against."""

    name: str = Field(min_length=1, description="Served model name (what requests ask for).")
    source: str = Field(
        min_length=1,
        description="HF model id, local directory, or `builtin:tiny` for the model the project builds.",
    )
    attention: Literal["mha", "mla"] = Field("mha", description="Attention kind; MLA models need MLA backends.")
    family: str = Field(
        "dense",
        description="KV family, a key of the catalog's `families` (configs/backends.yaml): dense (mla when "
        "`attention: mla`), sliding-window, mla, "
        "gdn-hybrid, mamba-hybrid. The planner reads which backends serve it and where vLLM rewrites --block-size for "
        "it (a cell asking another block then runs another config than asked, unless an expectation names it).",
    )
    state_block_size: PositiveInt | None = Field(
        None,
        description="Hybrid families (gdn-hybrid, mamba-hybrid): the attention block vLLM raises a smaller "
        "--block-size to, so an attention page holds the model's state page (it depends on the state's size; "
        "measured for the tiny models: 256). Unset: any block size of a hybrid may be rewritten.",
    )
    compressed_cache: CompressedCache | None = Field(None, description="Set for models with a compressed KV cache.")
    max_model_len: PositiveInt = Field(2048, description="--max-model-len passed to every server.")
    tensor_parallel_size: PositiveInt = Field(1, description="--tensor-parallel-size per server.")
    expected_gsm8k: Probability | None = Field(
        None, description="Expected GSM8K flexible-extract accuracy of a healthy deployment (the absolute gate)."
    )
    extra_args: list[str] = Field(default_factory=list, description="Extra engine CLI args for this model.")
    env: dict[str, str] = Field(
        default_factory=dict,
        description="Environment variables of this model's engines, for what vLLM takes only from the environment "
        "(e.g. VLLM_SSM_CONV_STATE_LAYOUT=DS, which vLLM 0.33's NIXL connector asserts for Mamba/GDN hybrids). Local "
        "and container targets: set after target.local.env; Kubernetes: the cell's env in the vllm-pd chart.",
    )
    include_only: bool = Field(
        False,
        description="Leave this model out of the matrix's cross product: it runs only in the `matrix.include` cells "
        "that name it (a KV family model beside a dense matrix, e.g. upstream vLLM's sweep configs). An include "
        "without a model runs the cross product's models only. The cross product's cells keep ids without a model "
        "prefix when it runs one model; an include-only model's cells always carry it.",
    )

    @model_validator(mode="before")
    @classmethod
    def _mla_models_are_the_mla_family(cls, data: Any) -> Any:
        """`attention: mla` without a family is the mla family (its backends are the MLA ones), not dense."""
        if isinstance(data, dict) and data.get("attention") == "mla" and "family" not in data:
            return {**data, "family": "mla"}
        return data


class ImageSpec(Strict):
    """A vLLM build under test: a container image on Kubernetes, an engine venv locally."""

    ref: str = Field(
        min_length=1,
        description="Container image reference (Kubernetes target) or a label locally. With `base`, derived "
        "(canary.images.table: <registry>/vllm-patched:v<release>-<series hash[:12]>); a ref given too must equal it.",
    )
    base: str | None = Field(
        None,
        description="Upstream image of a release in docker/images.yaml (e.g. vllm/vllm-openai:v0.21.0) that "
        "`patches` apply to: the ref is derived from both, so it is the tag `make images` builds.",
    )
    engine_python: str | None = Field(
        None, description="Local target: python of the engine venv (default: .venv-engine/bin/python)."
    )
    patches: str | None = Field(
        None, description="Patch series file (docker/patches format) applied on top of this image's vLLM."
    )
    description: str = Field("", description="What this image is (shown in reports).")

    @model_validator(mode="before")
    @classmethod
    def _derive_ref(cls, data: Any) -> Any:
        if not isinstance(data, dict) or data.get("base") is None:
            return data
        from canary.images.table import ImageError, derived_ref

        base, patches, given = data["base"], data.get("patches"), data.get("ref")
        try:
            derived = derived_ref(str(base), None if patches is None else str(patches))
        except ImageError as exc:
            raise ValueError(str(exc)) from None
        if given is not None and given != derived:
            raise ValueError(
                f"ref {given!r} is not the image of base {base!r} + patches {patches!r}: that is {derived}"
            )
        return {**data, "ref": derived}

    @field_validator("ref")
    @classmethod
    def _ref_reads_as_an_image(cls, ref: str) -> str:
        from canary.images.table import ref_problem

        problem = ref_problem(ref)
        if problem:
            raise ValueError(problem)
        return ref

    kernel_block_sizes: dict[str, list[PositiveInt]] = Field(
        default_factory=dict,
        description="Backend -> the kernel block sizes this build advertises where it differs from the catalog "
        "(e.g. {CPU_ATTN: [32]} for the CPU kernel-split build); the planner and the layout gates use it.",
    )
