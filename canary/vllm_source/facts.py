"""Single facts read from vLLM's source: CLI flags, environment variables, metric names, config fields.

Each reader returns where the fact is defined (a `Where`), or None when the source does not define it.
"""

from __future__ import annotations

import ast

from canary.vllm_source.pyast import ClassRef, ModuleIndex, Where, functions
from canary.vllm_source.tree import SourceTree

ENGINE_ARGS = "vllm/engine/arg_utils.py"
FRONTEND_MODULE = "vllm.entrypoints.common.cli_args"
FRONTEND_CLASS = "FrontendArgs"
ENVS = "vllm/envs.py"
ENV_TABLE = "environment_variables"


def _module(tree: SourceTree, path: str) -> ast.Module:
    return ast.parse(tree.read(path), filename=path)


def engine_flags(tree: SourceTree) -> dict[str, Where]:
    """Flags added by literal name in vllm/engine/arg_utils.py: `group.add_argument("--block-size", ...)`."""
    flags: dict[str, Where] = {}
    for qualname, func in functions(_module(tree, ENGINE_ARGS)):
        for node in ast.walk(func):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "add_argument":
                for arg in node.args:
                    if isinstance(arg, ast.Constant) and isinstance(arg.value, str) and arg.value.startswith("--"):
                        flags.setdefault(arg.value, Where(ENGINE_ARGS, qualname, node.lineno))
    return flags


def _fields(index: ModuleIndex, cls: ClassRef) -> dict[str, Where]:
    found: dict[str, Where] = {}
    for klass in reversed(index.mro(cls)):
        for node in klass.node.body:
            if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                found[node.target.id] = Where(klass.path, f"{klass.node.name}.{node.target.id}", node.lineno)
    return found


def _builds_flags_from_fields(func: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """Whether a function adds `f"--{key.replace('_', '-')}"` arguments (one flag per dataclass field)."""
    for node in ast.walk(func):
        if isinstance(node, ast.JoinedStr) and len(node.values) == 2:
            head, value = node.values
            if (
                isinstance(head, ast.Constant)
                and head.value == "--"
                and isinstance(value, ast.FormattedValue)
                and ast.unparse(value.value).endswith(".replace('_', '-')")
            ):
                return True
    return False


def frontend_flags(tree: SourceTree) -> dict[str, Where]:
    """Flags of the OpenAI frontend: one `--field-name` per FrontendArgs field, when its add_cli_args
    builds them that way (else none: the rule no longer holds and nothing is claimed)."""
    index = ModuleIndex(tree)
    cls = index.find_class(FRONTEND_MODULE, FRONTEND_CLASS)
    if cls is None:
        return {}
    found = index.lookup(cls, "add_cli_args")
    if found is None or not isinstance(found[1], ast.FunctionDef) or not _builds_flags_from_fields(found[1]):
        return {}
    return {"--" + name.replace("_", "-"): where for name, where in _fields(index, cls).items()}


def cli_flags(tree: SourceTree) -> dict[str, Where]:
    """Every `vllm serve` flag the source defines by name (engine and frontend)."""
    return {**frontend_flags(tree), **engine_flags(tree)}


def env_vars(tree: SourceTree) -> dict[str, Where]:
    """Keys of vllm/envs.py's `environment_variables` table (the variables vLLM reads)."""
    for node in _module(tree, ENVS).body:
        target: ast.expr | None = None
        if isinstance(node, ast.AnnAssign):
            target, value = node.target, node.value
        elif isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
        if isinstance(target, ast.Name) and target.id == ENV_TABLE and isinstance(value, ast.Dict):
            return {
                key.value: Where(ENVS, ENV_TABLE, key.lineno)
                for key in value.keys
                if isinstance(key, ast.Constant) and isinstance(key.value, str)
            }
    return {}


class _ConstantFinder(ast.NodeVisitor):
    def __init__(self, path: str, value: str) -> None:
        self.path, self.value = path, value
        self.stack: list[str] = []
        self.found: list[Where] = []

    def _scope(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) -> None:
        self.stack.append(node.name)
        self.generic_visit(node)
        self.stack.pop()

    visit_FunctionDef = visit_AsyncFunctionDef = visit_ClassDef = _scope

    def visit_Constant(self, node: ast.Constant) -> None:
        if node.value == self.value:
            self.found.append(Where(self.path, ".".join(self.stack) or "<module>", node.lineno))


def string_constants(tree: SourceTree, value: str, prefix: str = "vllm/") -> list[Where]:
    """Where a string constant equal to `value` occurs (e.g. a metric name `vllm:prompt_tokens`)."""
    found: list[Where] = []
    for path in tree.paths(prefix):
        text = tree.read(path)
        if f'"{value}"' in text or f"'{value}'" in text:
            finder = _ConstantFinder(path, value)
            finder.visit(ast.parse(text, filename=path))
            found += finder.found
    return found


def class_fields(tree: SourceTree, module: str, name: str) -> dict[str, Where]:
    """Annotated fields of a class and its bases (a dataclass's fields)."""
    index = ModuleIndex(tree)
    cls = index.find_class(module, name)
    return _fields(index, cls) if cls is not None else {}


def method(tree: SourceTree, module: str, cls_name: str, name: str) -> tuple[ast.FunctionDef, Where] | None:
    """A method of a class (along its bases) and where it is."""
    index = ModuleIndex(tree)
    cls = index.find_class(module, cls_name)
    found = index.lookup(cls, name) if cls is not None else None
    if found is None or not isinstance(found[1], ast.FunctionDef):
        return None
    return found[1], Where(found[0].path, f"{found[0].node.name}.{name}", found[1].lineno)
