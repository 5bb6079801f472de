"""Adding a workload kind needs its own folder and nothing else: a throwaway kind, written to a temporary folder
on canary.load.workloads' path, is accepted by the config (its fields under checks.throughput.workload) and its
generator makes the load plan's requests.

The folder holds what the "Adding a workload" recipe of docs/architecture.md asks for (`settings.py`
beside `requests.py`); a fresh interpreter (the config assembles WorkloadShape once, at import) appends
the folder's parent to canary.load.workloads.__path__ before importing canary.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.plugin_folder import probe_plugin_folder

FOLDER: dict[str, str] = {
    "__init__.py": '"""A throwaway workload kind (tests/unit/load/test_new_workload.py)."""\n',
    "settings.py": """
        from pydantic import Field

        from canary.config.base import PositiveInt, Strict, WorkloadSection


        class EchoSettings(Strict):
            \"\"\"echo: every prompt the same length.\"\"\"

            echo_tokens: PositiveInt = Field(5, description="echo: tokens of every prompt.")


        def _problem(shape: object) -> str | None:
            return "echo_tokens must be odd" if getattr(shape, "echo_tokens") % 2 == 0 else None


        WORKLOAD = WorkloadSection(EchoSettings, "echo: prompts of echo_tokens each", problem=_problem)
        """,
    "requests.py": """
        import random

        from canary.load.shapes import Draw, ShapedRequest, ShapeInputs, generator


        @generator("echo")
        def generate(spec: ShapeInputs, rng: random.Random) -> list[ShapedRequest]:
            draw, tokens = Draw(spec), getattr(spec.shape, "echo_tokens")
            prompts = [draw.prompt(draw.units(tokens, rng)) for _ in range(spec.total)]
            return [ShapedRequest(prompt, tokens, spec.output_tokens) for prompt in prompts]
        """,
}

PROBE = """
import json, sys
import canary.load.workloads
canary.load.workloads.__path__.append(sys.argv[1])

from canary.config.load import validate_config
from canary.config.workloads import WorkloadShape
from canary.load.workload import WorkloadSpec, build_plan

data = json.loads(sys.argv[2])
config = validate_config(data, "echo")
shape = config.checks.throughput.workload
spec = WorkloadSpec(base_url="http://127.0.0.1:1", model="m", workload=shape, num_requests=6, warmup_requests=1,
                    output_tokens=3, token_pool=list(range(100, 200)), seed=1)
plan = build_plan(spec)
try:
    WorkloadShape(kind="echo", echo_tokens=4)
    refused = ""
except ValueError as exc:
    refused = str(exc)
print(json.dumps({
    "kind": shape.kind,
    "echo_tokens": getattr(shape, "echo_tokens"),
    "prompt_tokens": [r.prompt_tokens for r in plan],
    "prompts": [len(json.loads(r.body)["prompt"]) for r in plan],
    "refused": refused,
    "described": "echo: prompts of echo_tokens each" in WorkloadShape.model_fields["kind"].description,
}))
"""

CONFIG: dict[str, Any] = {
    "version": 1,
    "name": "echo",
    "platform": "sm90",
    "models": [{"name": "m", "source": "org/m"}],
    "images": {"baseline": {"ref": "vllm/vllm-openai:v0.33.0"}},
    "matrix": {"attention_backends": ["FLASH_ATTN"], "prefill_block_sizes": [64], "topologies": ["aggregated"]},
    "checks": {"throughput": {"workload": {"kind": "echo", "echo_tokens": 7}}},
    "target": {"kind": "kubernetes", "kubernetes": {"gpu_budget": 8}},
}


@pytest.fixture(scope="module")
def probed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return probe_plugin_folder(tmp_path_factory.mktemp("extra-workloads"), "echo", FOLDER, PROBE, CONFIG)


def test_the_config_takes_its_kind_and_fields(probed: dict[str, Any]) -> None:
    assert (probed["kind"], probed["echo_tokens"]) == ("echo", 7)
    assert probed["described"]


def test_its_generator_makes_the_plan(probed: dict[str, Any]) -> None:
    assert probed["prompt_tokens"] == [7] * 7  # 1 warm-up + 6 measured
    assert probed["prompts"] == [7] * 7


def test_its_declared_problem_refuses_a_bad_shape(probed: dict[str, Any]) -> None:
    assert "echo_tokens must be odd" in probed["refused"]
