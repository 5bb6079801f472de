"""The GSM8K-format generator behind the tiny model: deterministic, disjoint, correct."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from canary.model import dataset, lm_eval_task, params
from canary.model.dataset import DatasetSpec

SMALL = DatasetSpec(seed=3, train_size=400, test_size=100)


def test_same_seed_gives_identical_splits() -> None:
    assert dataset.generate_splits(SMALL) == dataset.generate_splits(SMALL)


def test_other_seed_gives_other_splits() -> None:
    other = DatasetSpec(seed=4, train_size=SMALL.train_size, test_size=SMALL.test_size)
    assert dataset.generate_splits(SMALL) != dataset.generate_splits(other)


def test_default_splits_have_requested_sizes_and_no_shared_question() -> None:
    spec = DatasetSpec()
    train, test = dataset.generate_splits(spec)
    assert (len(train), len(test)) == (spec.train_size, spec.test_size)
    train_questions = {p.question for p in train}
    test_questions = {p.question for p in test}
    assert len(train_questions) == len(train)
    assert len(test_questions) == len(test)
    assert not train_questions & test_questions


def test_every_answer_ends_in_the_right_number() -> None:
    train, test = dataset.generate_splits(DatasetSpec())
    for problem in [*train, *test]:
        match = re.fullmatch(r"(\d+) ([-+*]) (\d+) = (\d+)\n#### (\d+)", problem.answer)
        assert match is not None, problem.answer
        a, op, b, stated, final = match.groups()
        expected = {"+": int(a) + int(b), "-": int(a) - int(b), "*": int(a) * int(b)}[op]
        assert int(stated) == int(final) == expected == dataset.final_number(problem.answer)
        assert expected >= 0
        assert dataset.check_answer(problem.answer)
        assert a in problem.question and b in problem.question


def test_all_operations_appear() -> None:
    train, _ = dataset.generate_splits(SMALL)
    assert {p.answer.split()[1] for p in train} == {"+", "-", "*"}


@pytest.mark.parametrize("answer", ["3 + 4 = 8\n#### 8", "3 + 4 = 7\n#### 8", "3 + 4 = 7", "seven"])
def test_check_answer_rejects_wrong_or_malformed(answer: str) -> None:
    assert not dataset.check_answer(answer)


def test_final_number_needs_the_marker() -> None:
    assert dataset.final_number("2 * 5 = 10\n#### 10") == 10
    with pytest.raises(ValueError, match="####"):
        dataset.final_number("2 * 5 = 10")


def test_impossible_spec_fails_instead_of_looping(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(dataset, "TEMPLATES", dataset.TEMPLATES[:1])
    monkeypatch.setattr(dataset, "NAMES", dataset.NAMES[:2])
    monkeypatch.setattr(dataset, "ITEMS", dataset.ITEMS[:1])
    with pytest.raises(ValueError, match="distinct"):
        dataset.generate_splits(DatasetSpec(train_size=1, test_size=2, max_addend=1))


def test_jsonl_round_trip_has_gsm8k_fields(tmp_path: Path) -> None:
    train_path, test_path = dataset.write_splits(tmp_path, SMALL)
    first = json.loads(train_path.read_text(encoding="utf-8").splitlines()[0])
    assert set(first) == {"question", "answer"}
    assert dataset.read_jsonl(train_path) == dataset.generate_splits(SMALL)[0]
    assert dataset.read_jsonl(test_path) == dataset.generate_splits(SMALL)[1]


def test_cli_writes_both_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert dataset.main(["--out", str(tmp_path), "--seed", "1", "--train-size", "20", "--test-size", "5"]) == 0
    assert len(dataset.read_jsonl(tmp_path / "test.jsonl")) == 5
    assert str(tmp_path / "train.jsonl") in capsys.readouterr().out


def test_cache_key_follows_parameters() -> None:
    assert params.cache_key(params.default_params(0)) == params.cache_key(params.default_params(0))
    assert params.cache_key(params.default_params(0)) != params.cache_key(params.default_params(1))
    root = Path("/nonexistent-root")
    assert params.model_dir(root, params.default_params(0)).parent == root


def test_task_yaml_points_at_the_data(tmp_path: Path) -> None:
    dataset.write_splits(tmp_path / "data", SMALL)
    task_dir = lm_eval_task.write_task(tmp_path / "tasks", tmp_path / "data")
    text = (task_dir / "gsm8k.yaml").read_text(encoding="utf-8")
    assert "__DATA_DIR__" not in text
    assert f'"{(tmp_path / "data" / "test.jsonl").resolve().as_posix()}"' in text
    assert "task: gsm8k" in text and "num_fewshot: 5" in text


def test_task_yaml_needs_both_files(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        lm_eval_task.render_task(tmp_path)
