"""`target.local`: the local target's settings (the config layer: imports only canary.config and canary.core)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, field_validator

from canary.config.base import NonNegativeInt, PositiveInt, Strict, TargetSection
from canary.config.secrets import EnvName
from canary.core.redact import has_userinfo, looks_secret
from canary.core.words import listing


class LocalTargetConfig(Strict):
    """Start real vLLM processes on this machine."""

    @field_validator("env")
    @classmethod
    def _no_secret_values(cls, env: dict[str, str]) -> dict[str, str]:
        secret = sorted(name for name, value in env.items() if value and (looks_secret(name) or has_userinfo(value)))
        if secret:
            raise ValueError(
                f"{listing(secret)} look(s) like a secret: a value here is stored in every run's config.json and "
                "printed by --dry-run; export it in the canary's environment and name it in target.local.env_from "
                f"(e.g. env_from: {{{secret[0]}: {secret[0]}}})"
            )
        return env

    engine_python: str = Field(".venv-engine/bin/python", description="Default engine venv python.")
    entrypoint: list[str] = Field(
        ["-m", "vllm.entrypoints.openai.api_server"], description="Args after python that start a server."
    )
    router: list[str] = Field([".venv-engine/bin/vllm-router"], description="P/D router command (vllm-router).")
    host: str = Field("127.0.0.1", description="Bind address; loopback unless you know why.")
    enforce_eager: bool | Literal["auto"] = Field(
        "auto",
        description="--enforce-eager on every engine. auto: on CPU only (saves ~1 min per start there); GPUs "
        "then run with CUDA graphs and torch.compile, as vLLM is deployed. true/false: on every platform.",
    )
    env: dict[str, str] = Field(
        default_factory=dict,
        description="Extra env for every engine process. No secrets (a name like *_TOKEN, *PASSWORD*, *SECRET*, "
        "*_KEY with a value is refused: the config lands in config.json and --dry-run): use env_from.",
    )
    env_from: dict[EnvName, EnvName] = Field(
        default_factory=dict,
        description="Engine variables copied from the canary's own environment at start (engine name -> the "
        "canary's variable), for secrets such as HF_TOKEN: the value never enters the config, config.json or "
        "--dry-run's output.",
    )
    extra_args: list[str] = Field(default_factory=list, description="Extra args for every engine.")
    cpu_kvcache_space_gib: PositiveInt = Field(1, description="VLLM_CPU_KVCACHE_SPACE (CPU only).")
    nice: int = Field(
        10,
        ge=0,
        le=19,
        description="Run engines and the router this many nice steps below the canary, so the load client "
        "sharing their cores is not starved by what it measures (its lag check would mark the cell invalid). "
        "0: same priority. Each server's session (its scheduler autogroup) gets this nice too: with autogroups on, a "
        "process nice alone does not rank the server against the client, whose lag p99 beside a P/D pair on 2 cores "
        "fell from 30-140 ms to 13-20 ms with it. The container target weighs its containers' parent cgroup like "
        "this nice instead (canary.targets.cgroup_weight), where the CLI's cgroups are plain directories.",
    )
    helper_cpus: Annotated[list[NonNegativeInt], Field(min_length=1)] | Literal["auto"] | None = Field(
        "auto",
        description="Cores for the processes that are not engine compute (API servers, router, the load client, "
        "the engines' I/O threads), moved there once a cell is ready (canary.targets.affinity). auto: on CPU, a "
        "P/D cell's helpers share prefill's cores and decode keeps its own (measured on 2 cores: paired windows "
        "a fifth less noisy, deployments closer together); aggregated cells and GPU platforms stay as started. A list: "
        "these cores for every cell. null: nothing moved.",
    )
    nixl_progress_delay_us: PositiveInt | None = Field(
        1000,
        description="CPU only: the least sleep (microseconds) of the NIXL agent's progress thread between "
        "polls. nixl 1.5.1 hard-codes 0, a busy loop that costs one core per engine: an idle P/D pair "
        "burned both cores of a 2-core machine and served 0.5 req/s. null leaves NIXL as shipped.",
    )


TARGET = TargetSection(LocalTargetConfig, "Local settings.", order=0, engines_here=True)
