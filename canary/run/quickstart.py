"""One-line starts without a YAML file: `canary check URL` and `canary run --image REF`.

`canary check URL` judges a server (or P/D router) that already runs. It asks the endpoint what it
serves (the model and its max length on /v1/models, the block size and KV cache dtype on each
engine's `vllm:cache_config_info`) and builds a one-cell config of the endpoint target around that
answer, with the checks that can judge one endpoint with no control and no baseline:

- startup: ready in time, and every engine's live config read from /metrics (the block size and dtype
  the cell asks are the ones the engines report: a P/D pair whose prefill and decode disagree is a
  mismatched cell, as in any matrix);
- accuracy: a short GSM8K run (CHECK_QUESTIONS questions). Gated where a threshold is known (the
  project's own model: its recorded held-out accuracy; or `--set checks.accuracy.min_accuracy=...`),
  else it measures and says it is ungated;
- throughput: one closed-loop point (CHECK_LOAD), recorded, gated only by its own validity: with one
  image there is no baseline to regress against;
- parity and kv_transfer on a P/D router only: the pair's answers against its own prefill server's
  teacher-forced scoring (no control needed), and the NIXL counters of both engines.
  An aggregated server has no control to compare with: parity would only record a reference that
  nothing judges (and cost a minute), so it is off; so is parity under load.

`canary run --image REF` is `canary run configs/cpu-default.yaml` on the container target with REF as
the candidate: every image key but the baseline runs REF as is (target.container.images), the facts
the config states about the build it replaces (its kernel block sizes, the expectations naming it)
are dropped, and the baseline stays the project's CPU engine image.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from canary.config import CanaryConfig, EndpointTargetConfig
from canary.config.load import apply_override, blame_overrides, parse_override, validate_config
from canary.config.urls import HTTP_SCHEMES, url_problem
from canary.core.promtext import scrape
from canary.core.yaml_model import read_yaml
from canary.errors import CanaryError, ConfigError, UsageError
from canary.model.ref import local_model_dir
from canary.plan.matrix import Plan, plan
from canary.targets.readiness import wait_ready

CHECK_SOURCE = "canary check"
"""What a `canary check` config is called in its errors (there is no file)."""
CHECK_QUESTIONS = 50
"""GSM8K questions of `canary check` (two batches of 25: early stop after the first when certain)."""
CHECK_LOAD: dict[str, Any] = {
    "prompt_tokens": 64,
    "output_tokens": 32,
    "concurrency": 4,
    "num_requests": 40,
    "warmup_requests": 4,
    "max_duration_s": 240,
}
"""The one throughput point of `canary check` (cpu-default's point: seconds on a CPU server, less on a GPU)."""
DEFAULT_MAX_MODEL_LEN = 2048
"""When /v1/models does not say the model's max length."""
PLATFORM_BACKEND = {"cpu": "CPU_ATTN", "sm80": "FLASH_ATTN", "sm90": "FLASH_ATTN", "sm100": "FLASH_ATTN"}
"""The backend a `canary check` cell names per platform: an endpoint gives no logs, so the backend it runs is
reported as not verifiable whatever is named here."""
FALLBACK_BLOCK = {"cpu": 128, "sm80": 16, "sm90": 16, "sm100": 16}
"""The cell's block size when no engine reports one (vLLM's default block size on the platform); the live config
is then not verified, and the warning says so."""
GSM8K_CHOICES = ("auto", "hub", "off")
"""--gsm8k: auto (the model's own data for the project's model, else the hub), hub, off, or a directory."""


@dataclass(frozen=True)
class CheckRequest:
    """What `canary check` was asked: the URL and its flags."""

    url: str
    model: str | None = None
    metrics_url: str | None = None
    prefill_metrics_url: str | None = None
    decode_metrics_url: str | None = None
    topology: str | None = None
    platform: str = "cpu"
    gsm8k: str = "auto"
    ready_timeout_s: int = 60
    results_dir: str | None = None
    overrides: tuple[str, ...] = ()

    def urls(self) -> dict[str, str | None]:
        """Every URL flag by its name on the command line."""
        return {
            "URL": self.url,
            "--metrics-url": self.metrics_url,
            "--prefill-metrics-url": self.prefill_metrics_url,
            "--decode-metrics-url": self.decode_metrics_url,
        }

    @property
    def pd(self) -> bool:
        """A P/D router: asked so, or given its engines' /metrics."""
        if self.topology is not None:
            return self.topology == "pd-nixl"
        return bool(self.prefill_metrics_url or self.decode_metrics_url)


@dataclass
class EndpointFacts:
    """What the endpoint says about itself."""

    model: str
    source: str
    max_model_len: int
    block_sizes: dict[str, int] = field(default_factory=dict)
    kv_cache_dtype: str = "auto"
    unread: list[str] = field(default_factory=list)


def refuse_bad_urls(request: CheckRequest) -> None:
    """A URL the canary cannot use stops `canary check` at once (exit 2), naming the flag and the value."""
    for flag, value in request.urls().items():
        if value is None:
            continue
        problem = url_problem(value, HTTP_SCHEMES)
        if problem is not None:
            raise UsageError(f"canary check {flag} {value!r}: {problem}")
    if request.metrics_url and request.pd:
        raise UsageError(
            "canary check --metrics-url is an aggregated server's /metrics; a P/D router's engines are "
            "--prefill-metrics-url and --decode-metrics-url"
        )
    try:  # what target.endpoint refuses (a P/D router without its engines' /metrics), before any wait
        EndpointTargetConfig.model_validate(endpoint_section(request))
    except ValidationError as exc:
        message = exc.errors()[0]["msg"].removeprefix("Value error, ")
        for key in ("prefill_metrics_url", "decode_metrics_url"):
            message = message.replace(key, "--" + key.replace("_", "-"))
        raise UsageError(f"canary check: {message}") from None


def endpoint_section(request: CheckRequest, model: str | None = None) -> dict[str, Any]:
    """target.endpoint of the check's config."""
    section: dict[str, Any] = {"url": request.url, "topology": "pd-nixl" if request.pd else "aggregated"}
    if model is not None:
        section["model"] = model
    for key in ("metrics_url", "prefill_metrics_url", "decode_metrics_url"):
        if getattr(request, key):
            section[key] = getattr(request, key)
    return section


def engine_metrics(request: CheckRequest) -> dict[str, str]:
    """role -> /metrics URL of each engine behind the URL (what startup reads the live config from)."""
    if not request.pd:
        return {"aggregated": request.metrics_url or request.url.rstrip("/") + "/metrics"}
    return {
        role: url
        for role, url in (("prefill", request.prefill_metrics_url), ("decode", request.decode_metrics_url))
        if url
    }


def _models_listing(url: str) -> list[dict[str, Any]]:
    try:
        with urllib.request.urlopen(url.rstrip("/") + "/v1/models", timeout=10) as response:
            body = json.loads(response.read())
    except (OSError, ValueError):
        return []
    data = body.get("data") if isinstance(body, dict) else None
    return [entry for entry in data or [] if isinstance(entry, dict) and isinstance(entry.get("id"), str)]


def discover(request: CheckRequest) -> EndpointFacts:
    """Wait (up to --ready-timeout) for the URL to serve, then read its model and its engines' live config.
    A URL that never gets ready is a CanaryError (exit 1): nothing serves there to be checked."""
    ready = wait_ready(request.url, None, time.monotonic() + request.ready_timeout_s, interval_s=1.0)
    if not ready.ready:
        raise CanaryError(
            f"{request.url} is not ready after {request.ready_timeout_s} s (--ready-timeout): {ready.detail}"
        )
    listed = _models_listing(request.url)
    names = [str(entry["id"]) for entry in listed] or list(ready.models)
    model = request.model or names[0]
    if model not in names:
        raise UsageError(f"canary check --model {model!r}: {request.url}/v1/models lists {', '.join(names)}")
    entry = next((e for e in listed if e["id"] == model), {})
    root = entry.get("root")
    length = entry.get("max_model_len")
    facts = EndpointFacts(
        model=model,
        source=str(root) if isinstance(root, str) and root else model,
        max_model_len=length if isinstance(length, int) and length > 0 else DEFAULT_MAX_MODEL_LEN,
    )
    for role, metrics_url in engine_metrics(request).items():
        read_live_config(facts, role, metrics_url)
    return facts


def read_live_config(facts: EndpointFacts, role: str, metrics_url: str) -> None:
    """The block size and KV dtype one engine reports (vllm:cache_config_info), into facts."""
    from canary.checks.startup.check import CACHE_INFO, cache_config

    try:
        labels = cache_config(scrape(metrics_url))
    except CanaryError as exc:
        facts.unread.append(f"{role}: {exc}")
        return
    block = labels.get("block_size", "")
    if not block.isdigit():
        facts.unread.append(f"{role}: no {CACHE_INFO} at {metrics_url}")
        return
    facts.block_sizes[role] = int(block)
    facts.kv_cache_dtype = labels.get("cache_dtype") or facts.kv_cache_dtype


def gsm8k_section(choice: str, source: str) -> dict[str, Any]:
    """checks.accuracy for --gsm8k: off, hub, a directory of GSM8K jsonl, or auto (the project's model's own
    data when the served model is a directory that holds it, else the hub)."""
    section: dict[str, Any] = {"limit": CHECK_QUESTIONS, "batch_size": 25, "num_concurrent": 4}
    if choice == "off":
        return {"enabled": False}
    if choice == "hub":
        return {**section, "dataset": {"source": "hub"}}
    if choice != "auto":
        if not Path(choice).is_dir():
            raise UsageError(f"canary check --gsm8k {choice!r}: not a directory (or one of {', '.join(GSM8K_CHOICES)})")
        return {**section, "dataset": {"source": "local", "path": choice}}
    model_dir = local_model_dir(source)
    own = model_dir is not None and (model_dir / "data" / "test.jsonl").is_file()
    return {**section, "dataset": {"source": "builtin" if own else "hub"}}


def check_config_data(request: CheckRequest, facts: EndpointFacts) -> dict[str, Any]:
    """The config of `canary check` as data (before --set), one cell of the endpoint target."""
    topology = "pd-nixl" if request.pd else "aggregated"
    fallback = FALLBACK_BLOCK[request.platform]
    prefill = facts.block_sizes.get("prefill", facts.block_sizes.get("aggregated", fallback))
    decode = facts.block_sizes.get("decode", prefill)
    matrix: dict[str, Any] = {
        "attention_backends": [PLATFORM_BACKEND[request.platform]],
        "prefill_block_sizes": [prefill],
        "kv_cache_dtypes": [facts.kv_cache_dtype],
        "runners": ["v1"],
        "topologies": [topology],
        "run_unsupported": True,
    }
    if request.pd:
        matrix["decode_block_sizes"] = [decode]
    return {
        "version": 1,
        "name": "check",
        "platform": request.platform,
        "models": [{"name": facts.model, "source": facts.source, "max_model_len": facts.max_model_len}],
        "images": {"endpoint": {"ref": "endpoint", "description": f"the server at {request.url}"}},
        "matrix": matrix,
        "checks": {
            "startup": {"timeout_s": request.ready_timeout_s, "verify_live_config": not facts.unread},
            "parity": {"enabled": request.pd},
            "accuracy": gsm8k_section(request.gsm8k, facts.source),
            "throughput": {**CHECK_LOAD, "load_parity": {"enabled": False}, "paired": {"enabled": False}},
            "kv_transfer": {"enabled": request.pd},
        },
        "export": {"results_dir": request.results_dir or "results"},
        "target": {"kind": "endpoint", "endpoint": endpoint_section(request, facts.model)},
    }


def check_config(request: CheckRequest, facts: EndpointFacts) -> CanaryConfig:
    """The validated config of `canary check` with its --set overrides applied."""
    data = check_config_data(request, facts)
    for text in request.overrides:
        parts, value = parse_override(text)
        apply_override(data, parts, value)
    try:
        return validate_config(data, CHECK_SOURCE)
    except ConfigError as exc:
        raise blame_overrides(exc, list(request.overrides)) from None


def check_plan(config: CanaryConfig) -> Plan:
    """The one cell of a `canary check` config (refused when the catalog cannot plan it)."""
    the_plan = plan(config)
    if not the_plan.planned():
        cell = the_plan.cells[0]
        raise UsageError(f"canary check: cannot plan {cell.id}: {cell.reason}")
    return the_plan


# --------------------------------------------------------------------------- canary run --image


DEFAULT_CONFIG = "configs/cpu-default.yaml"
"""What `canary run --image REF` runs when no config is named."""


def image_overrides(config_path: Path, ref: str) -> list[str]:
    """The --set lines that make a config run REF as its candidate on the container target: every image key
    but the baseline runs REF as is, without the facts the config states about the build REF replaces (its
    kernel block sizes; the expectations that name it)."""
    data = read_yaml(config_path)
    images = data.get("images") if isinstance(data, dict) else None
    if not isinstance(images, dict) or len(images) < 2:
        raise UsageError(f"--image needs a config with a baseline and a candidate image; {config_path} has none")
    baseline = data.get("baseline_image") or next(iter(images))
    candidates = [key for key in images if key != baseline]
    overrides = ["target.kind=container"]
    for key in candidates:
        overrides += [
            f"target.container.images.{key}={json.dumps(ref)}",
            f"images.{key}.kernel_block_sizes={{}}",
            f"images.{key}.description={json.dumps(f'--image {ref}')}",
        ]
    matrix = data.get("matrix") if isinstance(data.get("matrix"), dict) else {}
    expectations = matrix.get("expectations") or []
    kept = [e for e in expectations if not _names_image(e, candidates)]
    if len(kept) != len(expectations):
        overrides.append(f"matrix.expectations={json.dumps(kept)}")
    return overrides


def _names_image(expectation: Any, keys: list[str]) -> bool:
    match = expectation.get("match") if isinstance(expectation, dict) else None
    if not isinstance(match, dict):
        return False
    return match.get("image") in keys or match.get("decode_image") in keys


def refuse_missing_image(config: CanaryConfig, ref: str) -> None:
    """--image REF must be in the container CLI's local storage (exit 2 naming it): nothing is pulled for it."""
    from canary.targets.container_cli import find_cli

    cli = find_cli(config.target.container.cli)
    if cli.image_inspect(ref) is None:
        raise UsageError(
            f"--image {ref}: {Path(cli.program).name} has no image {ref} in local storage "
            f"(`{Path(cli.program).name} images` lists them); pull or build it first"
        )
