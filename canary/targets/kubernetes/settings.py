"""`target.kubernetes`: the Kubernetes target's settings, NIXL placement and transport and the rotation (the config
layer: imports only canary.config, canary.core and canary.images)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, field_validator, model_validator

from canary.config.base import NonNegativeInt, PositiveInt, Strict, TargetSection
from canary.config.matrix import CellMatch
from canary.core.words import listing

SecretName = Annotated[
    str,
    Field(
        max_length=253,
        pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$",
        description="A Kubernetes Secret name (DNS-1123 subdomain).",
    ),
]


Placement = Literal["same-node", "cross-node"]
"""Where a P/D cell's decode pod runs relative to its prefill pod (vllm-pd renders pod (anti-)affinity)."""

UCX_NETWORK_TRANSPORTS = frozenset(
    {"rc", "rc_v", "rc_x", "rc_mlx5", "dc", "dc_x", "dc_mlx5", "ud", "ud_v", "ud_x", "ud_mlx5", "ib", "tcp"}
)
"""UCX transports (and the `ib` alias) that reach another node."""
UCX_CUDA_TRANSPORTS = frozenset({"cuda_copy", "cuda"})
"""UCX transports that handle GPU memory: UCX moves CUDA buffers only when one of them is listed."""
UCX_TRANSPORTS = (
    UCX_NETWORK_TRANSPORTS
    | UCX_CUDA_TRANSPORTS
    | frozenset({"cuda_ipc", "gdr_copy", "sm", "shm", "mm", "posix", "sysv", "xpmem", "cma", "knem", "self"})
)
"""UCX_TLS names the canary accepts (UCX 1.x transport names and aliases)."""
DEFAULT_UCX_TLS: dict[Placement, str] = {"same-node": "cuda_copy,cuda_ipc,rc", "cross-node": "rc,cuda_copy"}
"""UCX_TLS when a config names only the placement: CUDA IPC between GPUs of one node, RDMA across."""


class NixlTransportConfig(Strict):
    """How the NIXL connector of a P/D cell moves KV blocks on Kubernetes: placement and UCX_TLS."""

    placement: Placement = Field(
        "same-node",
        description="same-node: decode is scheduled onto prefill's node (pod affinity); cross-node: never "
        "onto it (pod anti-affinity). Both are required scheduling rules, so a cell that cannot be "
        "placed stays Pending instead of running elsewhere.",
    )
    ucx_tls: str | None = Field(
        None,
        description="UCX_TLS of prefill and decode, comma-separated, e.g. cuda_copy,cuda_ipc,rc (same "
        "node) or rc,cuda_copy / tcp,cuda_copy (across nodes). Unset: the placement's default "
        f"({DEFAULT_UCX_TLS}). GPU platforms must list cuda_copy (UCX moves no GPU memory without it); "
        "cross-node also a transport that leaves the node.",
    )

    progress_delay_us: PositiveInt | None = Field(
        1000,
        description="Platforms whose NIXL KV buffer is host memory (cpu) only: the least sleep (microseconds) of "
        "each P/D server's NIXL progress thread between polls, the chart's nixl.progressDelayUs (its engine site's "
        "sitecustomize.py installs it), as target.local.nixl_progress_delay_us does for local engines: NIXL's own "
        "busy loop costs a core per engine (an idle CPU pair under podman kube play kept ~86% of a core each). GPU "
        "platforms keep NIXL as shipped. null: as shipped everywhere.",
    )

    @field_validator("ucx_tls")
    @classmethod
    def _known_transports(cls, value: str | None) -> str | None:
        if value is None:
            return None
        names = [name.strip() for name in value.split(",")]
        if any(not name for name in names):
            raise ValueError(f"empty transport name in {value!r} (comma-separated names, e.g. rc,cuda_copy)")
        if any(name in ("all", "^") or name.startswith("^") for name in names):
            raise ValueError(f"{value!r}: name the transports (no 'all', no '^' exclusions)")
        unknown = [name for name in names if name not in UCX_TRANSPORTS]
        if unknown:
            raise ValueError(f"unknown UCX transport(s) {listing(unknown)}; known: {listing(sorted(UCX_TRANSPORTS))}")
        if len(set(names)) != len(names):
            raise ValueError(f"duplicate transports in {value!r}")
        return ",".join(names)

    @model_validator(mode="after")
    def _transport_reaches_the_peer(self) -> NixlTransportConfig:
        if self.placement == "cross-node" and not UCX_NETWORK_TRANSPORTS & set(self.transports):
            raise ValueError(
                f"placement cross-node but ucx_tls {self.tls!r} has no transport that leaves the node "
                f"(one of {listing(sorted(UCX_NETWORK_TRANSPORTS))})"
            )
        return self

    @property
    def tls(self) -> str:
        """The UCX_TLS value the cells get (the placement's default when unset)."""
        return self.ucx_tls or DEFAULT_UCX_TLS[self.placement]

    @property
    def transports(self) -> list[str]:
        """UCX_TLS as a list."""
        return self.tls.split(",")


class RotationConfig(Strict):
    """Rolling coverage of a matrix larger than one run (Kubernetes target with a GPU budget)."""

    every_night: list[CellMatch] | None = Field(
        None,
        description="Cells that run every night (with the aggregated controls of their P/D cells). Unset: every "
        "high-risk cell. The other cells fill the rest of the window, least recently checked first.",
    )
    state_file: str | None = Field(
        None,
        description="JSON file with each cell's last check time (written atomically after every cell). "
        "Unset: RESULTS_DIR/rotation-<config name>.json. Keep it on a persistent volume.",
    )


class KubernetesTargetConfig(Strict):
    """Check cells deployed by the vllm-pd Helm chart, or deploy them in waves (gpu_budget)."""

    namespace: str = Field("vllm-canary", description="Namespace of the cells.")
    release: str = Field("vllm-pd", description="Helm release name of the vllm-pd chart.")
    in_cluster: bool = Field(True, description="Use the pod's service account (CronJob).")
    kubeconfig: str | None = Field(None, description="Kubeconfig path when not in cluster.")
    ready_timeout_s: PositiveInt = Field(1800, description="Deadline for pods to become Ready.")
    gpu_budget: PositiveInt | None = Field(
        None,
        description="GPUs the canary may hold at once. Set: the controller deploys the cells itself in waves that "
        "fit (helm template of `chart`), tearing each wave down before the next. Unset: Helm deployed every cell.",
    )
    job_deadline_s: PositiveInt = Field(
        14400,
        description="Wall-time limit of one run: the helm/canary CronJob's activeDeadlineSeconds is rendered from "
        "this key. `canary plan` refuses a plan that does not fit; a run starts no wave that would overrun it.",
    )
    typical_start_s: PositiveInt = Field(
        600, description="Typical seconds from creating a wave to its cells being ready (image pull, weights, JIT)."
    )
    teardown_timeout_s: PositiveInt = Field(
        600, description="Deadline for a torn-down wave's pods to disappear before the next wave starts."
    )
    lease_duration_s: PositiveInt = Field(
        120,
        description="The run lease (gpu_budget): a run holds the Lease `<release>-canary-run` in `namespace` while it "
        "deploys, renewing it every third of this; a lease not renewed for this long is a dead run's and is taken "
        "over (its objects swept). One run of a release at a time.",
    )
    lease_wait_s: NonNegativeInt = Field(
        600,
        description="How long a run waits for another live run of the release to finish before it refuses "
        "(exit 1, naming the holder; 0: refuse at once).",
    )
    chart: str = Field("helm/vllm-pd", description="The vllm-pd chart the waves are rendered from (gpu_budget).")
    chart_values: list[str] = Field(
        default_factory=list, description="Values files for the chart (GPU resources, node selectors, model cache)."
    )
    image_pull_secrets: list[SecretName] = Field(
        default_factory=list,
        description="Secrets (in `namespace`) the engine and router pods pull their images with, e.g. [regcred]: "
        "rendered as the vllm-pd chart's imagePullSecrets (the controller pod's: helm/canary imagePullSecrets).",
    )
    rotation: RotationConfig = Field(default_factory=RotationConfig, description="Rolling coverage.")
    nixl: NixlTransportConfig = Field(
        default_factory=NixlTransportConfig,
        description="Placement of prefill and decode and the UCX transports NIXL may use (P/D cells).",
    )


def _config_problem(config: Any) -> tuple[str, str] | None:
    """What a whole config (CanaryConfig) asks of a cluster that it cannot do: a NIXL transport that moves no GPU
    memory on a GPU platform; on this kind, an image ref that is a pip requirement (a cluster pulls images)."""
    nixl = config.target.kubernetes.nixl
    if config.platform != "cpu" and not UCX_CUDA_TRANSPORTS & set(nixl.transports):
        return (
            "target.kubernetes.nixl.ucx_tls",
            f"{nixl.tls!r} lists no cuda_copy: on {config.platform} the KV cache is GPU memory, which UCX "
            "moves only with a CUDA transport (e.g. rc,cuda_copy)",
        )
    if config.target.kind != "kubernetes":
        return None
    from canary.images.table import is_image_reference

    for key, image in config.images.items():
        if not is_image_reference(image.ref):
            return (
                f"images.{key}.ref",
                f"{image.ref!r} is a pip requirement, which only the local target installs; a cluster pulls "
                "a container image: give a reference like registry.example.com/me/vllm:0.33.0-mypatch",
            )
    return None


TARGET = TargetSection(KubernetesTargetConfig, "Kubernetes settings.", order=2, problem=_config_problem)
