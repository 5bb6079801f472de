"""Seeded generator of simple arithmetic word problems in GSM8K format.

Every row has the two GSM8K fields: ``question`` (a one-step word problem) and ``answer``
(a one-line worked solution followed by ``#### N``), e.g.::

    {"question": "Tom has 3 apples and buys 4 more. How many apples does Tom have now?",
     "answer": "3 + 4 = 7\\n#### 7"}

The numbers are small on purpose: a 2-layer model trained for a minute on two CPU cores can
learn them, so held-out accuracy sits well above zero and a broken KV cache shows as a collapse.
The train and test splits never share a question text. Output depends only on the spec (seed
included). Stdlib only: this module is imported by the controller venv, which has no torch.
"""

from __future__ import annotations

import argparse
import json
import random
import re
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

Operation = Literal["+", "-", "*"]
OPERATIONS: dict[str, Operation] = {"+": "+", "-": "-", "*": "*"}
"""Operation symbols as they appear in answers."""

NAMES: tuple[str, ...] = (
    "Tom", "Anna", "Ben", "Mia", "Sam", "Lily", "Max", "Emma",
    "Leo", "Zoe", "Jack", "Ella", "Noah", "Ruby", "Omar", "Sara",
)
ITEMS: tuple[str, ...] = (
    "apples", "pencils", "cookies", "marbles", "stickers", "books", "eggs", "cards",
    "toys", "shells", "coins", "candies", "flowers", "balloons", "stamps", "cupcakes",
)

ANSWER_PATTERN = re.compile(r"^(\d+) ([-+*]) (\d+) = (\d+)\n#### (\d+)$")
"""The exact shape of every answer this module writes."""


MAX_CONSECUTIVE_REPEATS = 10_000
"""Give up when this many draws in a row repeat known questions (the spec is too small)."""


@dataclass(frozen=True)
class Template:
    """A word-problem pattern: ``text`` has ``{name} {friend} {item} {a} {b}`` slots."""

    op: Operation
    text: str


TEMPLATES: tuple[Template, ...] = (
    Template("+", "{name} has {a} {item} and buys {b} more. How many {item} does {name} have now?"),
    Template("+", "There are {a} {item} in a box and {b} {item} in a bag. "
                  "How many {item} are there in total?"),
    Template("+", "{name} picked {a} {item} in the morning and {b} {item} in the afternoon. "
                  "How many {item} did {name} pick in all?"),
    Template("-", "{name} has {a} {item} and gives {b} of them to {friend}. "
                  "How many {item} does {name} have left?"),
    Template("-", "A shop had {a} {item} and sold {b} of them. How many {item} are left in the shop?"),
    Template("-", "{name} had {a} {item} and lost {b}. How many {item} does {name} have now?"),
    Template("*", "{name} buys {a} bags with {b} {item} in each bag. How many {item} does {name} buy?"),
    Template("*", "There are {a} boxes and each box holds {b} {item}. How many {item} are there?"),
)


@dataclass(frozen=True)
class DatasetSpec:
    """Everything the generated splits depend on (part of the model's cache key)."""

    seed: int = 0
    train_size: int = 4000
    test_size: int = 500
    max_addend: int = 10
    """Addition operands are drawn from 1..max_addend."""
    max_minuend: int = 15
    """Subtraction computes a - b with 2 <= a <= max_minuend and 1 <= b < a."""
    max_factor: int = 5
    """Multiplication computes a * b with 2 <= a <= max_factor ..."""
    max_multiplicand: int = 10
    """... and 2 <= b <= max_multiplicand."""


@dataclass(frozen=True)
class Problem:
    """One GSM8K-format row."""

    question: str
    answer: str

    def to_json(self) -> str:
        """Render as one JSON line with the GSM8K field names."""
        return json.dumps({"question": self.question, "answer": self.answer})


def apply_operation(op: Operation, a: int, b: int) -> int:
    """Compute ``a op b``."""
    if op == "+":
        return a + b
    if op == "-":
        return a - b
    return a * b


def sample_operands(op: Operation, rng: random.Random, spec: DatasetSpec) -> tuple[int, int]:
    """Draw two operands for ``op`` within the spec's ranges (subtraction stays positive)."""
    if op == "+":
        return rng.randint(1, spec.max_addend), rng.randint(1, spec.max_addend)
    if op == "-":
        a = rng.randint(2, spec.max_minuend)
        return a, rng.randint(1, a - 1)
    return rng.randint(2, spec.max_factor), rng.randint(2, spec.max_multiplicand)


def format_answer(op: Operation, a: int, b: int) -> str:
    """The worked solution: ``"a op b = c\\n#### c"``."""
    result = apply_operation(op, a, b)
    return f"{a} {op} {b} = {result}\n#### {result}"


def sample_problem(rng: random.Random, spec: DatasetSpec) -> Problem:
    """Draw one problem: a template, names, an item and operands."""
    template = rng.choice(TEMPLATES)
    name, friend = rng.sample(NAMES, 2)
    item = rng.choice(ITEMS)
    a, b = sample_operands(template.op, rng, spec)
    question = template.text.format(name=name, friend=friend, item=item, a=a, b=b)
    return Problem(question=question, answer=format_answer(template.op, a, b))


def _draw_unique(
    rng: random.Random, spec: DatasetSpec, count: int, taken: set[str]
) -> list[Problem]:
    """Draw ``count`` problems whose questions are not in ``taken`` (which is updated)."""
    problems: list[Problem] = []
    misses = 0
    while len(problems) < count:
        problem = sample_problem(rng, spec)
        if problem.question in taken:
            misses += 1
            if misses > MAX_CONSECUTIVE_REPEATS:
                raise ValueError(f"cannot draw {count} distinct questions from {spec}")
            continue
        misses = 0
        taken.add(problem.question)
        problems.append(problem)
    return problems


def generate_splits(spec: DatasetSpec) -> tuple[list[Problem], list[Problem]]:
    """Return ``(train, test)``: distinct questions within and across the two splits."""
    rng = random.Random(spec.seed)
    taken: set[str] = set()
    train = _draw_unique(rng, spec, spec.train_size, taken)
    test = _draw_unique(rng, spec, spec.test_size, taken)
    overlap = {p.question for p in train} & {p.question for p in test}
    assert not overlap, f"train/test overlap: {sorted(overlap)[:3]}"
    return train, test


def final_number(answer: str) -> int:
    """The ``N`` of the answer's closing ``#### N`` line."""
    _, sep, tail = answer.rpartition("#### ")
    if not sep or not tail.strip().isdigit():
        raise ValueError(f"answer does not end in '#### N': {answer!r}")
    return int(tail)


def check_answer(answer: str) -> bool:
    """True if the answer has our shape and both its arithmetic and ``#### N`` are right."""
    match = ANSWER_PATTERN.match(answer)
    if match is None:
        return False
    a, op, b, stated, final = match.groups()
    expected = apply_operation(OPERATIONS[op], int(a), int(b))
    return int(stated) == expected and int(final) == expected


def write_jsonl(path: Path, problems: Iterable[Problem]) -> None:
    """Write one JSON object per line (UTF-8, trailing newline)."""
    path.write_text("".join(p.to_json() + "\n" for p in problems), encoding="utf-8")


def read_jsonl(path: Path) -> list[Problem]:
    """Read rows written by :func:`write_jsonl` (or any GSM8K-format jsonl)."""
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]
    return [Problem(question=row["question"], answer=row["answer"]) for row in rows]


def write_splits(out_dir: Path, spec: DatasetSpec) -> tuple[Path, Path]:
    """Generate both splits into ``out_dir/train.jsonl`` and ``out_dir/test.jsonl``."""
    train, test = generate_splits(spec)
    out_dir.mkdir(parents=True, exist_ok=True)
    train_path, test_path = out_dir / "train.jsonl", out_dir / "test.jsonl"
    write_jsonl(train_path, train)
    write_jsonl(test_path, test)
    return train_path, test_path


def spec_dict(spec: DatasetSpec) -> dict[str, int]:
    """The spec as a plain dict (for manifests and cache keys)."""
    return asdict(spec)


def main(argv: Sequence[str] | None = None) -> int:
    """CLI: ``python -m canary.model.dataset --out DIR [--seed N] [--train-size N] ...``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--out", type=Path, required=True, help="directory for the jsonl files")
    parser.add_argument("--seed", type=int, default=DatasetSpec.seed)
    parser.add_argument("--train-size", type=int, default=DatasetSpec.train_size)
    parser.add_argument("--test-size", type=int, default=DatasetSpec.test_size)
    args = parser.parse_args(argv)
    spec = DatasetSpec(seed=args.seed, train_size=args.train_size, test_size=args.test_size)
    for path in write_splits(args.out, spec):
        print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
