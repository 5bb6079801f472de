"""canary's import structure, read from the source (ast): no import cycle, and canary.export.report and
canary.export.prometheus.publish never import each other (a run's reports and its exports are two views of the
result model; the orchestration calls both).

Every import counts, also those inside functions: an import deferred to dodge a cycle is still one.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from fnmatch import fnmatchcase
from pathlib import Path

from canary import LAYERS, SEPARATE
from canary.paths import REPO_ROOT

CANARY = REPO_ROOT / "canary"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO_ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES: dict[str, Path] = {module_name(p): p for p in sorted(CANARY.rglob("*.py"))}


def _resolve(name: str) -> str | None:
    """The canary module an imported name lands in (the longest existing module prefix)."""
    parts = name.split(".")
    while parts:
        candidate = ".".join(parts)
        if candidate in MODULES:
            return candidate
        parts.pop()
    return None


def imports_of(module: str) -> Iterator[str]:
    """The canary modules a module imports (anywhere in it)."""
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            targets = [f"{base}.{alias.name}" for alias in node.names]
        else:
            continue
        for target in targets:
            found = _resolve(target)
            if found is not None and found != module:
                yield found


GRAPH: dict[str, set[str]] = {module: set(imports_of(module)) for module in MODULES}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for succ in sorted(graph.get(node, ())):
            if succ not in index:
                visit(succ)
                low[node] = min(low[node], low[succ])
            elif succ in on_stack:
                low[node] = min(low[node], index[succ])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


def covers(prefix: str, module: str) -> bool:
    """Whether a LAYERS prefix covers a module: the module or a module below it, `*` any one name."""
    wanted, parts = prefix.split("."), module.split(".")
    return len(parts) >= len(wanted) and all(fnmatchcase(p, w) for p, w in zip(parts, wanted, strict=False))


def layer_of(module: str) -> int:
    """Index of the layer whose longest prefix covers the module (KeyError when none does)."""
    best: tuple[int, int] | None = None
    for index, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if covers(prefix, module) and (best is None or len(prefix) > best[1]):
                best = (index, len(prefix))
    if best is None:
        raise KeyError(module)
    return best[0]


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    """Every import from a module to a module of a higher layer, as 'a (layer) -> b (layer)'."""
    return [
        f"{a} ({LAYERS[layer_of(a)][0]}) imports {b} ({LAYERS[layer_of(b)][0]})"
        for a in sorted(graph)
        for b in sorted(graph[a])
        if layer_of(b) > layer_of(a)
    ]


def _within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def test_every_module_has_a_layer() -> None:
    missing = []
    for module in MODULES:
        try:
            layer_of(module)
        except KeyError:
            missing.append(module)
    assert not missing, f"modules in no layer of canary.LAYERS: {missing}"


def test_no_module_imports_a_layer_above_its_own() -> None:
    found = upward_imports(GRAPH)
    assert not found, "upward imports (see canary.LAYERS):\n" + "\n".join(found)


def test_the_layer_test_catches_an_upward_import() -> None:
    # One seeded edge: the plan importing a check (the inversion canary.plan.waves once had).
    seeded = {module: set(targets) for module, targets in GRAPH.items()}
    seeded["canary.plan.waves"].add("canary.checks.parity.prompts")
    assert upward_imports(seeded) == ["canary.plan.waves (plan) imports canary.checks.parity.prompts (checks)"]


def test_a_check_folders_settings_sit_in_the_config_layer_and_import_only_below_it() -> None:
    config = layer_of("canary.config")
    settings = [m for m in MODULES if covers("canary.checks.*.settings", m)]
    assert "canary.checks.throughput.settings" in settings
    assert {layer_of(m) for m in settings} == {config}
    assert layer_of("canary.checks.throughput.check") > config
    assert layer_of("canary.checks.settingsx") > config  # a wildcard covers one name, not a prefix of one
    assert not [m for m in settings for t in GRAPH[m] if layer_of(t) > config]


def test_the_checks_package_imports_nothing() -> None:
    # canary.config imports the check folders' settings modules: their package must not import the checks
    assert GRAPH["canary.checks"] == set()


def test_a_workload_kinds_settings_sit_in_the_config_layer_and_its_package_imports_nothing() -> None:
    config = layer_of("canary.config")
    settings = [m for m in MODULES if covers("canary.load.workloads.*.settings", m)]
    assert "canary.load.workloads.trace.settings" in settings
    assert {layer_of(m) for m in settings} == {config}
    assert layer_of("canary.load.workloads.trace.requests") == layer_of("canary.load")
    assert not [m for m in settings for t in GRAPH[m] if layer_of(t) > config]
    assert GRAPH["canary.load.workloads"] == set() and GRAPH["canary.load"] == set()


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_the_graph_sees_deferred_and_relative_imports() -> None:
    assert "canary.export.prometheus.publish" in GRAPH["canary.run.orchestrate"]  # imported inside run_and_report
    assert "canary.judge.verdicts" in GRAPH["canary.judge.results"]


def test_separate_packages_never_import_each_other() -> None:
    crossing = [
        f"{a} imports {b}"
        for a, targets in GRAPH.items()
        for b in targets
        for x, y in SEPARATE + tuple((q, p) for p, q in SEPARATE)
        if _within(a, x) and _within(b, y)
    ]
    assert not crossing, crossing


def test_canary_has_no_import_cycle() -> None:
    found = cycles(GRAPH)
    assert not found, "import cycles in canary/: " + "; ".join(" <-> ".join(c) for c in found)


def test_the_package_root_holds_at_most_five_modules() -> None:
    root = sorted(p.name for p in CANARY.glob("*.py"))
    assert len(root) <= 5, f"canary/ root modules: {root}: put new ones in the stage they belong to"
