"""What `canary run --dry-run` shows of a Kubernetes run in waves (target.kubernetes.gpu_budget):
tonight's waves and the first wave's manifests, rendered exactly as the run would render them
(`helm template` of the vllm-pd chart through WaveDeployer.render), with the GPUs each object
requests. Nothing is sent to a cluster."""

from __future__ import annotations

from typing import Any

from canary.checks.estimate import checks_by_cell
from canary.config import CanaryConfig
from canary.plan.matrix import Plan
from canary.plan.rotation import load_state
from canary.plan.waves import select_night
from canary.targets.kubernetes.waves import WaveDeployer, gpu_requests

DRY_RUN_LABEL = "dry-run"
"""The run id the preview's objects are labelled with (a real run labels them with its run id)."""


def _name(obj: dict[str, Any]) -> str:
    return f"{obj.get('kind')}/{obj.get('metadata', {}).get('name')}"


def wave_preview(config: CanaryConfig, the_plan: Plan) -> dict[str, Any] | None:
    """Tonight's waves and the first wave's rendered objects, or None when the config deploys nothing
    itself (not Kubernetes, or no gpu_budget: the cells are then read from an installed release)."""
    settings = config.target.kubernetes
    if config.target.kind != "kubernetes" or settings.gpu_budget is None:
        return None
    schedule = select_night(the_plan.planned(), config, load_state(config).last_checked(), checks_by_cell)
    preview: dict[str, Any] = {
        "gpu_budget": schedule.budget,
        "waves": [{"wave": w.index, "gpus": w.gpus, "cells": [c.id for c in w.cells]} for w in schedule.waves],
        "deferred": [c.id for c in schedule.deferred],
    }
    if not schedule.waves:
        return preview
    first = schedule.waves[0]
    manifests = WaveDeployer(config, None, run=DRY_RUN_LABEL).render(first.cells)
    requests = {_name(obj): n for obj in manifests if (n := gpu_requests(obj))}
    preview["first_wave"] = {
        "wave": first.index,
        "gpus": first.gpus,
        "cells": [c.id for c in first.cells],
        "gpu_requests": requests,
        "manifests": manifests,
    }
    return preview
