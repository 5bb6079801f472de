"""Parity under load without engines: how many samples and which prompts, the rider that sends them while
a load runs, and the judgement (the control's null arm under load, the P/D gate, the skip when parity
already failed). The real pair and the seeded KV race: tests/integration/test_load_parity.py."""

from __future__ import annotations

import http.server
import threading
import time
from pathlib import Path

import pytest

from canary.checks.parity.client import ParityError
from canary.checks.parity.fidelity import Series
from canary.checks.parity.prompts import STRIDE, ParityPrompt, build_prompts
from canary.checks.parity.reference import LOAD_NULL_ARM, reference_from_evidence
from canary.checks.throughput import loadparity as lp
from canary.config import LoadParityConfig
from canary.core import metric_keys as k
from canary.judge.results import CellResult, CheckResult
from canary.judge.verdicts import VERDICT_CODES
from canary.load.stats import Sample
from canary.plan.parity_lengths import block_sizes, prompt_lengths
from tests.support import load_parity as data
from tests.support.sample import sample_config

# --------------------------------------------------------------------------- how many, which prompts


@pytest.mark.parametrize(
    ("share", "requests", "concurrency", "expected"),
    [(0.25, 40, 4, (10, 1)), (0.5, 40, 8, (20, 4)), (0.01, 40, 4, (1, 1)), (1.0, 3, 8, (3, 3))],
)
def test_the_share_sets_the_samples_and_how_many_ride_at_once(
    share: float, requests: int, concurrency: int, expected: tuple[int, int]
) -> None:
    assert lp.sample_budget(LoadParityConfig(share=share), requests, concurrency) == expected


def test_lengths_are_used_in_turn_and_never_beyond_the_model() -> None:
    cfg = LoadParityConfig(prompt_lengths=[257, 513, 4000])
    assert lp.sample_lengths(cfg, 5, 2015) == [257, 513, 2015, 257, 513]


def test_a_length_of_one_token_is_refused() -> None:
    with pytest.raises(ValueError, match="at least 2 tokens"):
        LoadParityConfig(prompt_lengths=[1, 257])


def test_sample_prompts_start_after_every_parity_prompt() -> None:
    """No sample shares a first item (so a first block) with a parity prompt or another sample: a P/D
    decode never serves one from a prefix cache the parity check or another sample filled."""
    config = sample_config()
    every = prompt_lengths(config, block_sizes(config))
    items = [f"{i:03d}. Question: how many? Answer: {i}\n\n" for i in range(400)]

    def tokenize(text: str) -> list[int]:
        return [1, *(ord(c) for c in text)]

    parity = build_prompts(items, every, 16, config.checks.parity.item_offset, tokenize)
    samples = build_prompts(items, [257, 513] * 5, 16, lp.first_item(config), tokenize)
    assert lp.first_item(config) == config.checks.parity.item_offset + len(every) * STRIDE
    firsts = [p.first_item for p in [*parity, *samples]]
    assert len(set(firsts)) == len(firsts)
    assert {tuple(p.ids[:16]) for p in samples}.isdisjoint({tuple(p.ids[:16]) for p in parity})


# --------------------------------------------------------------------------- the rider


def test_the_rider_sends_each_prompt_once_with_at_most_in_flight_at_a_time() -> None:
    prompts = [data.prompt(257, i) for i in range(6)]
    lock, now, most = threading.Lock(), [0], [0]

    def send(p: ParityPrompt) -> Series:
        with lock:
            now[0] += 1
            most[0] = max(most[0], now[0])
        time.sleep(0.02)
        with lock:
            now[0] -= 1
        return data.series(p.first_item)

    with lp.Rider(send, prompts, in_flight=2) as rider:
        deadline = time.monotonic() + 5
        while len(rider.ridden) < len(prompts) and time.monotonic() < deadline:
            time.sleep(0.01)
    assert sorted(r.prompt.first_item for r in rider.ridden) == list(range(6))
    assert most[0] == 2
    assert all(r.ended_at >= r.sent_at for r in rider.ridden)


def test_stop_sends_nothing_more_and_waits_for_the_sample_in_flight() -> None:
    prompts = [data.prompt(257, i) for i in range(50)]
    started = threading.Event()

    def send(p: ParityPrompt) -> Series:
        started.set()
        time.sleep(0.1)
        return data.series(p.first_item)

    rider = lp.Rider(send, prompts, in_flight=1)
    rider.start()
    assert started.wait(5)
    rider.stop()
    done = len(rider.ridden)
    time.sleep(0.25)
    assert 1 <= done == len(rider.ridden) < 50  # the one in flight finished, nothing sent after stop


def test_nothing_is_sent_before_the_load_shows_on_the_server() -> None:
    sent: list[float] = []
    shows_at = time.monotonic() + 0.3

    def send(p: ParityPrompt) -> Series:
        sent.append(time.monotonic())
        return data.series(p.first_item)

    def started() -> bool:
        return time.monotonic() >= shows_at

    with lp.Rider(send, [data.prompt(257, 1)], in_flight=2, start_wait_s=5.0, load_started=started) as rider:
        deadline = time.monotonic() + 5
        while not rider.ridden and time.monotonic() < deadline:
            time.sleep(0.01)
    assert len(sent) == 1 and sent[0] >= shows_at


def test_a_load_that_never_shows_lets_the_samples_go_after_the_wait_and_stop_sends_nothing() -> None:
    sent: list[int] = []

    def send(p: ParityPrompt) -> Series:
        sent.append(p.first_item)
        return data.series(p.first_item)

    began = time.monotonic()
    with lp.Rider(send, [data.prompt(257, 1)], in_flight=1, start_wait_s=0.2, load_started=lambda: False) as rider:
        while not rider.ridden and time.monotonic() < began + 5:
            time.sleep(0.01)
    assert sent == [1] and rider.ridden[0].sent_at >= 0 and time.monotonic() - began >= 0.2
    stopped = lp.Rider(send, [data.prompt(257, 2)], in_flight=1, start_wait_s=5.0)
    stopped.start()
    time.sleep(0.1)
    stopped.stop()
    assert sent == [1] and stopped.ridden == []


def test_the_load_shows_as_requests_running_or_waiting_on_an_engine(tmp_path: Path) -> None:
    """Against a real HTTP server serving vLLM's gauges (engine /metrics text), and one that is down."""
    body = {"value": "0.0"}

    class Metrics(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            text = (
                "# TYPE vllm:num_requests_running gauge\n"
                f'vllm:num_requests_running{{engine="0",model_name="tiny"}} {body["value"]}\n'
                "# TYPE vllm:num_requests_waiting gauge\n"
                'vllm:num_requests_waiting{engine="0",model_name="tiny"} 0.0\n'
            ).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(text)))
            self.end_headers()
            self.wfile.write(text)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Metrics)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/metrics"
        started = lp.load_started(["http://127.0.0.1:9/metrics", url])
        assert not started()
        body["value"] = "3.0"
        assert started()
    finally:
        server.shutdown()
        server.server_close()


def test_a_failed_sample_is_recorded_with_its_error_and_not_judged() -> None:
    def send(p: ParityPrompt) -> Series:
        if p.first_item == 1:
            raise ParityError("POST http://x/v1/completions: HTTP 500: boom")
        return data.series(p.first_item)

    with lp.Rider(send, [data.prompt(257, 1), data.prompt(257, 2)], in_flight=1) as rider:
        deadline = time.monotonic() + 5
        while len(rider.ridden) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
    rider.window = (0.0, time.time() + 10)
    errors = {r.prompt.first_item: r.error for r in rider.ridden}
    assert errors[1] is not None and "HTTP 500" in errors[1] and errors[2] is None
    assert [r.prompt.first_item for r in rider.inside()] == [2]


def test_only_samples_entirely_inside_the_load_window_count() -> None:
    samples = [data.prompt(257, i) for i in range(4)]
    rider = data.rode([(p, data.series(p.first_item)) for p in samples], window=(1.8, 3.6))
    # sent at 1, 2, 3, 4 and each took 0.5 s: only the 2nd (2-2.5) and 3rd (3-3.5) ran inside
    assert [r.prompt.first_item for r in rider.inside()] == [1, 2]
    rider.window = None
    assert rider.inside() == []


def test_the_load_window_runs_from_the_first_send_to_the_last_end() -> None:
    def request(index: int, sent: float, ended: float) -> Sample:
        return Sample(
            index=index,
            warmup=index == 0,
            sent_at=sent,
            ended_at=ended,
            expected_prompt_tokens=64,
            expected_output_tokens=32,
        )

    assert lp.load_window([request(1, 5.0, 7.0), request(0, 4.0, 4.5), request(2, 6.0, 9.5)]) == (4.0, 9.5)
    assert lp.load_window([]) is None


# --------------------------------------------------------------------------- the control: the null arm


def _control(tmp_path: Path, flips: frozenset[int] = frozenset()) -> tuple[CheckResult, lp.Prepared]:
    """The aggregated control's throughput result with its samples under load (`flips`: samples whose
    runner-up won a near tie under load, an honest batch-dependent flip)."""
    prepared = data.prepared()
    samples = [
        (p, data.series(p.first_item, flip_at=3 if i in flips else None)) for i, p in enumerate(prepared.prompts)
    ]
    result = data.throughput_result()
    lp.finish(data.context(data.AGG, tmp_path), prepared, data.rode(samples), result)
    return result, prepared


def test_the_control_records_its_reference_with_the_null_arm_under_load_and_gates_nothing(tmp_path: Path) -> None:
    result, prepared = _control(tmp_path, flips=frozenset({2}))
    found = result.evidence[lp.EVIDENCE_KEY]
    assert found["verdict"] == "pass" and not any(g.name == lp.GATE for g in result.gates)
    assert result.metrics[k.LOAD_PARITY_SAMPLES] == 6 and result.metrics[k.LOAD_PARITY_NULL_SAMPLES] == 6
    assert result.metrics[k.LOAD_PARITY_NULL_TOKEN_FLIPS] == 1
    assert result.metrics[k.LOAD_PARITY_MATCH_RATE] == round(5 / 6, 4)
    assert result.metrics[k.LOAD_PARITY_STATUS] == VERDICT_CODES["pass"]
    assert "null arm under load: 1 token flips" in result.summary
    # what a P/D cell reads back: every prompt's reference with the load arm beside the others
    refs = reference_from_evidence(found["reference"], prepared.prompts)
    assert len(refs) == 6 and all(LOAD_NULL_ARM in r.null for r in refs)
    assert [r.null[LOAD_NULL_ARM].token_diff > 0 for r in refs] == [False, False, True, False, False, False]


def test_too_few_samples_inside_the_load_is_invalid_never_pass(tmp_path: Path) -> None:
    prepared = data.prepared()
    samples = [(p, data.series(p.first_item)) for p in prepared.prompts[:2]] + [(prepared.prompts[2], None)]
    result = data.throughput_result()
    lp.finish(data.context(data.AGG, tmp_path), prepared, data.rode(samples), result)
    found = result.evidence[lp.EVIDENCE_KEY]
    assert found["verdict"] == "invalid" and result.verdict == "pass"  # the throughput numbers stand
    assert result.metrics[k.LOAD_PARITY_STATUS] == VERDICT_CODES["invalid"]
    assert "2 evidence samples inside the load (need 3; 3 sent, 2 inside" in found["summary"]
    assert [s.get("error") for s in found["samples"]] == [None, None, "HTTP 500"]


def test_a_reference_that_could_not_be_measured_is_an_error_of_the_sub_result(tmp_path: Path) -> None:
    result = data.throughput_result()
    lp.finish(data.context(data.AGG, tmp_path), lp.Outcome("error", "parity under load: POST x: refused"), None, result)
    assert result.evidence[lp.EVIDENCE_KEY]["verdict"] == "error" and result.verdict == "pass"
    assert result.metrics[k.LOAD_PARITY_STATUS] == VERDICT_CODES["error"]


# --------------------------------------------------------------------------- a P/D cell: the gate


def _pair(
    tmp_path: Path,
    samples: list[tuple[ParityPrompt, Series]],
    control: CheckResult,
    parity: CheckResult | None = None,
) -> CheckResult:
    """A P/D cell's throughput result after its samples (re-scored teacher-forced as they came: an
    honest prefill agrees with whatever tokens decode produced)."""
    cell = CellResult(
        cell=data.context(data.AGG, tmp_path).cell,
        verdict="pass",
        checks=[CheckResult(name="startup", verdict="pass"), control],
    )
    ctx = data.context(data.PD, tmp_path, {data.AGG: cell})
    if parity is not None:
        ctx.checked["parity"] = parity
    found = lp._control_reference(ctx, [p for p, _ in samples])
    assert found is not None and found[1] == f"control {data.AGG}"
    refs, source = found
    prepared = lp.Prepared([p for p, _ in samples], refs, source, 1, 0.5)
    result = data.throughput_result()
    lp.finish(ctx, prepared, data.rode(samples), result, rescorer=lambda _p, s: s)
    return result


def test_a_pair_whose_samples_match_the_control_passes_the_gate(tmp_path: Path) -> None:
    control, prepared = _control(tmp_path)
    result = _pair(tmp_path, [(p, data.series(p.first_item)) for p in prepared.prompts], control)
    gate = next(g for g in result.gates if g.name == lp.GATE)
    assert gate.passed and result.verdict == "pass"
    assert result.metrics[k.LOAD_PARITY_FAILING] == 0 and result.metrics[k.LOAD_PARITY_MATCH_RATE] == 1.0
    assert result.metrics[k.LOAD_PARITY_NULL_SAMPLES] == 6 and result.metrics[k.LOAD_PARITY_STATUS] == 0


def test_a_pair_whose_samples_under_load_diverge_fails_the_gate_and_the_check(tmp_path: Path) -> None:
    control, prepared = _control(tmp_path)
    samples = [(p, data.series(p.first_item, corrupt=i >= 3)) for i, p in enumerate(prepared.prompts)]
    result = _pair(tmp_path, samples, control)
    gate = next(g for g in result.gates if g.name == lp.GATE)
    assert not gate.passed and result.verdict == "fail"
    assert result.metrics[k.LOAD_PARITY_FAILING] == 3 and result.metrics[k.LOAD_PARITY_MATCH_RATE] == 0.5
    assert result.metrics[k.LOAD_PARITY_STATUS] == VERDICT_CODES["fail"]
    found = result.evidence[lp.EVIDENCE_KEY]
    assert [r["beyond_noise"] for r in found["per_prompt"]] == [False] * 3 + [True] * 3
    assert "3/6 prompts beyond the null floor" in result.summary
    # clean samples first, then every one beyond: the shape of a fault that needs load
    assert found["first_failing_sample"] == {"sample": 4, "into_load_s": 4.0}
    assert "first beyond the floor: sample 4 of 6, 4.0 s into the load" in result.summary


def test_the_controls_flips_under_load_calibrate_the_gate_so_an_honest_pair_passes(tmp_path: Path) -> None:
    """Batch-dependent numerics: the control's own samples flip near ties under load as often as the
    pair's do, so the pair's flips are within the null arm (without the load arm, CPU exact: fail)."""
    control, prepared = _control(tmp_path, flips=frozenset({0, 1, 2}))
    samples = [
        (p, data.series(p.first_item, flip_at=3 if i in {3, 4} else None)) for i, p in enumerate(prepared.prompts)
    ]
    result = _pair(tmp_path, samples, control)
    assert next(g for g in result.gates if g.name == lp.GATE).passed, result.summary
    for row in control.evidence[lp.EVIDENCE_KEY]["reference"]:
        row["null"].pop(LOAD_NULL_ARM)
    assert not next(g for g in _pair(tmp_path / "x", samples, control).gates if g.name == lp.GATE).passed


def test_a_cell_whose_own_parity_already_fails_gets_the_numbers_and_no_gate(tmp_path: Path) -> None:
    control, prepared = _control(tmp_path)
    samples = [(p, data.series(p.first_item, corrupt=True)) for p in prepared.prompts]
    parity = CheckResult(name="parity", verdict="fail", summary="6/6 prompts beyond the null floor")
    result = _pair(tmp_path, samples, control, parity)
    assert result.verdict == "pass" and not any(g.name == lp.GATE for g in result.gates)
    found = result.evidence[lp.EVIDENCE_KEY]
    assert found["verdict"] == "fail" and "already fails" in found["gate_skipped"]
    assert result.metrics[k.LOAD_PARITY_FAILING] == 6
