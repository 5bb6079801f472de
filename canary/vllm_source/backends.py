"""Attention backends as vLLM's source defines them: enum name -> class, kernel block sizes, KV dtypes, MLA.

Read statically (ast) from a SourceTree:
- the enum: `AttentionBackendEnum` in vllm/v1/attention/backends/registry.py, `NAME = "module.Class"`;
- kernel block sizes: the class's (or an ancestor's) `get_supported_kernel_block_sizes`. Every `return`
  of it is listed with the `if` conditions that guard it; one return and no condition: unconditional.
  `MultipleOf(n)` is `{multiple_of: n}`, a list of ints is `{allowed: [...]}`;
- KV cache dtypes: the `supported_kv_cache_dtypes` class attribute (and whether `supports_kv_cache_dtype`
  is overridden, which adds conditions the list does not show);
- MLA: the `is_mla` method along the MRO (`return True/False`).
A value that is not a literal is an `Unknown` with the reason, never a guess.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

from canary.vllm_source.pyast import (
    ClassRef,
    Derived,
    Known,
    ModuleIndex,
    NotStatic,
    Unknown,
    Where,
    assigned_literal,
    literal,
    returned_literal,
)
from canary.vllm_source.tree import SourceError, SourceTree

REGISTRY = "vllm/v1/attention/backends/registry.py"
ENUM_CLASS = "AttentionBackendEnum"
KERNEL_BLOCKS = "get_supported_kernel_block_sizes"
KV_DTYPES = "supported_kv_cache_dtypes"
KV_DTYPE_CHECK = "supports_kv_cache_dtype"
IS_MLA = "is_mla"
BASE_CLASS = "vllm.v1.attention.backend.AttentionBackend"
_CALLS = frozenset({"MultipleOf"})


@dataclass(frozen=True)
class KernelReturn:
    """One `return` of get_supported_kernel_block_sizes: its guards and the catalog form of its value."""

    guards: tuple[str, ...]
    value: dict[str, object] | None
    """{allowed: [...]} or {multiple_of: n}; None when not a literal this reader understands."""
    source: str
    """The returned expression as written."""

    def describe(self) -> str:
        cond = " and ".join(self.guards) if self.guards else "otherwise"
        return f"{'if ' + cond if self.guards else cond}: {self.source}"


@dataclass(frozen=True)
class KernelBlocks:
    """All returns of get_supported_kernel_block_sizes, in source order."""

    returns: tuple[KernelReturn, ...]
    where: Where

    @property
    def unconditional(self) -> dict[str, object] | None:
        """The value when there is exactly one, unguarded, literal return."""
        if len(self.returns) == 1 and not self.returns[0].guards:
            return self.returns[0].value
        return None

    def conditions(self) -> list[str]:
        """One line per return (empty when unconditional): what the catalog records as the branches."""
        return [] if self.unconditional is not None else [r.describe() for r in self.returns]


@dataclass
class DerivedBackend:
    """What the source says about one backend."""

    name: str
    class_path: str
    kernel_blocks: KernelBlocks | Unknown
    kv_cache_dtypes: Derived
    kv_dtype_check: Where | None
    """Where supports_kv_cache_dtype is overridden below AttentionBackend (None: the base's list check)."""
    mla: Derived
    notes: list[str] = field(default_factory=list)


def enum_members(tree: SourceTree) -> dict[str, str]:
    """AttentionBackendEnum: NAME -> "module.Class" (members without a class path are left out)."""
    module = ast.parse(tree.read(REGISTRY), filename=REGISTRY)
    for node in module.body:
        if isinstance(node, ast.ClassDef) and node.name == ENUM_CLASS:
            members: dict[str, str] = {}
            for stmt in node.body:
                if (
                    isinstance(stmt, ast.Assign)
                    and len(stmt.targets) == 1
                    and isinstance(stmt.targets[0], ast.Name)
                    and isinstance(stmt.value, ast.Constant)
                    and isinstance(stmt.value.value, str)
                    and stmt.value.value
                ):
                    members[stmt.targets[0].id] = stmt.value.value
            return members
    raise SourceError(f"{tree.label}: {REGISTRY} defines no class {ENUM_CLASS}")


def _catalog_form(value: object) -> dict[str, object] | None:
    """[MultipleOf(16)] -> {multiple_of: 16}; [16, 32] -> {allowed: [16, 32]}; anything else None."""
    if not isinstance(value, list) or not value:
        return None
    if len(value) == 1 and isinstance(value[0], tuple) and value[0][0] == "MultipleOf" and len(value[0]) == 2:
        return {"multiple_of": value[0][1]}
    if all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        return {"allowed": list(value)}
    return None


def _returns(body: list[ast.stmt], guards: tuple[str, ...]) -> list[tuple[tuple[str, ...], ast.Return]]:
    found: list[tuple[tuple[str, ...], ast.Return]] = []
    for stmt in body:
        if isinstance(stmt, ast.Return):
            found.append((guards, stmt))
        elif isinstance(stmt, ast.If):
            test = ast.unparse(stmt.test)
            found += _returns(stmt.body, (*guards, test))
            found += _returns(stmt.orelse, (*guards, f"not ({test})"))
        elif isinstance(stmt, ast.With | ast.For | ast.While):
            found += _returns(stmt.body, guards)
        elif isinstance(stmt, ast.Try):
            for part in (stmt.body, *(h.body for h in stmt.handlers), stmt.orelse, stmt.finalbody):
                found += _returns(part, guards)
    return found


def kernel_blocks(func: ast.FunctionDef | ast.AsyncFunctionDef, where: Where) -> KernelBlocks:
    """Every return of get_supported_kernel_block_sizes with its guards."""
    returns: list[KernelReturn] = []
    for guards, ret in _returns(func.body, ()):
        if ret.value is None:
            returns.append(KernelReturn(guards, None, "None"))
            continue
        try:
            value = _catalog_form(literal(ret.value, _CALLS))
        except NotStatic:
            value = None
        returns.append(KernelReturn(guards, value, ast.unparse(ret.value)))
    return KernelBlocks(tuple(returns), where)


def _where(cls: ClassRef, node: ast.stmt, member: str) -> Where:
    return Where(cls.path, f"{cls.node.name}.{member}", node.lineno)


def derive_backend(index: ModuleIndex, name: str, class_path: str) -> DerivedBackend:
    """Everything the catalog needs about one backend, from its class."""
    module, _, cls_name = class_path.rpartition(".")
    cls = index.find_class(module, cls_name)
    missing = Unknown(f"class {class_path} not found in {index.tree.label}")
    if cls is None:
        return DerivedBackend(name, class_path, missing, missing, None, missing)

    kernel: KernelBlocks | Unknown
    found = index.lookup(cls, KERNEL_BLOCKS)
    if found is None or not isinstance(found[1], ast.FunctionDef | ast.AsyncFunctionDef):
        kernel = Unknown(f"{class_path} has no {KERNEL_BLOCKS} along its bases")
    else:
        kernel = kernel_blocks(found[1], _where(found[0], found[1], KERNEL_BLOCKS))

    dtypes: Derived
    found = index.lookup(cls, KV_DTYPES)
    if found is None:
        dtypes = Unknown(f"{class_path} has no {KV_DTYPES} along its bases")
    else:
        where = _where(found[0], found[1], KV_DTYPES)
        try:
            dtypes = Known(assigned_literal(found[1]), where)
        except NotStatic as exc:
            dtypes = Unknown(f"{KV_DTYPES} is not a literal: {exc}", where)

    check = index.lookup(cls, KV_DTYPE_CHECK)
    check_where = None
    if check is not None and check[0].qualname != BASE_CLASS:
        check_where = _where(check[0], check[1], KV_DTYPE_CHECK)

    mla: Derived
    found = index.lookup(cls, IS_MLA)
    if found is None or not isinstance(found[1], ast.FunctionDef | ast.AsyncFunctionDef):
        mla = Unknown(f"{class_path} has no {IS_MLA} along its bases")
    else:
        where = _where(found[0], found[1], IS_MLA)
        try:
            value = returned_literal(found[1])
            mla = Known(value, where) if isinstance(value, bool) else Unknown(f"{IS_MLA} returns {value!r}", where)
        except NotStatic as exc:
            mla = Unknown(str(exc), where)
    return DerivedBackend(name, class_path, kernel, dtypes, check_where, mla)


def derive_backends(tree: SourceTree, names: list[str] | None = None) -> dict[str, DerivedBackend]:
    """The named backends (default: every enum member with a class path)."""
    members = enum_members(tree)
    index = ModuleIndex(tree)
    chosen = names if names is not None else sorted(members)
    derived: dict[str, DerivedBackend] = {}
    for name in chosen:
        if name not in members:
            unknown = Unknown(f"{ENUM_CLASS}.{name} is not in {tree.label} ({REGISTRY})")
            derived[name] = DerivedBackend(name, "", unknown, unknown, None, unknown)
        else:
            derived[name] = derive_backend(index, name, members[name])
    return derived
