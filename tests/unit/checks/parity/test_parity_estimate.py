"""The parity check's time estimate (canary.checks.parity.estimate.parity_phases): derived from `checks.parity`, and
the same requests the parity check really sends.

The control's measurement (canary.checks.parity.check.measure_reference) runs here against a STAND-IN
OpenAI-compatible server (real HTTP on 127.0.0.1, canned greedy outputs and logprobs, not vLLM)
that counts what it is asked: generations by length, teacher-forced re-scorings, and how many were
in flight at once.
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar

import pytest
import yaml

from canary.checks import estimate
from canary.checks.parity import estimate as parity
from canary.checks.parity.check import measure_reference
from canary.checks.parity.prompts import ParityPrompt
from canary.config import CanaryConfig
from canary.config.load import validate_config
from canary.plan.matrix import plan
from canary.plan.waves import EstimateModel, RequestPhase

CONFIG: dict[str, Any] = {
    "version": 1,
    "name": "waves-parity",
    "platform": "sm90",
    "models": [{"name": "m", "source": "org/m", "max_model_len": 4096}],
    "images": {"baseline": {"ref": "vllm/vllm-openai:v0.33.0"}},
    "matrix": {
        "attention_backends": ["FLASH_ATTN"],
        "prefill_block_sizes": [64],
        "topologies": ["aggregated", "pd-nixl"],
    },
    "checks": {
        "parity": {
            "prompt_lengths": [8, 33, 100],
            "block_relative": False,
            "max_tokens": 10,
            "dependence_tokens": 4,
            "null_concurrency": 2,
        }
    },
}
MODEL = EstimateModel(token_s=0.01, request_s=0.5, tokenize_s=0.02)


def config(**parity: Any) -> CanaryConfig:
    data = yaml.safe_load(yaml.safe_dump(CONFIG))
    data["checks"]["parity"].update(parity)
    return validate_config(data, "waves parity test")


def test_the_control_sends_a_miss_a_null_wave_twins_and_rescorings() -> None:
    cfg = config()
    phases = parity.parity_phases(cfg, pd=False, own_reference=False, prompts=3)
    assert [(p.requests, p.tokens, p.concurrency) for p in phases] == [(3, 10, 1), (3, 10, 2), (3, 4, 2), (3, 1, 2)]
    # 3 one at a time; 2 rounds of each wave kind (2 in flight); 6 /tokenize requests
    expected = 3 * (0.5 + 0.1) + 2 * (0.5 + 0.1) + 2 * (0.5 + 0.04) + 2 * (0.5 + 0.01) + 6 * 0.02
    assert parity.parity_seconds(cfg, False, False, 3, MODEL) == pytest.approx(expected)


def test_a_pd_cell_sends_generations_and_rescorings_and_its_own_reference_without_a_control() -> None:
    cfg = config()
    pd = parity.parity_phases(cfg, pd=True, own_reference=False, prompts=3)
    assert [(p.requests, p.tokens, p.concurrency) for p in pd] == [(3, 10, 2), (3, 1, 2)]
    alone = parity.parity_phases(cfg, pd=True, own_reference=True, prompts=3)
    assert alone == [*parity.parity_phases(cfg, pd=False, own_reference=False, prompts=3), *pd]
    cells = plan(cfg).planned()
    agg = next(c for c in cells if c.topology == "aggregated")
    pd_cell = next(c for c in cells if c.topology == "pd-nixl")
    with_control = estimate.checks_by_cell([pd_cell], cells, cfg, MODEL)[pd_cell.id]
    without = estimate.checks_by_cell([pd_cell], [pd_cell], cfg, MODEL)[pd_cell.id]
    own = parity.parity_seconds(cfg, False, False, 3, MODEL) - 6 * MODEL.tokenize_s
    assert without - with_control == pytest.approx(own, abs=0.11)  # check seconds are rounded to 0.1
    assert estimate.check_seconds(agg, cfg, MODEL)["parity"] == pytest.approx(
        parity.parity_seconds(cfg, False, False, 3, MODEL), abs=0.05
    )


def test_the_estimate_follows_the_parity_config() -> None:
    base = parity.parity_seconds(config(), False, False, 3, MODEL)
    assert parity.parity_seconds(config(max_tokens=20), False, False, 3, MODEL) > base
    assert parity.parity_seconds(config(null_concurrency=8), False, False, 3, MODEL) < base
    twins = [p for p in parity.parity_phases(config(dependence_tokens=64), False, False, 3) if p.tokens != 1]
    assert {p.tokens for p in twins} == {10}  # twins never generate more than max_tokens
    cfg = config(prompt_lengths=[8, 33, 100, 200])
    assert parity.parity_prompt_count(cfg) == 4
    cell = next(c for c in plan(cfg).planned() if c.topology == "aggregated")
    assert estimate.check_seconds(cell, cfg, MODEL)["parity"] > estimate.check_seconds(cell, config(), MODEL)["parity"]
    assert RequestPhase("x", 5, 2, 2).seconds(MODEL) == pytest.approx(3 * (0.5 + 0.02))


# --------------------------------------------------------------------------- what the check really sends


class CountingStandIn(BaseHTTPRequestHandler):
    """STAND-IN for vLLM's /v1/completions: greedy tokens (prompt sum + i) % 50 with two top
    logprobs; `prompt_logprobs` requests are answered with a logprob for every prompt token."""

    seen: ClassVar[Counter[tuple[str, int]]] = Counter()
    in_flight: ClassVar[int] = 0
    most: ClassVar[int] = 0
    lock: ClassVar[threading.Lock] = threading.Lock()

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        with self.lock:
            type(self).in_flight += 1
            type(self).most = max(self.most, self.in_flight)
        time.sleep(0.02)  # long enough for a concurrent wave to overlap
        prompt = [int(t) for t in body["prompt"]]
        if "prompt_logprobs" in body:
            self.seen[("rescore", body["max_tokens"])] += 1
            entries: list[Any] = [None] + [{str(t): {"logprob": -0.5}} for t in prompt[1:]]
            choice: dict[str, Any] = {"prompt_logprobs": entries}
        else:
            self.seen[("generate", body["max_tokens"])] += 1
            ids = [(sum(prompt) + i) % 50 for i in range(body["max_tokens"])]
            choice = {
                "prompt_token_ids": prompt,
                "token_ids": ids,
                "logprobs": {
                    "tokens": [f"token_id:{t}" for t in ids],
                    "token_logprobs": [-0.1] * len(ids),
                    "top_logprobs": [{f"token_id:{t}": -0.1, f"token_id:{t + 50}": -2.5} for t in ids],
                },
            }
        with self.lock:
            type(self).in_flight -= 1
        data = json.dumps({"choices": [choice]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        del args


@pytest.fixture()
def stand_in() -> Iterator[str]:
    CountingStandIn.seen = Counter()
    CountingStandIn.in_flight = CountingStandIn.most = 0
    server = ThreadingHTTPServer(("127.0.0.1", 0), CountingStandIn)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_the_estimate_counts_the_requests_the_control_really_sends(stand_in: str) -> None:
    cfg = config()
    settings = cfg.checks.parity
    prompts = [
        ParityPrompt(n, [1, *range(10 * n, 10 * n + n - 1)], [1, *range(7, 7 + n - 1)], min(n // 2, 4), i)
        for i, n in enumerate(settings.prompt_lengths)
    ]
    refs, load = measure_reference(stand_in, "m", prompts, settings)
    assert len(refs) == 3 and load["wave_concurrency"] == 2
    sent: Counter[tuple[str, int]] = Counter()
    for phase in parity.parity_phases(cfg, pd=False, own_reference=False, prompts=len(prompts)):
        kind = "rescore" if phase.tokens == 1 else "generate"
        sent[(kind, phase.tokens)] += phase.requests
    assert CountingStandIn.seen == sent  # 6 generations of 10 tokens, 3 twins of 4, 3 re-scorings
    assert CountingStandIn.most == settings.null_concurrency
