"""Parity statistics and gates from token / logprob series (no engines; the real-server tests live in
tests/integration/test_accuracy.py).

The near-tie test uses NearTieStandIn: a STAND-IN language model (seeded pseudo-logits that depend on
the prompt and the tokens so far), not vLLM. It puts near-ties in its distributions and adds
GPU-like noise to every arm (control miss / hit / loaded / teacher-forced, and P/D), which flips the
argmax on near-ties in both arms. The calibrated gate must pass it; the same stand-in with a
block-mapping error (P/D reads the context of the wrong blocks) must fail, with the diagnosis.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from canary.checks.parity.check import judge_pd
from canary.checks.parity.drift import judge_drift
from canary.checks.parity.fidelity import (
    FidelityError,
    Position,
    Series,
    compare,
    kl_topk,
    series_from_completion,
    series_from_json,
    series_from_prompt_logprobs,
    series_to_json,
)
from canary.checks.parity.gates import (
    BlockSide,
    binomial_tail,
    diagnose,
    fisher_greater,
    floor_gate,
    locate,
    token_gate,
)
from canary.checks.parity.metrics import OVER_FLOOR_LIMIT, over_floor
from canary.checks.parity.prompts import ParityPrompt, build_prompts
from canary.checks.parity.reference import (
    GEN_NULL_ARMS,
    Reference,
    fidelity_from_json,
    judge_evidence,
    reference_from_evidence,
)
from canary.config import ParityCheckConfig
from canary.config.load import load_config, validate_config
from canary.plan.matrix import plan
from canary.plan.parity_lengths import cell_prompt_lengths, prompt_lengths

# --------------------------------------------------------------------------- series and comparisons

REPO = Path(__file__).resolve().parents[4]


def test_series_from_vllm_completion_and_prompt_logprobs() -> None:
    logprobs = {
        "tokens": ["token_id:7", "token_id:3"],
        "token_logprobs": [-0.1, -0.7],
        "top_logprobs": [{"token_id:7": -0.1, "token_id:9": -2.5}, {"token_id:4": -0.6, "token_id:3": -0.7}],
        "text_offset": [0, 1],
    }
    series = series_from_completion(logprobs, "here")
    assert [p.token for p in series] == [7, 3] and series[1].argmax == 4
    assert series_from_json(series_to_json(series)) == series
    prompt_logprobs: list[Any] = [
        None,
        {"5": {"logprob": -1.0, "rank": 1, "decoded_token": "x"}},
        {"7": {"logprob": -0.2, "rank": 1}, "8": {"logprob": -1.9, "rank": 2}},
        {"4": {"logprob": -0.5, "rank": 1}, "3": {"logprob": -0.9, "rank": 2}},
    ]
    forced = series_from_prompt_logprobs(prompt_logprobs, [7, 3], 2, "there")
    assert [(p.token, p.logprob) for p in forced] == [(7, -0.2), (3, -0.9)]
    with pytest.raises(FidelityError, match="not 'token_id:N'"):
        series_from_completion({**logprobs, "tokens": ["a", "b"]}, "here")
    with pytest.raises(FidelityError, match="3 entries, expected 5"):
        series_from_prompt_logprobs(prompt_logprobs[:3], [7, 3, 1], 2, "there")


def _pos(token: int, top: dict[int, float]) -> Position:
    return Position(token, top[token], top)


def test_compare_generations_stops_after_the_first_differing_token() -> None:
    a = [_pos(1, {1: -0.1, 2: -2.4}), _pos(2, {2: -0.2, 3: -1.8}), _pos(3, {3: -0.3, 4: -1.5})]
    same = compare(a, list(a))
    assert (same.first_token_diff, same.max_kl, same.max_abs_dlp, same.top1_disagree) == (None, 0.0, 0.0, 0.0)
    b = [a[0], _pos(3, {3: -0.5, 2: -0.9}), _pos(9, {9: -0.1})]
    diff = compare(a, b)
    assert diff.first_token_diff == 1 and diff.positions == 2  # the position after the flip has another context
    assert diff.top1_agree == [True, False] and diff.max_abs_dlp == pytest.approx(0.7)
    forced = compare(a, [a[0], _pos(2, {2: -0.25, 3: -1.7}), a[2]], teacher_forced=True)
    assert forced.positions == 3 and forced.first_token_diff is None
    assert forced.max_abs_dlp == pytest.approx(0.05) and forced.max_kl > 0


def test_kl_estimate_is_zero_for_equal_and_grows_with_the_shift() -> None:
    def dist(logits: dict[int, float]) -> Position:
        z = math.log(sum(math.exp(v) for v in logits.values()))
        top = {t: v - z for t, v in logits.items()}
        return _pos(max(top, key=lambda t: top[t]), top)

    base = dist({1: 2.0, 2: 1.0, 3: 0.0})
    assert kl_topk(base, base) == 0.0
    small, large = dist({1: 2.0, 2: 1.1, 3: 0.0}), dist({1: 0.0, 2: 1.0, 3: 2.0})
    assert 0 < kl_topk(base, small) < 0.01 < kl_topk(base, large)
    disjoint = _pos(8, {8: -0.05, 9: -3.0})
    assert kl_topk(base, disjoint) > 1.0  # the other side put its mass elsewhere


# --------------------------------------------------------------------------- gates


def test_binomial_and_fisher_tails() -> None:
    assert binomial_tail(0, 5, 0.3) == 1.0
    assert binomial_tail(1, 8, 1 / 17) == pytest.approx(1 - (16 / 17) ** 8)
    assert binomial_tail(3, 3, 0.5) == pytest.approx(0.125)
    assert fisher_greater(0, 10, 0, 10) == 1.0
    assert fisher_greater(5, 5, 0, 5) == pytest.approx(1 / math.comb(10, 5))
    assert fisher_greater(1, 10, 3, 20) > 0.5


def test_floor_gate_is_exact_on_a_zero_floor_and_statistical_above_it() -> None:
    exact = floor_gate("kl", [0.0, 0.0, 2e-4], [0.0] * 10, 2.0, 1e-4, 0.01)
    assert exact.exact and exact.exceeding == [2] and not exact.passed
    assert floor_gate("kl", [0.0, 5e-5], [0.0] * 10, 2.0, 1e-4, 0.01).passed
    noisy = [0.01 * (i + 1) for i in range(20)]  # largest null value 0.2
    one = floor_gate("kl", [0.5, 0.1, 0.1, 0.1], noisy, 2.0, 0.0, 0.01)
    assert one.exceeding == [0] and one.passed and one.p_value == pytest.approx(1 - (20 / 21) ** 4)
    many = floor_gate("kl", [0.5, 0.9, 3.0, 0.1], noisy, 2.0, 0.0, 0.01)
    assert many.exceeding == [0, 1, 2] and not many.passed and "3/4 prompts above 0.4" in many.detail()


def test_token_gate_exact_without_null_flips_and_fisher_with_them() -> None:
    assert not token_gate([False, True, False], [False] * 6, 0.01).passed
    assert token_gate([False] * 3, [False] * 6, 0.01).passed
    flips = token_gate([True, False, False, False], [True, False, False, False, True, False, False, False], 0.01)
    assert flips.passed and not flips.exact
    assert not token_gate([True] * 8, [False] * 15 + [True], 0.01).passed


def test_locate_and_diagnose_blocks() -> None:
    sides = [BlockSide("prefill", 128, 32), BlockSide("decode", 128, 32)]
    where = locate(65, 0, sides)
    assert where["prefill_logical_block"] == 1 and where["prefill_kernel_block"] == 3
    assert where["decode_kernel_prompt_blocks"] == 3 and where["decode_kernel_crossed"] is False
    later = locate(64, 1, sides)
    assert later["prefill_kernel_block"] == 3 and later["prefill_kernel_crossed"] is True
    # decode loads every prompt token's KV but the last one's for sure (B+1 tokens: one or two blocks)
    text = diagnose([(64, 0), (129, 0), (100, 0)], [8, 31, 32, 33], 32)
    assert text.startswith("divergence starts at block 2 of 5") and text.endswith("blocks beyond the first")
    assert diagnose([(33, 0), (64, 0)], [8, 32], 32).startswith("divergence starts at block 2 of 2")
    gap = diagnose([(100, 0)], [8, 33], 32)
    assert gap.startswith("divergence starts at block 2..4 of 4") and gap.endswith("blocks beyond the first")
    assert diagnose([(129, 0)], [8, 64], 32).endswith("blocks beyond block 2")
    assert diagnose([(129, 0)], [], 32).startswith("divergence by block 5 of 5 at the latest")
    assert diagnose([(16, 0)], [300], 32).startswith("not a block-position pattern")
    assert diagnose([(8, 0), (65, 0)], [], 32).startswith("from the first block")
    assert diagnose([(31, 3), (33, 5)], [8], 32).endswith(
        "first output token is within the noise, divergence starts later"
    )
    assert diagnose([], [8], 32) == "no divergence beyond the noise floor"


# --------------------------------------------------------------------------- prompts


def _config(max_model_len: int = 256, blocks: Sequence[int] = (32, 128)) -> Any:
    return validate_config(
        {
            "name": "p",
            "platform": "cpu",
            "models": [{"name": "tiny", "source": "builtin:tiny", "max_model_len": max_model_len}],
            "images": {"baseline": {"ref": "x"}},
            "matrix": {"attention_backends": ["CPU_ATTN"], "prefill_block_sizes": list(blocks)},
        },
        "t",
    )


def test_prompt_lengths_cover_every_block_size_and_the_longest_prompt() -> None:
    config = _config()
    lengths = prompt_lengths(config, [16, 32, 128])
    assert {8, 15, 16, 17, 31, 32, 33, 64, 65, 127, 128, 129} <= set(lengths)
    limit = 256 - config.checks.parity.max_tokens - 1
    assert max(lengths) == limit and 300 not in lengths and 513 not in lengths
    assert lengths == sorted(set(lengths))


def test_a_pd_cell_sends_the_lengths_of_its_own_blocks_and_the_control_all() -> None:
    """cpu-default: the aggregated control records every length of the config; each P/D cell sends
    only those of its own block sizes (logical and kernel, prefill and decode), the longest included."""
    config = load_config(REPO / "configs" / "cpu-default.yaml")
    every = prompt_lengths(config)
    cells = {c.id: c for c in plan(config).planned()}
    assert cell_prompt_lengths(config, cells["agg.cpu_attn.b32.auto.v1.baseline"], every) == every
    p32 = cell_prompt_lengths(config, cells["pd.cpu_attn.p32-d32.auto.v1.baseline"], every)
    assert {16, 31, 32, 33, 64, 65, 129, max(every), *config.checks.parity.prompt_lengths} == set(p32)
    mixed = set(cell_prompt_lengths(config, cells["pd.cpu_attn.p32-d64.auto.v1.baseline"], every))
    assert {31, 32, 33, 63, 64, 65} <= mixed and 127 not in mixed
    split = set(cell_prompt_lengths(config, cells["pd.cpu_attn.p128-d128.auto.v1.kernel32"], every))
    assert {31, 32, 33, 127, 128, 129, 513} <= split and 15 not in split  # kernel 32 under logical 128
    assert sum(len(cell_prompt_lengths(config, c, every)) for c in cells.values() if c.topology == "pd-nixl") < (
        len(every) * sum(c.topology == "pd-nixl" for c in cells.values())
    )


def test_prompts_have_exact_lengths_distinct_first_blocks_and_altered_twins() -> None:
    items = [f"Question: item {i} has {i % 7} apples?\nAnswer: {i % 7}\n\n" for i in range(300)]

    def tokenize(text: str) -> list[int]:  # a character tokenizer with BOS = 0
        return [0, *(ord(c) for c in text)]

    prompts = build_prompts(items, [8, 31, 33, 200], 32, 5, tokenize)
    assert [len(p.ids) for p in prompts] == [8, 31, 33, 200] == [len(p.altered_ids) for p in prompts]
    long = [p for p in prompts if p.length >= 32]
    assert len({tuple(p.ids[:32]) for p in long}) == len(long) == 2  # no shared first block
    for p in prompts:
        assert p.altered_ids[0] == p.ids[0] and p.altered_ids[p.altered_tokens + 1 :] == p.ids[p.altered_tokens + 1 :]
        assert p.altered_ids[1 : p.altered_tokens + 1] != p.ids[1 : p.altered_tokens + 1]
    assert [p.altered_tokens for p in prompts] == [4, 15, 16, 32]


# --------------------------------------------------------------------------- the near-tie stand-in


class NearTieStandIn:
    """STAND-IN language model (not vLLM): pseudo-logits seeded by (prompt context, tokens so far).

    Every third position is a near-tie (top-2 gap `tie_gap`); `noise` is added to every logit of
    every arm independently, as GPU batch shapes and cache paths do. `wrong_blocks`: the P/D arm
    reads other KV for the blocks beyond the first of prompts longer than `block` tokens (a block-mapping error).
    """

    VOCAB = 40

    def __init__(self, tie_gap: float, noise: float, block: int = 32) -> None:
        self.tie_gap, self.noise, self.block = tie_gap, noise, block

    def _logits(self, context: tuple[int, ...], step: int) -> list[float]:
        rng = random.Random(hash(context) ^ step)
        logits = [rng.gauss(0.0, 2.0) for _ in range(self.VOCAB)]
        if step % 3 == 0:
            order = sorted(range(self.VOCAB), key=lambda t: -logits[t])
            logits[order[1]] = logits[order[0]] - self.tie_gap
        return logits

    def _position(self, logits: list[float], token: int | None, rng: random.Random) -> Position:
        noisy = [v + rng.gauss(0.0, self.noise) for v in logits]
        z = math.log(sum(math.exp(v) for v in noisy))
        lps = [v - z for v in noisy]
        top_ids = sorted(range(self.VOCAB), key=lambda t: -lps[t])[:5]
        chosen = top_ids[0] if token is None else token
        return Position(chosen, lps[chosen], {t: lps[t] for t in top_ids})

    def run(
        self,
        prompt: Sequence[int],
        steps: int,
        rng: random.Random,
        forced: Sequence[int] | None = None,
        wrong_blocks: bool = False,
    ) -> Series:
        context = tuple(prompt)
        if wrong_blocks and len(prompt) - 1 > self.block:  # decode computes the last prompt token itself
            context = (*prompt[: self.block], *(t + 1 for t in prompt[self.block : -1]), prompt[-1])
        out: Series = []
        for step in range(steps):
            token = None if forced is None else forced[step]
            position = self._position(self._logits(context + tuple(p.token for p in out), step), token, rng)
            out.append(position)
        return out


def _references(model: NearTieStandIn, rng: random.Random, settings: ParityCheckConfig) -> list[Reference]:
    refs = []
    for n, length in enumerate([16, 31, 32, 33, 65, 100, 129, 200]):
        ids = [1000 + n * 1000 + i for i in range(length)]
        prompt = ParityPrompt(length, ids, [7, *ids[1:]], 1, n)
        miss = model.run(ids, 12, rng)
        again = model.run(ids, 12, rng)
        forced = model.run(ids, 12, rng, forced=[p.token for p in miss])
        null = {"cache_batch": compare(miss, again), "forced": compare(miss, forced, True)}
        refs.append(Reference(prompt, miss, null, compare(miss, model.run(prompt.altered_ids, 12, rng))))
    judge_evidence(settings, refs)
    return refs


def _stand_in_run(model: NearTieStandIn, wrong_blocks: bool, seed: int = 0) -> Any:
    rng = random.Random(seed)
    settings = ParityCheckConfig(max_tokens=12)
    refs, rows = _references(model, rng, settings), []
    for ref in refs:
        pd = model.run(ref.prompt.ids, 12, rng, wrong_blocks=wrong_blocks)
        rescored = model.run(ref.prompt.ids, 12, rng, forced=[p.token for p in pd])
        rows.append((ref, pd, compare(ref.miss, pd), compare(pd, rescored, True)))
    sides = [BlockSide("prefill", 32, 32), BlockSide("decode", 32, 32)]
    evidence: dict[str, Any] = {}
    return judge_pd(sides, settings, refs, rows, "stand-in control", evidence), evidence, refs


def test_stand_in_near_tie_flips_in_both_arms_pass_the_calibrated_gate() -> None:
    model = NearTieStandIn(tie_gap=1e-3, noise=5e-3)
    result, evidence, refs = _stand_in_run(model, wrong_blocks=False)
    null_flips = sum(r.null[a].first_token_diff is not None for r in refs for a in GEN_NULL_ARMS if a in r.null)
    assert null_flips > 0, "the stand-in must flip near-ties in the null arm too"
    assert result.metrics["parity_match_rate"] < 1.0, "and in the P/D arm: a token-exact gate would fail"
    assert result.verdict == "pass", (result.summary, [g.detail for g in result.gates if not g.passed])
    assert evidence["diagnosis"] == "no divergence beyond the noise floor"


def test_stand_in_block_mapping_error_fails_with_the_blocks_named() -> None:
    model = NearTieStandIn(tie_gap=1e-3, noise=5e-3)
    result, evidence, _ = _stand_in_run(model, wrong_blocks=True)
    assert result.verdict == "fail", result.summary
    assert {"forced-kl", "forced-abs-dlogprob"} <= {g.name for g in result.gates if not g.passed}
    assert "blocks beyond the first" in evidence["diagnosis"] and "blocks beyond the first" in result.summary
    failing = [row for row in evidence["per_prompt"] if row["beyond_noise"]]
    assert {row["length"] for row in failing} == {65, 100, 129, 200}
    assert all(row["divergence"]["decode_logical_block"] >= 2 for row in failing)
    assert all(len(row["forced"]["kl"]) == 12 for row in evidence["per_prompt"])


def test_exact_cpu_floor_fails_one_flipped_prompt_and_passes_identical_arms() -> None:
    exact = NearTieStandIn(tie_gap=1.0, noise=0.0)
    clean, _, refs = _stand_in_run(exact, wrong_blocks=False)
    assert clean.verdict == "pass" and clean.metrics["parity_null_kl_max"] == 0.0
    assert all(g.detail.endswith("exact (null floor 0)") or "token-exact" in g.detail for g in clean.gates)
    broken, _, _ = _stand_in_run(exact, wrong_blocks=True)
    assert broken.verdict == "fail" and broken.metrics["parity_match_rate"] < 1.0
    assert any(r.evidence for r in refs)


def test_prompts_whose_output_ignores_the_first_block_are_rejected() -> None:
    settings = ParityCheckConfig()
    a = [_pos(1, {1: -0.1, 2: -2.4})]
    quiet = Reference(ParityPrompt(8, [1] * 8, [2] + [1] * 7, 4, 0), a, {}, compare(a, a))
    moved = [_pos(1, {1: -0.5, 2: -1.0})]
    loud = Reference(ParityPrompt(9, [1] * 9, [2] + [1] * 8, 4, 1), a, {}, compare(a, moved))
    judge_evidence(settings, [quiet, loud])
    assert not quiet.evidence and quiet.reason.startswith("rejected: altering the first 4 tokens")
    assert loud.evidence and "moves a generated logprob by 0.4" in loud.reason
    row = quiet.to_json()
    (back,) = reference_from_evidence([row], [quiet.prompt])
    assert back.miss == quiet.miss and back.evidence is False and back.reason == quiet.reason


def test_prompt_items_come_from_the_held_out_split(tmp_path: Any) -> None:
    from canary.checks.parity.prompts import source_items

    data = tmp_path / "model" / "data"
    data.mkdir(parents=True)
    (data / "test.jsonl").write_text(
        '{"question": "Ann has 2 pens and buys 3. How many?", "answer": "2 + 3 = 5\\n#### 5"}\n'
    )
    (data.parent / "canary-model.json").write_text("{}")  # a model this project built: GSM8K items only
    config = _config()
    items, where = source_items(config, str(tmp_path / "model"))
    assert items == ["Question: Ann has 2 pens and buys 3. How many?\nAnswer: 2 + 3 = 5\n#### 5\n\n"]
    assert where == f"held-out split {data / 'test.jsonl'}"
    hub = config.model_copy(deep=True)
    hub.checks.accuracy.dataset.source = "hub"
    hub.checks.parity.prompt_text = "gsm8k"
    generated, where = source_items(hub, "org/model")
    assert len(generated) == 500 and generated[0].startswith("Question: ") and "generated GSM8K-format" in where


def test_a_real_model_reads_prose_interleaved_with_gsm8k_items() -> None:
    from canary.checks.parity.prompts import source_items
    from canary.checks.parity.text import PARAGRAPHS

    config = _config()
    config.checks.accuracy.dataset.source = "hub"
    mixed, where = source_items(config, "org/real-model")  # auto: a model not built here
    assert mixed[0].startswith("Question: ") and mixed[1] == PARAGRAPHS[0] and mixed[3] == PARAGRAPHS[1]
    assert "prose paragraphs" in where and len(mixed) == 1000
    config.checks.parity.prompt_text = "natural"
    natural, _ = source_items(config, "org/real-model")
    assert natural == list(PARAGRAPHS) and len(set(p[:40] for p in PARAGRAPHS)) == len(PARAGRAPHS)
    assert all(p.endswith("\n\n") and len(p.split()) > 40 for p in PARAGRAPHS)


class SamplerChange(NearTieStandIn):
    """The stand-in with a numerics change of a candidate image: every logit gets a fixed bias."""

    def _logits(self, context: tuple[int, ...], step: int) -> list[float]:
        return [v + 0.3 * ((t * 7919) % 5) for t, v in enumerate(super()._logits(context, step))]


def test_drift_against_the_baseline_image_is_reported_with_its_size() -> None:
    settings = ParityCheckConfig(max_tokens=12)
    baseline = _references(NearTieStandIn(tie_gap=1e-3, noise=5e-3), random.Random(1), settings)
    same = _references(NearTieStandIn(tie_gap=1e-3, noise=5e-3), random.Random(2), settings)
    gates, metrics, evidence = judge_drift(settings, same, baseline, "agg.baseline")
    assert all(g.passed for g in gates), [g.detail for g in gates]
    changed = _references(SamplerChange(tie_gap=1e-3, noise=5e-3), random.Random(3), settings)
    gates, metrics, evidence = judge_drift(settings, changed, baseline, "agg.baseline")
    # near-ties flip greedy tokens in most null comparisons here, so token flips alone prove little;
    # the KL against both images' null floor is what reports the change
    assert [g.name for g in gates if not g.passed] == ["drift-kl-vs-baseline"]
    assert metrics["parity_drift_token_flips"] == 8 and metrics["parity_drift_kl_max"] > 0.05
    assert metrics["parity_drift_prompts"] == len(evidence["per_prompt"]) == 8
    assert evidence["baseline_cell"] == "agg.baseline"


def test_too_few_evidence_prompts_make_the_check_invalid_never_pass() -> None:
    from canary.checks.parity.check import _invalid

    settings = ParityCheckConfig(min_evidence_prompts=3)
    a = [_pos(1, {1: -0.1, 2: -2.4})]
    refs = [
        Reference(ParityPrompt(8 + i, [1] * (8 + i), [2] + [1] * (7 + i), 4, i), a, {}, compare(a, a)) for i in range(4)
    ]
    refs[0].dependence = compare(a, [_pos(2, {2: -0.1, 1: -2.4})])
    judge_evidence(settings, refs)
    result = _invalid(refs, settings, {})
    assert result is not None and result.verdict == "invalid"
    assert result.summary.startswith("inconclusive: only 1/4 prompts") and "rejected: altering" in result.summary
    refs[1].evidence = refs[2].evidence = True
    assert _invalid(refs, settings, {}) is None


def test_over_floor_limit_is_where_the_gate_starts_exceeding() -> None:
    """The dashboards draw OVER_FLOOR_LIMIT as the threshold line of every *_over_floor series: a value at
    the gate's threshold is exactly the limit and does not exceed; just above it exceeds."""
    gate = floor_gate("kl", [0.0], [0.01, 0.02], margin=3.0, tolerance=1e-4, alpha=0.05)
    at, above = gate.threshold, gate.threshold * 1.001
    assert over_floor(at, gate.threshold) == OVER_FLOOR_LIMIT
    assert floor_gate("kl", [at], [0.01, 0.02], margin=3.0, tolerance=1e-4, alpha=0.05).exceeding == []
    assert over_floor(above, gate.threshold) > OVER_FLOOR_LIMIT
    assert floor_gate("kl", [above], [0.01, 0.02], margin=3.0, tolerance=1e-4, alpha=0.05).exceeding == [0]


def _flipped_pd_run(settings: ParityCheckConfig, wrong_blocks: bool = False) -> Any:
    """The exact stand-in (token-exact null arm) whose P/D generations take the runner-up token at the last step of
    every other prompt, as a hybrid's recurrent decode step tips a near-tie: the teacher-forced rescoring of
    those generations matches the control's own scoring (no corruption)."""
    model = NearTieStandIn(tie_gap=1.0, noise=0.0)
    rng = random.Random(0)
    refs, rows = _references(model, rng, settings), []
    for n, ref in enumerate(refs):
        pd = model.run(ref.prompt.ids, 12, rng, wrong_blocks=wrong_blocks)
        if n % 2 == 0:
            second = sorted(pd[-1].top, key=lambda t: -pd[-1].top[t])[1]
            pd = [*pd[:-1], Position(second, pd[-1].top[second], pd[-1].top)]
        rescored = model.run(ref.prompt.ids, 12, rng, forced=[p.token for p in pd])
        rows.append((ref, pd, compare(ref.miss, pd), compare(pd, rescored, True)))
    sides = [BlockSide("prefill", 32, 32), BlockSide("decode", 32, 32)]
    evidence: dict[str, Any] = {}
    return judge_pd(sides, settings, refs, rows, "stand-in control", evidence)


def test_a_state_family_reports_greedy_flips_and_is_judged_by_the_teacher_forced_gates() -> None:
    """`token_gate: false` (a P/D cell of a `state_families` family): greedy flips against a token-exact null arm
    are reported, not a failure; corruption still fails on the teacher-forced gates."""
    exact = ParityCheckConfig(max_tokens=12)
    flipped = _flipped_pd_run(exact)
    assert flipped.verdict == "fail" and [g.name for g in flipped.gates if not g.passed] == ["tokens-vs-null"]
    relaxed = ParityCheckConfig(max_tokens=12, token_gate=False)
    tolerated = _flipped_pd_run(relaxed)
    assert tolerated.verdict == "pass", [g.detail for g in tolerated.gates if not g.passed]
    gate = next(g for g in tolerated.gates if g.name == "tokens-vs-null")
    assert gate.observed > 0 and "not gating" in gate.detail
    corrupt = _flipped_pd_run(relaxed, wrong_blocks=True)
    assert corrupt.verdict == "fail"
    assert {"forced-kl", "forced-abs-dlogprob"} <= {g.name for g in corrupt.gates if not g.passed}
    assert ParityCheckConfig().state_families == ["gdn-hybrid", "mamba-hybrid"]


def _tie_flipped_pd_run(tie_gap: float) -> Any:
    """The exact stand-in (token-exact null arm, no noise) whose P/D arm takes the runner-up at step 9 (a position
    whose top-2 gap is `tie_gap`) of every other prompt and stops there, as a bf16 step tips a tie."""
    settings = ParityCheckConfig(max_tokens=12)
    model = NearTieStandIn(tie_gap=tie_gap, noise=0.0)
    rng = random.Random(0)
    refs, rows = _references(model, rng, settings), []
    for n, ref in enumerate(refs):
        pd = model.run(ref.prompt.ids, 12, rng)
        if n % 2 == 0:
            second = sorted(pd[9].top, key=lambda t: -pd[9].top[t])[1]
            pd = [*pd[:9], Position(second, pd[9].top[second], pd[9].top)]
        rescored = model.run(ref.prompt.ids, len(pd), rng, forced=[p.token for p in pd])
        rows.append((ref, pd, compare(ref.miss, pd), compare(pd, rescored, True)))
    evidence: dict[str, Any] = {}
    sides = [BlockSide("prefill", 32, 32), BlockSide("decode", 32, 32)]
    return judge_pd(sides, settings, refs, rows, "stand-in control", evidence), evidence


def test_a_flip_at_a_near_tie_within_the_accepted_dlogprob_is_not_a_token_failure() -> None:
    """Both arms rank the same two tokens within the |delta logprob| the gate accepts (here its tolerance, 1e-3
    nats, over a bit-exact null arm): the flip is that noise tipping a tie, counted by no gate. A flip past it
    (a 0.5-nat gap) still fails the token-exact gate."""
    tied, evidence = _tie_flipped_pd_run(tie_gap=5e-4)
    assert tied.verdict == "pass", [g.detail for g in tied.gates if not g.passed]
    assert evidence["near_tie_flips"] == 4 and evidence["near_tie_nats"] == pytest.approx(1e-3)
    token = next(g for g in tied.gates if g.name == "tokens-vs-null")
    assert "4 at a near-tie within 0.001 nats not counted" in token.detail
    beyond, evidence = _tie_flipped_pd_run(tie_gap=0.5)
    assert beyond.verdict == "fail" and evidence["near_tie_flips"] == 0
    assert "tokens-vs-null" in {g.name for g in beyond.gates if not g.passed}


def test_near_tie_gaps_survive_the_evidence_round_trip() -> None:
    a = [_pos(1, {1: -0.1, 2: -0.1004}), _pos(3, {3: -0.2, 4: -2.0})]
    b = [_pos(2, {1: -0.1003, 2: -0.1}), _pos(3, {3: -0.2})]
    fidelity = compare(a, b)
    assert fidelity.first_token_diff == 0 and fidelity.first_diff_gap == pytest.approx(4e-4)
    assert not fidelity.differs_beyond(1e-3) and fidelity.differs_beyond(1e-4)
    again = fidelity_from_json(fidelity.to_json())
    assert again.first_diff_gap == pytest.approx(4e-4) and again.disagree_gap == pytest.approx(fidelity.disagree_gap)
    unknown = compare([_pos(1, {1: -0.1})], [_pos(2, {2: -0.1})])  # neither top-k holds the other's token
    assert unknown.differs_beyond(10.0)
