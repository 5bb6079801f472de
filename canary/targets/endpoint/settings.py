"""`target.endpoint`: the endpoint target's settings (the config layer: imports only canary.config and canary.core)."""

from __future__ import annotations

from pydantic import Field, model_validator

from canary.config.base import Strict, TargetSection, Topology
from canary.config.urls import HttpUrl


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


TARGET = TargetSection(EndpointTargetConfig, "Endpoint settings (kind: endpoint).", order=3, required=True)
