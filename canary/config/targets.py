"""Where cells run (`target.kind`): local processes, an endpoint, Kubernetes; NIXL transport."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator

from canary.config.base import PositiveInt, Strict, Topology
from canary.config.matrix import CellMatch
from canary.config.secrets import EnvName
from canary.config.urls import HttpUrl
from canary.core.redact import has_userinfo, looks_secret
from canary.core.words import listing

NonNegativeInt = Annotated[int, Field(ge=0)]
SecretName = Annotated[
    str,
    Field(
        max_length=253,
        pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$",
        description="A Kubernetes Secret name (DNS-1123 subdomain).",
    ),
]


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


class DevicePoolConfig(Strict):
    """The GPUs of this machine the canary may give its engines, one cell at a time from the pool's start.

    Every engine gets `models[].tensor_parallel_size` of them, prefill and decode disjoint (prefill first);
    the local target and a container target on the same host read the same pool (canary.targets.devices)."""

    gpus: list[NonNegativeInt] | Literal["all"] = Field(
        "all",
        description="GPU indices (as nvidia-smi numbers them; engines get CUDA_DEVICE_ORDER=PCI_BUS_ID so CUDA "
        "numbers them alike) the engines may use, in the order they are handed out, e.g. [4, 5, 6, 7] to leave "
        "0-3 to others. all: every GPU nvidia-smi lists when the run starts (a dry run on a machine without "
        "GPUs renders indices from 0 and says so). The caller's CUDA_VISIBLE_DEVICES is not read, like the rest "
        "of its environment. A cell that needs more GPUs than the pool has stops the run before anything starts "
        "(exit 2). CPU platforms ignore the pool.",
    )

    @field_validator("gpus", mode="before")
    @classmethod
    def _list_or_all(cls, value: object) -> object:
        if isinstance(value, str) and value != "all":
            raise ValueError(f"expected a list of GPU indices, e.g. [0, 1], or all; got {value!r}")
        return value

    @field_validator("gpus")
    @classmethod
    def _distinct(cls, value: list[int] | str) -> list[int] | str:
        if isinstance(value, list):
            if not value:
                raise ValueError("empty GPU list: name at least one GPU index, or all")
            repeated = sorted({g for g in value if value.count(g) > 1})
            if repeated:
                raise ValueError(f"GPU(s) {repeated} listed twice in {value}")
        return value


class EndpointTargetConfig(Strict):
    """Check an existing OpenAI-compatible server or P/D router; start nothing."""

    url: HttpUrl = Field(description="Base URL of the server or router, e.g. http://127.0.0.1:8000.")
    model: str | None = Field(None, description="Model name (default: the first listed by /v1/models).")
    metrics_url: HttpUrl | None = Field(None, description="/metrics of an aggregated server.")
    prefill_metrics_url: HttpUrl | None = Field(
        None, description="/metrics of the prefill server (P/D; required with topology pd-nixl)."
    )
    decode_metrics_url: HttpUrl | None = Field(
        None, description="/metrics of the decode server (P/D; required with topology pd-nixl)."
    )
    topology: Topology = Field("aggregated", description="What sits behind the URL.")

    @model_validator(mode="after")
    def _pd_needs_its_engines(self) -> EndpointTargetConfig:
        # A router's /metrics says nothing about its engines: without theirs, startup could verify no block
        # size and kv_transfer no NIXL counter, so such a P/D cell could never be judged. Refused here.
        missing = [k for k in ("prefill_metrics_url", "decode_metrics_url") if getattr(self, k) is None]
        if self.topology == "pd-nixl" and missing:
            raise ValueError(
                f"topology pd-nixl needs {' and '.join(missing)}: the engines' /metrics are the only place the "
                "canary reads what a P/D pair runs (block size, KV dtype, NIXL counters) behind a router"
            )
        return self


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


PullPolicy = Literal["never", "missing", "always"]


class ContainerTargetConfig(Strict):
    """Run every engine and router of a cell from its image through a Docker-compatible CLI, host network.

    The cell's commands are the local target's (`target.local` settings: host, enforce_eager, env,
    extra_args, NIXL progress delay, CPU KV space apply here too); what differs is where they run."""

    cli: str | None = Field(
        None, description="docker, podman, or a path to either (default: podman if on PATH, else docker)."
    )
    images: dict[str, str] = Field(
        default_factory=dict,
        description="Image key (one of `images`; another key is an error) -> image reference to run (a tag or "
        "digest, any registry, or a local tag), run as is. Default: `images.<key>.base` for a key with a base, "
        "else `images.<key>.ref` when it is an image reference, else (the CPU default's pip-spec refs) "
        "`engine_image`; `images.<key>.patches` are applied in a derived image built and cached here.",
    )
    engine_image: str | None = Field(
        None,
        description="The engine image for image keys whose ref is no image reference (default: the CPU engine "
        "image `make images-cpu` builds, canary.images.table.cpu_engine_ref).",
    )
    router_image: str | None = Field(
        None, description="Image of the P/D router (default: the router image of docker/images.yaml)."
    )
    engine_command: list[str] = Field(
        ["python3", "-m", "vllm.entrypoints.openai.api_server"],
        min_length=1,
        description="The engine's command inside its image (replaces the image's entrypoint).",
    )
    router_command: list[str] = Field(
        ["vllm-router"], min_length=1, description="The router's command inside its image."
    )
    pull: PullPolicy = Field(
        "missing", description="Pull an image before the run: never (must exist locally), missing, or always."
    )
    shm: str = Field(
        "host",
        pattern=r"^(host|[1-9][0-9]*[kmg]?)$",
        description="Shared memory of each engine container (vLLM's workers and NCCL use /dev/shm; a container's "
        "default 64 MB is too small for tensor parallelism): host: `--ipc=host`, the host's IPC namespace and "
        "/dev/shm, as vLLM's container docs advise; a size such as 16g: `--shm-size=16g`, a private one.",
    )
    run_args: list[str] = Field(
        default_factory=list, description="Extra arguments of every `run` (e.g. --ulimit memlock=-1)."
    )
    stop_timeout_s: PositiveInt = Field(15, description="Seconds a container gets between SIGTERM and SIGKILL.")
    compile_cache: bool = Field(
        True,
        description="Mount a host folder per image (under the canary's cache, `container-home/<image id>`) as each "
        "engine's HOME, XDG, vLLM and TorchInductor cache, so what an engine compiles at start (TorchInductor's C++ "
        "kernels, vLLM's compile cache) is reused by the next container of the same image instead of compiled "
        "again. false: every container starts with an empty cache.",
    )


class TargetConfig(Strict):
    """Where cells run."""

    kind: Literal["local", "container", "kubernetes", "endpoint"] = Field("local", description="Target kind.")
    devices: DevicePoolConfig = Field(
        default_factory=DevicePoolConfig,
        description="GPUs of this machine the engines may use (targets that start engines here: local, container).",
    )
    same_engine_ok: bool = Field(
        False,
        description="Whether two image keys may run the same engine (local: the same python and patch series; "
        "container: the same image and series), e.g. a run that measures the noise between two copies of one "
        "build. false: such a config is refused (exit 2), since its report would compare a build with itself "
        "under two names.",
    )
    hf_home: str | None = Field(
        None,
        description="Hugging Face cache of the engines (their HF_HOME) for hub-id model sources, on this machine. "
        "Unset: $HF_HOME of the canary's environment, else ~/.cache/huggingface. Nothing downloads: a run whose "
        "hub model is not in <hf_home>/hub stops before anything starts and names the `huggingface-cli download` "
        "that fetches it (a dry run warns instead); engines run with HF_HUB_OFFLINE=1.",
    )
    local: LocalTargetConfig = Field(default_factory=LocalTargetConfig, description="Local settings.")
    container: ContainerTargetConfig = Field(
        default_factory=ContainerTargetConfig, description="Container settings (kind: container)."
    )
    endpoint: EndpointTargetConfig | None = Field(None, description="Endpoint settings (kind: endpoint).")
    kubernetes: KubernetesTargetConfig = Field(
        default_factory=KubernetesTargetConfig, description="Kubernetes settings."
    )

    @model_validator(mode="after")
    def _endpoint_needs_settings(self) -> TargetConfig:
        if self.kind == "endpoint" and self.endpoint is None:
            raise ValueError("target.kind is endpoint but target.endpoint is not set")
        return self
