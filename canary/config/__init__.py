"""The canary's configuration: one strict pydantic root model loaded from YAML, split by concern.

base (shared types), models (models, images), matrix, checks, export, targets, root (CanaryConfig);
this package re-exports every model so callers import from `canary.config`.

Every model forbids unknown keys and describes every field. `canary.config.load.load_config` turns
any problem (unreadable file, YAML syntax, unknown key, wrong type, impossible value, unknown
backend) into a `ConfigError` that names the file, the key path and what was expected.
"""

from __future__ import annotations

from canary.config.base import CheckName, ExpectKind, Platform, PositiveInt, Probability, Runner, Strict, Topology
from canary.config.bisect import BisectConfig
from canary.config.checks import (
    AccuracyCheckConfig,
    CapacityConfig,
    ChecksConfig,
    DatasetConfig,
    KvTransferCheckConfig,
    LoadParityConfig,
    PairedConfig,
    ParityCheckConfig,
    PerRequestTestConfig,
    SloConfig,
    StartupCheckConfig,
    ThroughputCheckConfig,
)
from canary.config.export import ExportConfig, HistoryConfig, PushgatewayConfig
from canary.config.matrix import CellMatch, Expectation, ExtraCell, MatrixSpec
from canary.config.models import CompressedCache, ImageSpec, ModelSpec
from canary.config.root import CanaryConfig
from canary.config.targets import (
    DEFAULT_UCX_TLS,
    UCX_CUDA_TRANSPORTS,
    UCX_NETWORK_TRANSPORTS,
    UCX_TRANSPORTS,
    ContainerTargetConfig,
    DevicePoolConfig,
    EndpointTargetConfig,
    KubernetesTargetConfig,
    LocalTargetConfig,
    NixlTransportConfig,
    Placement,
    PullPolicy,
    RotationConfig,
    TargetConfig,
)

__all__ = [
    "DEFAULT_UCX_TLS",
    "UCX_CUDA_TRANSPORTS",
    "UCX_NETWORK_TRANSPORTS",
    "UCX_TRANSPORTS",
    "AccuracyCheckConfig",
    "BisectConfig",
    "CanaryConfig",
    "CapacityConfig",
    "CellMatch",
    "CheckName",
    "ChecksConfig",
    "CompressedCache",
    "ContainerTargetConfig",
    "DatasetConfig",
    "DevicePoolConfig",
    "EndpointTargetConfig",
    "ExpectKind",
    "Expectation",
    "ExportConfig",
    "ExtraCell",
    "HistoryConfig",
    "ImageSpec",
    "KubernetesTargetConfig",
    "KvTransferCheckConfig",
    "LoadParityConfig",
    "LocalTargetConfig",
    "MatrixSpec",
    "ModelSpec",
    "NixlTransportConfig",
    "PairedConfig",
    "ParityCheckConfig",
    "PerRequestTestConfig",
    "Placement",
    "Platform",
    "PositiveInt",
    "Probability",
    "PullPolicy",
    "PushgatewayConfig",
    "RotationConfig",
    "Runner",
    "SloConfig",
    "StartupCheckConfig",
    "Strict",
    "TargetConfig",
    "ThroughputCheckConfig",
    "Topology",
]
