"""GSM8K through lm-eval against a deployment's OpenAI-compatible completions endpoint.

Data sources (checks.accuracy.dataset):
- hub: `openai/gsm8k` (config `main`) from the Hugging Face hub, as lm-eval's own gsm8k task;
- local: GSM8K-format jsonl (`question`, `answer` ending in `#### N`): `path` = a directory with
  train.jsonl and test.jsonl, or a mirror of the hub repository (main/train-*.parquet,
  main/test-*.parquet); or `train_path` and `test_path` naming two jsonl files;
- builtin: the tiny model's own splits, `<model dir>/data/{train,test}.jsonl`.

The task YAML is the project's copy of lm-eval's gsm8k task (canary/model/gsm8k_local.yaml:
5-shot from the train split, `Question: ...\\nAnswer:`, the same stops, strict-match and
flexible-extract filters) with its dataset fields set for the source. It is written as `gsm8k.yaml`
into a temporary include directory and loaded with `TaskManager(include_defaults=False)`.

Questions run in batches (`Gsm8kRunner.run(indices)`, one lm-eval `simple_evaluate` call each,
`log_samples=True`), so the accuracy check can stop early. lm-eval re-seeds its few-shot sampler
per call, so two deployments given the same batches see byte-identical prompts; every question
records its prompt hash so paired comparisons can prove it.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import sys
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import yaml

from canary.config import DatasetConfig
from canary.errors import CanaryError
from canary.model.lm_eval_task import TASK_NAME, TEMPLATE_PATH
from canary.model.ref import local_model_dir

INVALID = "[invalid]"
"""What lm-eval's regex filters return when no answer can be read."""
STRICT, FLEXIBLE = "strict-match", "flexible-extract"


class Gsm8kError(CanaryError):
    """GSM8K could not be set up or run (missing data, lm-eval failure)."""


# --------------------------------------------------------------------------- data


@dataclass(frozen=True)
class DatasetSpec:
    """Resolved dataset fields for the task YAML, and what to call it in reports."""

    description: str
    fields: dict[str, Any]
    offline: bool


def _need_file(path: Path, what: str) -> Path:
    if not path.is_file():
        raise Gsm8kError(f"GSM8K {what} not found: {path}")
    return path.resolve()


def _mirror_parquet(directory: Path) -> tuple[Path, Path] | None:
    """(train, test) parquet files of a hub mirror (openai/gsm8k layout), if that is what it is."""
    for sub in (directory / "main", directory):
        train = sorted(sub.glob("train-*.parquet"))
        test = sorted(sub.glob("test-*.parquet"))
        if len(train) == 1 and len(test) == 1:
            return train[0].resolve(), test[0].resolve()
    return None


def resolve_dataset(config: DatasetConfig, model_source: str) -> DatasetSpec:
    """Where GSM8K comes from for this run, as lm-eval task fields."""
    if config.source == "hub":
        return DatasetSpec(
            description=f"hub {config.hub_id} (main)",
            fields={"dataset_path": config.hub_id, "dataset_name": "main"},
            offline=False,
        )
    if config.source == "builtin":
        model_dir = local_model_dir(model_source)
        if model_dir is None:
            raise Gsm8kError(
                f"dataset source builtin needs a local model directory, but the model source is {model_source!r}"
            )
        data = model_dir / "data"
        train, test = _need_file(data / "train.jsonl", "train split"), _need_file(data / "test.jsonl", "test split")
        return _json_spec(f"builtin {data}", train, test)
    # local
    if config.path is not None:
        directory = Path(config.path)
        if not directory.is_dir():
            raise Gsm8kError(f"GSM8K directory not found: {directory}")
        mirror = _mirror_parquet(directory)
        if mirror is not None:
            return DatasetSpec(
                description=f"local mirror {directory}",
                fields={
                    "dataset_path": "parquet",
                    "dataset_kwargs": {"data_files": {"train": str(mirror[0]), "test": str(mirror[1])}},
                },
                offline=True,
            )
        train = _need_file(directory / "train.jsonl", "train split")
        test = _need_file(directory / "test.jsonl", "test split")
        return _json_spec(f"local {directory}", train, test)
    if config.train_path is None or config.test_path is None:
        raise Gsm8kError("dataset source local needs `path` (a directory) or both `train_path` and `test_path`")
    train = _need_file(Path(config.train_path), "train file")
    test = _need_file(Path(config.test_path), "test file")
    return _json_spec(f"local {test}", train, test)


def _json_spec(description: str, train: Path, test: Path) -> DatasetSpec:
    return DatasetSpec(
        description=description,
        fields={"dataset_path": "json", "dataset_kwargs": {"data_files": {"train": str(train), "test": str(test)}}},
        offline=True,
    )


def task_config(dataset: DatasetSpec, num_fewshot: int, cache_dir: Path | None = None) -> dict[str, Any]:
    """The gsm8k task as a dict: the shared template with this dataset's fields."""
    template = yaml.safe_load(TEMPLATE_PATH.read_text(encoding="utf-8"))
    if not isinstance(template, dict) or template.get("task") != TASK_NAME:
        raise Gsm8kError(f"{TEMPLATE_PATH} is not the gsm8k task template")
    for key in ("dataset_path", "dataset_name", "dataset_kwargs"):
        template.pop(key, None)
    template.update(json.loads(json.dumps(dataset.fields)))  # deep copy
    if cache_dir is not None:
        template.setdefault("dataset_kwargs", {})["cache_dir"] = str(cache_dir)
    template["num_fewshot"] = num_fewshot
    return template


def write_task(include_dir: Path, dataset: DatasetSpec, num_fewshot: int) -> Path:
    """Write `include_dir/gsm8k.yaml` (datasets cache inside include_dir); return include_dir."""
    include_dir.mkdir(parents=True, exist_ok=True)
    config = task_config(dataset, num_fewshot, cache_dir=include_dir / "datasets-cache")
    (include_dir / f"{TASK_NAME}.yaml").write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    return include_dir


# --------------------------------------------------------------------------- results


@dataclass(frozen=True)
class QuestionResult:
    """One question as the deployment answered it."""

    doc_id: int
    question: str
    target: str
    prompt_hash: str
    output: str
    strict_answer: str
    flexible_answer: str
    strict_correct: bool
    flexible_correct: bool

    @property
    def unparseable(self) -> bool:
        """No number could be read from the output at all."""
        return self.flexible_answer == INVALID

    def to_json(self) -> dict[str, Any]:
        """A JSON-able dict (one line of accuracy_samples.jsonl)."""
        return asdict(self)


def questions_from_samples(samples: Sequence[dict[str, Any]]) -> list[QuestionResult]:
    """Merge lm-eval's logged samples (one per doc and filter) into one result per question."""
    by_doc: dict[int, dict[str, dict[str, Any]]] = {}
    for sample in samples:
        by_doc.setdefault(int(sample["doc_id"]), {})[str(sample["filter"])] = sample
    out: list[QuestionResult] = []
    for doc_id in sorted(by_doc):
        filters = by_doc[doc_id]
        missing = {STRICT, FLEXIBLE} - set(filters)
        if missing:
            raise Gsm8kError(f"lm-eval returned no {sorted(missing)} result for question {doc_id}")
        strict, flexible = filters[STRICT], filters[FLEXIBLE]
        doc = strict.get("doc") or {}
        out.append(
            QuestionResult(
                doc_id=doc_id,
                question=str(doc.get("question", "")),
                target=str(strict.get("target", "")),
                prompt_hash=str(strict.get("prompt_hash", "")),
                output=_first_text(strict.get("resps")),
                strict_answer=_first_text(strict.get("filtered_resps")),
                flexible_answer=_first_text(flexible.get("filtered_resps")),
                strict_correct=float(strict.get("exact_match", 0.0)) == 1.0,
                flexible_correct=float(flexible.get("exact_match", 0.0)) == 1.0,
            )
        )
    return out


def _first_text(value: Any) -> str:
    """lm-eval nests responses in lists ([[text]] or [text]); take the first string."""
    while isinstance(value, (list, tuple)):
        if not value:
            return ""
        value = value[0]
    return "" if value is None else str(value)


def mean_stderr(values: Sequence[bool]) -> float:
    """lm-eval's stderr of a mean (sample standard deviation / sqrt(n)); 0 below two values."""
    n = len(values)
    if n < 2:
        return 0.0
    mu = sum(values) / n
    return math.sqrt(sum((float(v) - mu) ** 2 for v in values) / (n - 1)) / math.sqrt(n)


def write_samples(path: Path, questions: Iterable[QuestionResult]) -> None:
    """Per-question outputs as jsonl, in run order."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as handle:
        for question in questions:
            handle.write(json.dumps(question.to_json(), ensure_ascii=False) + "\n")


# --------------------------------------------------------------------------- running


def completions_url(base_url: str) -> str:
    """`<base>/v1/completions` for a base URL given with or without `/v1`."""
    base = base_url.rstrip("/")
    if base.endswith("/v1"):
        base = base[: -len("/v1")]
    return f"{base}/v1/completions"


def _set_offline() -> None:
    """Keep `datasets` and the hub client from reaching for the network (local data only)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    # Modules already imported read the variables at import time: set their constants too.
    for module_name, names in (
        ("huggingface_hub.constants", ("HF_HUB_OFFLINE",)),
        ("datasets.config", ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")),
    ):
        module = sys.modules.get(module_name)
        for name in names:
            if module is not None and hasattr(module, name):
                setattr(module, name, True)


class Gsm8kRunner:
    """Runs batches of GSM8K questions through lm-eval's local-completions model."""

    def __init__(
        self,
        *,
        base_url: str,
        model: str,
        include_dir: Path,
        dataset: DatasetSpec,
        num_fewshot: int,
        num_concurrent: int,
        max_gen_toks: int,
        timeout_s: int = 300,
        log_path: Path | None = None,
    ) -> None:
        self.log_path = log_path
        if dataset.offline:
            _set_offline()
        self.include_dir = write_task(include_dir, dataset, num_fewshot)
        self.num_fewshot = num_fewshot
        self.max_gen_toks = max_gen_toks
        # lm-eval warns on every call about settings we pass on purpose; errors still show
        for name in ("lm-eval", "lm_eval", "datasets", "httpx"):
            logging.getLogger(name).setLevel(logging.ERROR)
        from lm_eval.models.openai_completions import LocalCompletionsAPI
        from lm_eval.tasks import TaskManager

        self._task_manager = TaskManager(include_defaults=False, include_path=str(self.include_dir))
        self._lm = LocalCompletionsAPI(
            base_url=completions_url(base_url),
            model=model,
            tokenizer_backend=None,
            tokenized_requests=False,
            num_concurrent=num_concurrent,
            max_gen_toks=max_gen_toks,
            max_retries=3,
            timeout=timeout_s,
        )

    @contextlib.contextmanager
    def _progress_to_log(self) -> Iterator[None]:
        """lm-eval's tqdm bars go to `log_path` (appended), not into the canary's progress lines."""
        if self.log_path is None:
            yield
            return
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("a", encoding="utf-8") as log, contextlib.redirect_stderr(log):
            yield

    def test_size(self) -> int:
        """Questions in the test split (loading it prints datasets' split bars: into the log too)."""
        with self._progress_to_log():
            task = self._task_manager.load([TASK_NAME])["tasks"][TASK_NAME]
            return len(task.test_docs())

    def run(self, indices: Sequence[int]) -> list[QuestionResult]:
        """Evaluate the test questions at `indices` (one lm-eval call); results sorted by doc id."""
        if not indices:
            return []
        from lm_eval import simple_evaluate

        try:
            with self._progress_to_log():
                results = simple_evaluate(
                    model=self._lm,
                    tasks=[TASK_NAME],
                    num_fewshot=self.num_fewshot,
                    samples={TASK_NAME: list(indices)},
                    log_samples=True,
                    task_manager=self._task_manager,
                    gen_kwargs={"temperature": 0.0, "max_gen_toks": self.max_gen_toks},
                    bootstrap_iters=0,
                    # no `verbosity`: it would install a handler bound to the redirected stderr
                )
        except Exception as exc:
            raise Gsm8kError(f"lm-eval failed: {type(exc).__name__}: {exc}") from exc
        if not results or "samples" not in results:
            raise Gsm8kError("lm-eval returned no samples")
        questions = questions_from_samples(results["samples"][TASK_NAME])
        got = sorted(q.doc_id for q in questions)
        if got != sorted(indices):
            raise Gsm8kError(f"lm-eval answered questions {got[:5]}... instead of {sorted(indices)[:5]}...")
        return questions
