"""A cell of the matrix: one deployment (model, image, backend, block sizes, KV dtype, runner, topology).

What the planner (canary.plan.matrix) knows about it: its status, why, its risk flags and the known outcome.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from canary.config import Expectation, Runner, Topology
from canary.config.matrix import PREFIX_CACHING_FLAGS
from canary.plan.kube_names import k8s_name_for

CellStatus = Literal["planned", "skipped", "unsupported"]

RISK_KERNEL_SPLIT = "kernel-split"
RISK_PD_BLOCK_MISMATCH = "pd-block-mismatch"
RISK_COMPRESSED_CACHE = "compressed-cache"
RISK_MRV2_PD = "mrv2-pd"
RISK_MIXED_PAIR = "mixed-pair"
RISK_BLOCK_REWRITE = "block-rewrite"
"""The cell asks a block size vLLM rewrites for its model's KV family (the catalog's `block_rewrites`)."""
RISK_PD_TP_RATIO = "pd-tp-ratio"
"""Prefill and decode run different tensor-parallel sizes: decode reads each remote rank's share of the KV
heads (vLLM's tp_ratio), the heterogeneous-TP path of NIXL."""
HIGH_RISKS = frozenset(
    {
        RISK_KERNEL_SPLIT,
        RISK_PD_BLOCK_MISMATCH,
        RISK_COMPRESSED_CACHE,
        RISK_MIXED_PAIR,
        RISK_BLOCK_REWRITE,
        RISK_PD_TP_RATIO,
    }
)
RISKS: tuple[str, ...] = (
    RISK_KERNEL_SPLIT,
    RISK_PD_BLOCK_MISMATCH,
    RISK_COMPRESSED_CACHE,
    RISK_MRV2_PD,
    RISK_MIXED_PAIR,
    RISK_BLOCK_REWRITE,
    RISK_PD_TP_RATIO,
)
"""Every risk flag the planner (canary.plan.matrix) gives a cell."""


def prefix_caching_label(on: bool) -> str:
    """A cell id's prefix-caching part."""
    return "pc-on" if on else "pc-off"


class Cell(BaseModel):
    """One deployment of the matrix and what the planner knows about it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str = Field(description="Stable readable id, e.g. pd.flashinfer.p128-d128.fp8.v2.patched.")
    k8s_name: str = Field(
        "",
        description="DNS-1123 label form of the id (canary.plan.kube_names.k8s_name_for; filled in from the id "
        "when not given or empty).",
    )
    model: str = Field(description="Served model name.")
    model_source: str = Field(description="HF id, directory, or builtin:tiny.")
    family: str = Field("dense", description="The model's KV family (the catalog's `families`).")
    backend: str = Field(description="Attention backend asked for.")
    prefill_block_size: int = Field(description="--block-size of prefill (or of the aggregated server).")
    decode_block_size: int = Field(description="--block-size of decode (== prefill when aggregated).")
    kernel_block_prefill: int | None = Field(description="Kernel block size prefill runs with (None: none fits).")
    kernel_block_decode: int | None = Field(description="Kernel block size decode runs with (None: none fits).")
    kv_cache_dtype: str = Field(description="--kv-cache-dtype.")
    runner: Runner = Field(description="Model runner asked for.")
    topology: Topology = Field(description="aggregated or pd-nixl.")
    image: str = Field(description="Image key.")
    image_ref: str = Field(description="Image reference.")
    status: CellStatus = Field(description="planned, skipped (impossible) or unsupported (not on this platform).")
    reason: str | None = Field(None, description="Why skipped or unsupported.")
    risks: tuple[str, ...] = Field((), description="Risk flags.")
    expect: Expectation | None = Field(None, description="Known outcome from the config.")
    storage_block_prefill: int | None = Field(
        None, description="Compressed-cache models: prefill's storage block, block size / compress_ratio."
    )
    storage_block_decode: int | None = Field(
        None, description="Compressed-cache models: decode's storage block, block size / compress_ratio."
    )
    decode_runner: Runner | None = Field(None, description="Decode's runner in a mixed pair (None: == runner).")
    decode_image: str | None = Field(None, description="Decode's image key in a mixed pair (None: == image).")
    decode_image_ref: str | None = Field(None, description="Decode's image reference in a mixed pair.")
    prefill_tp: int = Field(1, description="--tensor-parallel-size of prefill (or of the aggregated server).")
    decode_tp: int = Field(1, description="--tensor-parallel-size of decode (== prefill_tp when aggregated).")
    prefix_caching: bool | None = Field(
        None, description="Prefix caching asked of every engine of the cell (None: the engine's default)."
    )

    @model_validator(mode="before")
    @classmethod
    def _name_from_id(cls, data: Any) -> Any:
        if isinstance(data, dict) and not data.get("k8s_name") and isinstance(data.get("id"), str):
            return {**data, "k8s_name": k8s_name_for(data["id"])}
        return data

    @property
    def mixed(self) -> bool:
        """A P/D pair whose sides run different runners or images (a rolling upgrade)."""
        return self.decode_runner is not None or self.decode_image is not None

    def runner_for(self, role: str) -> Runner:
        """The model runner a role runs (decode may differ in a mixed pair)."""
        return self.decode_runner if role == "decode" and self.decode_runner is not None else self.runner

    def image_for(self, role: str) -> str:
        """The image key a role runs (decode may differ in a mixed pair)."""
        return self.decode_image if role == "decode" and self.decode_image is not None else self.image

    def tp_for(self, role: str) -> int:
        """The tensor-parallel size a role runs (prefill and aggregated: prefill_tp; decode: decode_tp)."""
        return self.decode_tp if role == "decode" else self.prefill_tp

    @property
    def tp_shape(self) -> str:
        """The tensor-parallel shape as text: tp2 (aggregated), tp2p1d (P/D)."""
        if self.topology == "aggregated":
            return f"tp{self.prefill_tp}"
        return f"tp{self.prefill_tp}p{self.decode_tp}d"

    @property
    def prefix_caching_label(self) -> str | None:
        """The cell id's prefix-caching part (pc-on, pc-off), None where the cell leaves it to the engine."""
        if self.prefix_caching is None:
            return None
        return prefix_caching_label(self.prefix_caching)

    def prefix_caching_args(self) -> list[str]:
        """The engine flag that asks for the cell's prefix caching (none where left to the engine's default)."""
        if self.prefix_caching is None:
            return []
        on, off = PREFIX_CACHING_FLAGS
        return [on if self.prefix_caching else off]

    def image_keys(self) -> list[str]:
        """Every image key the cell runs, its own first (a mixed pair's decode image second)."""
        return list(dict.fromkeys([self.image, self.image_for("decode")]))

    def image_ref_for(self, role: str) -> str:
        """The image reference a role runs."""
        return self.decode_image_ref if role == "decode" and self.decode_image_ref is not None else self.image_ref

    @property
    def tp_shape_set(self) -> bool:
        """Whether any role runs more than one tensor-parallel rank."""
        return self.prefill_tp != 1 or self.decode_tp != 1

    @property
    def high_risk(self) -> bool:
        """Whether any risk flag is one of the classes that broke vLLM."""
        return any(r in HIGH_RISKS for r in self.risks)

    @property
    def block_label(self) -> str:
        """b32 for aggregated, p32-d64 for P/D."""
        if self.topology == "aggregated":
            return f"b{self.prefill_block_size}"
        return f"p{self.prefill_block_size}-d{self.decode_block_size}"

    @property
    def kernel_label(self) -> str:
        """Kernel block(s) as text."""

        def one(size: int | None) -> str:
            return "-" if size is None else str(size)

        if self.topology == "aggregated":
            return one(self.kernel_block_prefill)
        return f"{one(self.kernel_block_prefill)}/{one(self.kernel_block_decode)}"

    def axis_values(self) -> dict[str, str]:
        """The cell's coordinates, used for pairwise coverage and labels."""
        return {
            "model": self.model,
            "backend": self.backend,
            "prefill_block_size": str(self.prefill_block_size),
            "decode_block_size": str(self.decode_block_size),
            "kv_cache_dtype": self.kv_cache_dtype,
            "runner": self.runner,
            "topology": self.topology,
            "image": self.image,
            # a mixed pair's other side and a tensor-parallel shape are coordinates of their own; homogeneous
            # single-rank cells keep the classic axes
            **({"prefill_tp": str(self.prefill_tp), "decode_tp": str(self.decode_tp)} if self.tp_shape_set else {}),
            **({"prefix_caching": str(self.prefix_caching).lower()} if self.prefix_caching is not None else {}),
            **(
                {"decode_runner": self.runner_for("decode"), "decode_image": self.image_for("decode")}
                if self.mixed
                else {}
            ),
        }
