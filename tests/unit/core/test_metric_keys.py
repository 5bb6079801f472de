"""The contract between the checks and the metric schema, checked on what the checks produce.

Each check's metric-producing code runs here on real inputs (no engines): the startup times of a
deployment, the load generator's analysis of raw client output and the throughput check's
combination of repeats, the accuracy check's result of a sequential GSM8K run with a control, the
NIXL counters of a real vLLM /metrics text, the throughput check's SLO capacity search (against the
synthetic server of tests.support.sample) on an aggregated control and a P/D cell with its
disaggregation gain, and the parity check's judgement of P/D rows against a
control's reference and null arm (and of a candidate image against the baseline's). Every key the
schema exports must be among the keys produced; every number the parity check produces is exported.
(The history's change-point keys, canary.export.history.tracked.TRACKED, are written and exported end to
end by tests/unit/export/history/test_history_done.py.)
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

import pytest

from canary.checks.accuracy.check import Threshold, build_result
from canary.checks.accuracy.gsm8k import QuestionResult
from canary.checks.accuracy.sequential import evaluate_sequentially
from canary.checks.base import CheckContext
from canary.checks.kv_transfer.check import ZERO, read_counters, transfer_metrics
from canary.checks.parity import check as parity
from canary.checks.parity import exported as parity_exported
from canary.checks.parity.check import judge_pd
from canary.checks.parity.drift import judge_drift
from canary.checks.parity.fidelity import Position, Series, compare
from canary.checks.parity.gates import BlockSide, diagnose, first_divergent_block
from canary.checks.parity.metrics import over_floor, reference_metrics
from canary.checks.parity.prompts import ParityPrompt
from canary.checks.parity.reference import CACHE_BATCH_ARM, FORCED_NULL_ARM, Reference, judge_evidence
from canary.checks.startup.check import _ready_metrics
from canary.checks.throughput import prefixcache
from canary.checks.throughput.check import add_capacity, add_gain, combine
from canary.checks.throughput.loadparity import finish
from canary.checks.throughput.paired import verdict_metrics
from canary.checks.throughput.pdtime import engine_side, join, parse_file
from canary.config import AccuracyCheckConfig, ParityCheckConfig
from canary.core import metric_keys as k
from canary.core.paired import Window, paired_verdict
from canary.core.promtext import parse
from canary.export.history.tracked import TRACKED, TRACKED_CHECK
from canary.export.prometheus import schema as s
from canary.judge.results import CellResult, CheckResult
from canary.load.launch import analyze
from canary.load.stats import ClientHealth, Sample
from canary.load.workload import WorkloadSpec
from canary.plan.matrix import plan
from canary.targets.base import Deployment, ServerInfo
from tests.support import load_parity
from tests.support.pd_records import Engine, add_request
from tests.support.sample import SyntheticServer, sample_config

DECODE_METRICS = """\
# TYPE vllm:nixl_bytes_transferred counter
vllm:nixl_bytes_transferred_sum{engine="0",model_name="tiny"} 98304.0
vllm:nixl_bytes_transferred_count{engine="0",model_name="tiny"} 3.0
# TYPE vllm:nixl_num_failed_transfers counter
vllm:nixl_num_failed_transfers_total{engine="0",model_name="tiny"} 0.0
# TYPE vllm:prompt_tokens counter
vllm:prompt_tokens_total{engine="0",model_name="tiny"} 300.0
# TYPE vllm:request_success counter
vllm:request_success_total{engine="0",finished_reason="length",model_name="tiny"} 3.0
"""


# --------------------------------------------------------------------------- each check's numbers


def _startup() -> set[str]:
    cell = next(c for c in plan(sample_config()).planned() if c.topology == "pd-nixl")
    servers = {
        role: ServerInfo(role=role, base_url="http://127.0.0.1:1", ready_seconds=20.0 + i)
        for i, role in enumerate(("prefill", "decode", "router"))
    }
    deployment = Deployment(cell, "http://127.0.0.1:1", "tiny", servers, started=True, ready_seconds=24.0)
    return set(_ready_metrics(deployment))


def _request(index: int, sent: float, warmup: bool = False) -> Sample:
    return Sample(
        index=index,
        warmup=warmup,
        sent_at=sent,
        ended_at=sent + 0.13,
        expected_prompt_tokens=8,
        expected_output_tokens=4,
        ttft_s=0.05,
        itl_s=[0.02, 0.03, 0.025],
        e2e_s=0.13,
        token_events=4,
        prompt_tokens=8,
        output_tokens=4,
    )


def _throughput() -> set[str]:
    spec = WorkloadSpec(base_url="http://127.0.0.1:1", model="tiny")
    runs = []
    for repeat in range(2):
        raw = {
            "samples": [_request(0, 0.0, warmup=True).to_json()]
            + [_request(i, 1.0 + 0.5 * i + repeat).to_json() for i in range(1, 12)],
            "health": ClientHealth(cpu_s=0.2, wall_s=6.0, lag_s=[0.001, 0.002]).to_json(),
            "not_sent": 0,
            "cut": 0,
            "stop_reason": "complete",
            "processes": 1,
        }
        runs.append(analyze(spec, raw))
    arms = ("baseline", "candidate")
    windows = [Window(0, p, arm, 10.0 + p + (arm == "candidate")) for p in range(3) for arm in arms]
    paired_keys = verdict_metrics(paired_verdict(windows, margin=0.15, confidence=0.95))  # checks.throughput.paired
    return set(combine(runs)) | set(paired_keys) | _pd_time() | _prefix_cache()


def _prefix_cache() -> set[str]:
    """The prefix-cache numbers of a P/D cell's engines and of an aggregated one over a load."""

    def scrape(queries: float, hits: float) -> str:
        return (
            f'vllm:prefix_cache_queries_total{{engine="0",model_name="tiny"}} {queries}\n'
            f'vllm:prefix_cache_hits_total{{engine="0",model_name="tiny"}} {hits}\n'
        )

    roles = ("prefill", "decode", "aggregated")
    before = {role: prefixcache.read(parse(scrape(0.0, 0.0))) for role in roles}
    after = {role: prefixcache.read(parse(scrape(288.0, 256.0))) for role in roles}
    return set(prefixcache.metrics(prefixcache.compare(before, after)))


def _load_parity(work: Path) -> set[str]:
    """Parity under load on an aggregated control (its null arm), then on a P/D cell judged against it."""
    prepared = load_parity.prepared()
    control = load_parity.throughput_result()
    samples = [(p, load_parity.series(p.first_item)) for p in prepared.prompts]
    finish(load_parity.context(load_parity.AGG, work), prepared, load_parity.rode(samples), control)
    agg_cell = load_parity.context(load_parity.AGG, work).cell
    startup = CheckResult(name="startup", verdict="pass")
    earlier = {agg_cell.id: CellResult(cell=agg_cell, verdict="pass", checks=[startup, control])}
    pair = load_parity.throughput_result()
    ctx = load_parity.context(load_parity.PD, work, earlier)
    finish(ctx, prepared, load_parity.rode(samples), pair, lambda _, s: s)
    return set(control.metrics) | set(pair.metrics)


def _pd_time() -> set[str]:
    """The P/D time decomposition's numbers (a P/D cell's throughput check adds them)."""
    prefill, decode = Engine(pid=11, mono_base=1000.0), Engine(pid=12, mono_base=5000.0)
    samples = [add_request(prefill, decode, f"run-{i}", 100.0 + i) for i in range(5)]
    sides = [
        engine_side(role, role, [parse_file(Path(role), e.text_lines())])
        for role, e in (("prefill", prefill), ("decode", decode))
    ]
    return set(join(samples, sides[0], sides[1]).metrics())


def _capacity(work_dir: Path) -> set[str]:
    """The capacity search on an aggregated control, then on a P/D cell with its gain over it."""
    config = sample_config()
    cells = {c.id: c for c in plan(config).planned()}
    control, pd = cells["agg.cpu_attn.b32.auto.v1.baseline"], cells["pd.cpu_attn.p32-d32.auto.v1.baseline"]
    earlier: dict[str, CellResult] = {}
    produced: set[str] = set()
    for cell, capacity in ((control, 20.0), (pd, 6.0)):
        deployment = Deployment(cell, "http://127.0.0.1:1", "tiny", {}, started=True)
        ctx = CheckContext(cell, deployment, config, work_dir / cell.id, earlier=dict(earlier))
        result = CheckResult(name="throughput", verdict="pass", summary="x")
        server = SyntheticServer(capacity=capacity, idle_ttft_s=0.05, itl_s=0.01)
        add_capacity(ctx, (None, 1.0, {}), result, measure_factory=lambda found=server, **_: found)
        add_gain(ctx, result)
        produced |= set(result.metrics)
        startup = CheckResult(name="startup", verdict="pass")
        earlier[cell.id] = CellResult(cell=cell, verdict="pass", checks=[startup, result])
    return produced


def _accuracy() -> set[str]:
    def answer(ids: Sequence[int]) -> list[QuestionResult]:
        return [QuestionResult(i, "q", "t", f"h{i}", "out", "1", "1", i % 4 != 0, i % 4 != 0) for i in ids]

    outcome = evaluate_sequentially(
        list(range(40)),
        answer,
        batch_size=20,
        early_stop=False,
        threshold=0.5,
        confidence=0.95,
        paired_alpha=0.01,
        control={i: (True, f"h{i}") for i in range(40)},
    )
    result = build_result(
        outcome, AccuracyCheckConfig(), Threshold(0.5, "test"), "control x", 1.0, "gsm8k", Path("samples.jsonl")
    )
    return set(result.metrics)


def _kv_transfer() -> set[str]:
    return set(transfer_metrics(read_counters(parse(DECODE_METRICS)).minus(ZERO), 8))


def _series(base: int, shift: float = 0.0) -> Series:
    """Greedy tokens base, base+1, ... with a runner-up 2 nats below (shifted by `shift` nats)."""
    return [Position(base + i, -0.1 - shift, {base + i: -0.1 - shift, base + i + 1: -2.1 + shift}) for i in range(8)]


def _reference(length: int, evidence: bool, shift: float = 0.0) -> Reference:
    """A control's reference on CPU: the null arm bit-identical (floor 0), the altered twin moves the
    output (evidence) or does not (rejected)."""
    ids = [1000 * length + i for i in range(length)]
    miss = _series(7, shift)
    twin = _series(9) if evidence else list(miss)
    null = {CACHE_BATCH_ARM: compare(miss, miss), FORCED_NULL_ARM: compare(miss, miss, True)}
    return Reference(ParityPrompt(length, ids, [5, *ids[1:]], 4, length), miss, null, compare(miss, twin))


def _parity() -> dict[str, set[str]]:
    """P/D against the control (prompts beyond the first block corrupt), the control's own
    reference, and a candidate image drifting from the baseline's."""
    settings = ParityCheckConfig(max_tokens=8)
    refs = [_reference(n, evidence=n != 8) for n in (8, 16, 31, 33, 65, 100)]
    judge_evidence(settings, refs)
    rows = []
    for ref in refs:
        pd = _series(7, 0.4) if ref.prompt.length > 33 else list(ref.miss)  # blocks beyond the first: wrong
        rows.append((ref, pd, compare(ref.miss, pd), compare(pd, ref.miss, True)))
    sides = [BlockSide("prefill", 32, 32), BlockSide("decode", 32, 32)]
    evidence: dict[str, object] = {}
    pd_result = judge_pd(sides, settings, refs, rows, "control", evidence)
    assert pd_result.verdict == "fail" and "blocks beyond the first" in str(evidence["diagnosis"])
    assert pd_result.metrics[k.PARITY_FIRST_DIVERGENT_BLOCK] == 2.0  # 33 tokens match, 65 do not
    assert pd_result.metrics[k.PARITY_FAILING_PROMPTS] == 2.0
    assert pd_result.metrics[k.PARITY_REJECTED_PROMPTS] == 1.0 and pd_result.metrics[k.PARITY_PROMPTS] == 6.0
    kl_gate = next(g for g in pd_result.gates if g.name == "forced-kl")
    assert not kl_gate.passed and pd_result.metrics[k.PARITY_KL_OVER_FLOOR] > 1.0
    reference = reference_metrics(refs, parity._floors(refs))
    candidate = [_reference(n, evidence=n != 8, shift=0.3) for n in (8, 16, 31, 33, 65, 100)]
    judge_evidence(settings, candidate)
    gates, drift, _ = judge_drift(settings, candidate, refs, "agg.baseline")
    assert drift[k.PARITY_DRIFT_FAILED_GATES] == sum(not g.passed for g in gates) >= 1
    return {"pd": set(pd_result.metrics), "reference": set(reference), "drift": set(drift)}


@pytest.fixture(scope="module")
def produced(tmp_path_factory: pytest.TempPathFactory) -> dict[str, set[str]]:
    parity_keys = _parity()
    return {
        "startup": _startup(),
        "throughput": _throughput()
        | _capacity(tmp_path_factory.mktemp("capacity"))
        | _load_parity(tmp_path_factory.mktemp("load-parity")),
        "accuracy": _accuracy(),
        "kv_transfer": _kv_transfer(),
        "parity": set().union(*parity_keys.values()),
    }


# --------------------------------------------------------------------------- the contract


def test_every_exported_key_is_produced_by_its_check(produced: dict[str, set[str]]) -> None:
    history = set(TRACKED.values())
    assert {m.key for m in s.CHECK_METRICS if m.check == TRACKED_CHECK} & history == history
    for mapping in s.CHECK_METRICS:
        if mapping.check == TRACKED_CHECK and mapping.key in history:
            continue  # written by canary.export.history.record (see the module doc)
        assert mapping.key in produced[mapping.check], (
            f"{mapping.spec.name}: the {mapping.check} check produces no {mapping.key!r}"
        )
    assert set(s.CHECK_METRIC_KEYS) == set(produced)


def test_every_parity_number_is_exported(produced: dict[str, set[str]]) -> None:
    assert produced["parity"] == set(s.CHECK_METRIC_KEYS["parity"])
    names = {spec.name for spec, _ in parity_exported.PARITY_METRICS}
    assert len(names) == len(parity_exported.PARITY_METRICS)  # one metric per key


def test_every_latency_percentile_the_load_generator_reports_is_exported(produced: dict[str, set[str]]) -> None:
    latencies = {key for key in produced["throughput"] if re.fullmatch(r"(ttft|tpot|itl|e2e)_p\d\d_s", key)}
    assert len(latencies) == len(s.LATENCIES) * len(s.PERCENTILES)
    assert latencies <= set(s.CHECK_METRIC_KEYS["throughput"])


def test_metric_keys_are_distinct_constants() -> None:
    values = [v for name, v in vars(k).items() if name.isupper() and isinstance(v, str)]
    assert len(values) == len(set(values)) and all(re.fullmatch(r"[a-z0-9_]+", v) for v in values)
    assert k.latency_key("ttft", "p50") == "ttft_p50_s"


def test_over_floor_is_a_multiple_of_the_threshold() -> None:
    assert over_floor(0.5, 0.25) == 2.0
    assert over_floor(0.0, 0.0) == 0.0
    assert over_floor(1e-9, 0.0) == float("inf")  # exporters drop it: no series


def test_the_first_divergent_block_gauge_follows_the_diagnosis() -> None:
    assert first_divergent_block([(64, 0), (129, 0), (100, 0)], [8, 31, 32, 33], 32) == 2
    assert diagnose([(64, 0), (129, 0), (100, 0)], [8, 31, 32, 33], 32).startswith("divergence starts at block 2")
    assert first_divergent_block([(129, 0)], [8, 64], 32) == 3  # blocks beyond block 2
    assert first_divergent_block([(16, 0)], [300], 32) is None  # not a block-position pattern: no series
    assert first_divergent_block([], [8], 32) is None
