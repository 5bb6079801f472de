"""Static reading of Python modules in a SourceTree: classes, their bases, attributes and constant values.

Nothing is imported or executed. A value is either derived (a `Known`) or not (an `Unknown` with the reason
and the place), never guessed.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from canary.vllm_source.tree import SourceTree


@dataclass(frozen=True)
class Where:
    """A place in the source: file, class and member (for messages that cite it)."""

    path: str
    qualname: str
    line: int

    def __str__(self) -> str:
        return f"{self.path}:{self.line} {self.qualname}"


@dataclass(frozen=True)
class Known:
    """A value read from the source."""

    value: object
    where: Where


@dataclass(frozen=True)
class Unknown:
    """A value the source does not state statically, and why."""

    reason: str
    where: Where | None = None


Derived = Known | Unknown


@dataclass(frozen=True)
class ClassRef:
    """A class definition found in a module."""

    module: str
    path: str
    node: ast.ClassDef

    @property
    def qualname(self) -> str:
        return f"{self.module}.{self.node.name}"


class NotStatic(Exception):
    """An expression that is not a literal the reader understands."""


class ModuleIndex:
    """Parsed modules of a SourceTree, by dotted name."""

    def __init__(self, tree: SourceTree) -> None:
        self.tree = tree
        self._parsed: dict[str, ast.Module | None] = {}

    def path_of(self, module: str) -> str | None:
        """vllm.a.b -> vllm/a/b.py or vllm/a/b/__init__.py (None: not in the tree)."""
        base = module.replace(".", "/")
        for candidate in (f"{base}.py", f"{base}/__init__.py"):
            if self.tree.has(candidate):
                return candidate
        return None

    def module(self, module: str) -> ast.Module | None:
        """The parsed module (None: not in the tree)."""
        if module not in self._parsed:
            path = self.path_of(module)
            self._parsed[module] = ast.parse(self.tree.read(path), filename=path) if path else None
        return self._parsed[module]

    def find_class(self, module: str, name: str, _depth: int = 0) -> ClassRef | None:
        """A class defined in, or imported into, a module (follows `from x import Name`)."""
        tree = self.module(module)
        path = self.path_of(module)
        if tree is None or path is None or _depth > 8:
            return None
        for node in tree.body:
            if isinstance(node, ast.ClassDef) and node.name == name:
                return ClassRef(module, path, node)
        target = self._imported(tree, module, name)
        if target is not None:
            return self.find_class(target[0], target[1], _depth + 1)
        return None

    def _imported(self, tree: ast.Module, module: str, name: str) -> tuple[str, str] | None:
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                for alias in node.names:
                    if (alias.asname or alias.name) == name:
                        return _absolute(module, node, self.path_of(module) or ""), alias.name
        return None

    def bases(self, cls: ClassRef) -> list[ClassRef]:
        """The resolvable base classes (names imported from outside the tree, e.g. Enum, are dropped)."""
        found: list[ClassRef] = []
        for base in cls.node.bases:
            name = base.id if isinstance(base, ast.Name) else base.attr if isinstance(base, ast.Attribute) else None
            if name is None:
                continue
            ref = self.find_class(cls.module, name)
            if ref is not None:
                found.append(ref)
        return found

    def mro(self, cls: ClassRef) -> list[ClassRef]:
        """C3 linearisation over the resolvable bases."""
        return _c3(cls, self)

    def lookup(self, cls: ClassRef, member: str) -> tuple[ClassRef, ast.stmt] | None:
        """The first definition of a member (method or class attribute) along the MRO."""
        for klass in self.mro(cls):
            for node in klass.node.body:
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == member:
                    return klass, node
                if isinstance(node, ast.Assign) and any(
                    isinstance(t, ast.Name) and t.id == member for t in node.targets
                ):
                    return klass, node
                if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id == member:
                    return klass, node
        return None


def _absolute(module: str, node: ast.ImportFrom, path: str) -> str:
    if not node.level:
        return node.module or ""
    package = module.split(".")
    if not path.endswith("__init__.py"):
        package = package[:-1]
    package = package[: len(package) - (node.level - 1)]
    return ".".join(package + ([node.module] if node.module else []))


def _c3(cls: ClassRef, index: ModuleIndex, depth: int = 0) -> list[ClassRef]:
    if depth > 20:
        return [cls]
    bases = index.bases(cls)
    sequences = [_c3(b, index, depth + 1) for b in bases] + [list(bases)]
    result = [cls]
    sequences = [list(s) for s in sequences if s]
    while sequences:
        for seq in sequences:
            head = seq[0]
            if not any(head.qualname in (c.qualname for c in other[1:]) for other in sequences):
                break
        else:  # inconsistent hierarchy: fall back to depth-first order
            seen = {c.qualname for c in result}
            return result + [c for s in sequences for c in s if c.qualname not in seen]
        result.append(head)
        sequences = [[c for c in s if c.qualname != head.qualname] for s in sequences]
        sequences = [s for s in sequences if s]
    return result


def literal(node: ast.expr, calls: frozenset[str] = frozenset()) -> object:
    """A literal (constants, lists, tuples, sets, dicts, unary minus, attribute names such as torch.float16,
    and calls named in `calls`, e.g. MultipleOf(16) -> ('MultipleOf', 16)); NotStatic otherwise."""
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.List | ast.Tuple | ast.Set):
        return [literal(e, calls) for e in node.elts]
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        value = literal(node.operand, calls)
        if isinstance(value, int | float):
            return -value
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
        return f"{node.value.id}.{node.attr}"
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in calls and not node.keywords:
        return (node.func.id, *(literal(a, calls) for a in node.args))
    raise NotStatic(ast.unparse(node))


def returned_literal(func: ast.FunctionDef | ast.AsyncFunctionDef, calls: frozenset[str] = frozenset()) -> object:
    """The literal a function returns when its body is (a docstring and) one `return <literal>`."""
    body = [s for s in func.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
    if len(body) != 1 or not isinstance(body[0], ast.Return) or body[0].value is None:
        raise NotStatic(f"{func.name} is not a single `return <literal>` ({len(body)} statements)")
    return literal(body[0].value, calls)


def assigned_literal(node: ast.stmt, calls: frozenset[str] = frozenset()) -> object:
    """The literal of `x = <literal>` / `x: T = <literal>`."""
    value = node.value if isinstance(node, ast.Assign | ast.AnnAssign) else None
    if value is None:
        raise NotStatic("not an assignment with a value")
    return literal(value, calls)


def functions(tree: ast.Module) -> list[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]]:
    """(qualified name, node) of every function and method in a module."""
    found: list[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]] = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                found.append((prefix + child.name, child))
                visit(child, prefix + child.name + ".")
            elif isinstance(child, ast.ClassDef):
                visit(child, prefix + child.name + ".")
            else:
                visit(child, prefix)

    visit(tree, "")
    return found
