"""Log and error message templates in a vLLM source tree, filled into sample lines a regex can be tried on.

A template is a message as the source writes it: a logger call's format string with its `%` arguments
(`logger.info("Using %s backend.", selected_backend)`), an f-string, a `"..." % args` expression or a
plain string constant. Its placeholders are filled from candidate values to build sample lines, so a
regex the canary matches against real logs can be proven to match what this vLLM really prints.
"""

from __future__ import annotations

import ast
import itertools
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from canary.vllm_source.tree import SourceTree

LOG_METHODS = frozenset(
    {"debug", "info", "warning", "warn", "error", "exception", "critical"}
    | {f"{m}_once" for m in ("debug", "info", "warning", "error")}
)
_PERCENT = re.compile(r"%(?:\([^)]*\))?[-#0 +]*(?:\*|\d+)?(?:\.\d+)?([diouxXeEfFgGcrsa%])")
NUMERIC_SAMPLE = {"d": "128", "i": "128", "u": "128", "f": "12.34", "F": "12.34", "e": "1.23e+01", "g": "12.34"}
DEFAULT_CANDIDATES = ("FLASHINFER", "AttentionBackendEnum.FLASHINFER", "GPU", "128", "1,234", "x")
MAX_FILLED = 4
"""Placeholders beyond this many are filled with the first candidate only (keeps the product small)."""


@dataclass(frozen=True)
class Placeholder:
    """A value the message is formatted with: its expression in the source and its conversion."""

    expr: str
    conversion: str
    """`s`, `r`, `d`, `f`... for %-formats; `fstring` for f-string fields."""


Part = str | Placeholder


@dataclass(frozen=True)
class Template:
    """One message in the source."""

    parts: tuple[Part, ...]
    path: str
    function: str
    line: int

    @property
    def literal(self) -> str:
        """The message with placeholders shown as `{...}`."""
        return "".join(p if isinstance(p, str) else "{" + p.expr + "}" for p in self.parts)

    @property
    def placeholders(self) -> list[Placeholder]:
        return [p for p in self.parts if isinstance(p, Placeholder)]

    def where(self) -> str:
        """file:line function, for assertion messages."""
        return f"{self.path}:{self.line} {self.function or '<module>'}"

    def samples(self, candidates: Sequence[str] = DEFAULT_CANDIDATES) -> Iterator[str]:
        """Sample lines: every combination of candidates for the first MAX_FILLED placeholders
        (numeric %-conversions get a number)."""
        holes = self.placeholders
        choices: list[Sequence[str]] = []
        for index, hole in enumerate(holes):
            if hole.conversion in NUMERIC_SAMPLE:
                choices.append([NUMERIC_SAMPLE[hole.conversion]])
            elif index < MAX_FILLED:
                choices.append(candidates)
            else:
                choices.append(candidates[:1])
        for combo in itertools.product(*choices):
            values = iter(combo)
            yield "".join(p if isinstance(p, str) else next(values) for p in self.parts)


def _percent_parts(text: str, args: Sequence[ast.expr]) -> tuple[Part, ...]:
    parts: list[Part] = []
    position, arg_index = 0, 0
    for match in _PERCENT.finditer(text):
        parts.append(text[position : match.start()])
        if match.group(1) == "%":
            parts.append("%")
        else:
            expr = ast.unparse(args[arg_index]) if arg_index < len(args) else "?"
            parts.append(Placeholder(expr, match.group(1)))
            arg_index += 1
        position = match.end()
    parts.append(text[position:])
    return tuple(p for p in parts if p != "")


def _fstring_parts(node: ast.JoinedStr) -> tuple[Part, ...]:
    parts: list[Part] = []
    for value in node.values:
        if isinstance(value, ast.Constant) and isinstance(value.value, str):
            parts.append(value.value)
        elif isinstance(value, ast.FormattedValue):
            parts.append(Placeholder(ast.unparse(value.value), "fstring"))
    return tuple(parts)


def _concat(node: ast.expr) -> tuple[Part, ...] | None:
    """A string expression: constant, f-string, or `+` of those."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return (node.value,)
    if isinstance(node, ast.JoinedStr):
        return _fstring_parts(node)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _concat(node.left), _concat(node.right)
        if left is not None and right is not None:
            return left + right
    return None


def _formatted(parts: tuple[Part, ...], args: Sequence[ast.expr]) -> tuple[Part, ...]:
    """Apply %-formatting to the literal parts of a template (args in order)."""
    text_only = all(isinstance(p, str) for p in parts)
    if text_only:
        return _percent_parts("".join(p for p in parts if isinstance(p, str)), args)
    return parts


class _Collector(ast.NodeVisitor):
    def __init__(self, path: str) -> None:
        self.path = path
        self.stack: list[str] = []
        self.found: list[Template] = []
        self.consumed: set[int] = set()

    def _add(self, parts: tuple[Part, ...], node: ast.AST) -> None:
        self.found.append(Template(parts, self.path, ".".join(self.stack), getattr(node, "lineno", 0)))

    def _scope(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) -> None:
        self.stack.append(node.name)
        self.generic_visit(node)
        self.stack.pop()

    visit_FunctionDef = visit_AsyncFunctionDef = visit_ClassDef = _scope

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr in LOG_METHODS and node.args:
            parts = _concat(node.args[0])
            if parts is not None:
                self._add(_formatted(parts, node.args[1:]), node)
                self._consume(node.args[0])
        self.generic_visit(node)

    def visit_BinOp(self, node: ast.BinOp) -> None:
        if isinstance(node.op, ast.Mod):
            parts = _concat(node.left)
            if parts is not None:
                right = node.right
                args = right.elts if isinstance(right, ast.Tuple) else [right]
                self._add(_formatted(parts, args), node)
                self._consume(node.left)
        self.generic_visit(node)

    def _consume(self, node: ast.AST) -> None:
        self.consumed.update(id(n) for n in ast.walk(node))

    def visit_JoinedStr(self, node: ast.JoinedStr) -> None:
        if id(node) not in self.consumed:
            self._add(_fstring_parts(node), node)
        # the f-string's own constants are parts, not messages

    def visit_Constant(self, node: ast.Constant) -> None:
        if isinstance(node.value, str) and id(node) not in self.consumed:
            self._add((node.value,), node)


def templates(tree: SourceTree, needle: str, prefix: str = "vllm/") -> list[Template]:
    """Every template under `prefix` whose literal text contains `needle` (files are prefiltered by it)."""
    found: list[Template] = []
    for path in tree.paths(prefix):
        text = tree.read(path)
        if not _may_hold(needle, text):
            continue
        found += [t for t in _file_templates(path, text) if needle in t.literal or _in_literal_parts(needle, t)]
    return found


_PARSED: dict[tuple[str, int], list[Template]] = {}


def _file_templates(path: str, text: str) -> list[Template]:
    """Every template of one file (parsed once per process per file content)."""
    key = (path, hash(text))
    if key not in _PARSED:
        collector = _Collector(path)
        collector.visit(ast.parse(text, filename=path))
        _PARSED[key] = collector.found
    return _PARSED[key]


_JOINT = re.compile(r"""["']\s*(?:#[^\n]*)?\n\s*[rbfuRBFU]{0,2}["']""")
"""Where implicitly concatenated string literals meet across a line break."""


def _may_hold(needle: str, text: str) -> bool:
    """Whether a file may hold the needle, also split over implicitly concatenated literals."""
    return needle in text or needle in _JOINT.sub("", text)


def _in_literal_parts(needle: str, template: Template) -> bool:
    return needle in "".join(p for p in template.parts if isinstance(p, str))


@dataclass(frozen=True)
class Hit:
    """A template whose sample line the regex matches."""

    template: Template
    sample: str
    match: re.Match[str]


def matching(
    regex: re.Pattern[str],
    found: Sequence[Template],
    candidates: Sequence[str] = DEFAULT_CANDIDATES,
    groups: tuple[str, ...] | None = None,
) -> list[Hit]:
    """The templates a regex matches (first matching sample of each; with `groups`, the first whose
    match captures exactly those)."""
    hits: list[Hit] = []
    for template in found:
        for sample in template.samples(candidates):
            match = regex.search(sample)
            if match is not None and (groups is None or match.groups() == groups):
                hits.append(Hit(template, sample, match))
                break
    return hits


_META = set("[](){}.*+?^$|")
_QUANTIFIERS = set("*?{")


def literal_needle(pattern: str) -> str:
    """The longest run of literal text outside groups in a regex (escaped punctuation counts as literal;
    a character made optional by a quantifier does not): a prefilter for the messages it can match.
    Only a prefilter: a needle taken from one branch of a top-level `|` would miss the other branches
    (a visible false failure, never a false pass)."""
    runs: list[str] = []
    current = ""
    depth = 0
    index = 0
    while index < len(pattern):
        char = pattern[index]
        if char == "\\" and index + 1 < len(pattern):
            nxt = pattern[index + 1]
            if depth == 0 and not nxt.isalnum():
                current += nxt
            elif depth == 0:
                runs.append(current)
                current = ""
            index += 2
            continue
        if char in _QUANTIFIERS and current:
            current = current[:-1]
        if char == "(":
            depth += 1
        elif char == ")":
            depth = max(0, depth - 1)
        if char in _META:
            runs.append(current)
            current = ""
            if char == "[":  # skip a character class
                end = pattern.find("]", index + 2)
                index = end if end > 0 else index
        elif depth == 0:
            current += char
        index += 1
    runs.append(current)
    return max(runs, key=len).strip()
