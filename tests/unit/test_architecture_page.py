"""docs/architecture.md stays true: every file, module and symbol it names in code spans exists, it
gives the checks in the order the runner calls them, and it has one recipe per kind of plug-in.

A span is read as a path (it has a `/`: it must exist; `<name>` stands for any one name), a dotted
`canary.` name (the module must import and the rest be its attribute; `*` stands for any one name)
or code (every CamelCase or UPPER_CASE name in it, and every name called `name(`, must be defined
somewhere in canary/: a class, a function, an assignment or a field). Quoted strings and `<...>`
placeholders inside a span are not names.
"""

from __future__ import annotations

import ast
import importlib
import re
from functools import cache
from pathlib import Path

from canary.checks.base import check_order
from canary.paths import REPO_ROOT

PAGE = REPO_ROOT / "docs" / "architecture.md"
ROOTS = ("canary/", "tests/", "configs/", "docs/", "helm/", "docker/", "mk/")
SPAN = re.compile(r"`([^`\n]+)`")
PLACEHOLDER = re.compile(r"<[^<>]*>")
QUOTED = re.compile(r"\"[^\"]*\"|'[^']*'")
NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def spans(text: str) -> list[str]:
    """The code spans of a Markdown text (fenced lines and snippet includes are not spans)."""
    return SPAN.findall(text)


def path_problem(span: str) -> str | None:
    """Why a path span names nothing (None when it does); `<name>` matches any one name."""
    pattern = PLACEHOLDER.sub("*", span.split()[0].rstrip("/").rstrip(":"))
    if "#" in pattern:
        pattern = pattern.split("#", 1)[0]
    if any(True for _ in REPO_ROOT.glob(pattern)):
        return None
    return f"`{span}`: no such file or folder"


def dotted_problem(span: str) -> str | None:
    """Why a `canary.` span names nothing: its longest importable prefix lacks the rest."""
    name = span.split("(")[0].rstrip(".")
    if "*" in name:
        pattern = name.replace(".", "/")
        found = [p for p in REPO_ROOT.glob(pattern + ".py")] + [p for p in REPO_ROOT.glob(pattern + "/__init__.py")]
        return None if found else f"`{span}`: matches no module"
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            target: object = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for attr in parts[cut:]:
            if not hasattr(target, attr):
                return f"`{span}`: {'.'.join(parts[:cut])} has no {'.'.join(parts[cut:])}"
            target = getattr(target, attr)
        return None
    return f"`{span}`: no such module"


@cache
def defined_names() -> frozenset[str]:
    """Every name canary/ defines: classes, functions, assigned and annotated names (fields too)."""
    names: set[str] = set()
    for path in (REPO_ROOT / "canary").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                names.add(node.name)
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                names.add(node.target.id)
            elif isinstance(node, ast.Assign):
                names.update(t.id for t in node.targets if isinstance(t, ast.Name))
    return frozenset(names)


def code_names(span: str) -> list[str]:
    """The names a code span claims exist: CamelCase, UPPER_CASE and called ones."""
    code = PLACEHOLDER.sub("", QUOTED.sub('""', span))
    out = []
    for match in NAME.finditer(code):
        word = match.group()
        called = code[match.end() : match.end() + 1] == "("
        if called or any(c.isupper() for c in word):
            out.append(word)
    return out


def problems(text: str) -> list[str]:
    """What the page names that does not exist."""
    found: list[str] = []
    for span in spans(text):
        if span.startswith(ROOTS):
            problem = path_problem(span)
        elif span.startswith("canary."):
            problem = dotted_problem(span)
        elif "/" in span or ((":" in span or " " in span.strip()) and not any(c in span for c in "(=@.")):
            continue  # a command line, a URL, a value (`enabled: false`, `builtin:NAME`): not code
        else:
            missing = [n for n in code_names(span) if n not in defined_names()]
            problem = f"`{span}`: {', '.join(missing)} defined nowhere in canary/" if missing else None
        if problem:
            found.append(problem)
    return found


def test_every_name_on_the_page_exists() -> None:
    found = problems(PAGE.read_text(encoding="utf-8"))
    assert not found, "docs/architecture.md names what is not there:\n" + "\n".join(found)


def test_a_stale_name_is_caught() -> None:
    stale = (
        "Its position is its place in `CHECK_ORDER`; see `canary/checks/nowhere.py` and `canary.plan.waves.nothing`; "
        "`@register(order=...)` is real, `canary.checks.*.settings` too."
    )
    assert problems(stale) == [
        "`CHECK_ORDER`: CHECK_ORDER defined nowhere in canary/",
        "`canary/checks/nowhere.py`: no such file or folder",
        "`canary.plan.waves.nothing`: canary.plan.waves has no nothing",
    ]


def test_the_page_gives_the_checks_in_run_order() -> None:
    text = PAGE.read_text(encoding="utf-8")
    stage = text[text.index("3. **check**") : text.index("4. **judge**")]
    positions = [stage.index(name) for name in check_order()]
    assert positions == sorted(positions), f"the page's order is not {check_order()}"


def test_one_recipe_per_plug_in() -> None:
    headings = [line for line in PAGE.read_text(encoding="utf-8").splitlines() if line.startswith("## Adding")]
    assert headings == ["## Adding a check", "## Adding a target", "## Adding a metric", "## Adding a workload"]


def test_paths_with_placeholders_match_every_check_folder() -> None:
    assert path_problem("canary/checks/<name>/settings.py") is None
    assert path_problem("canary/checks/<name>/nothing.py") is not None
    assert Path(REPO_ROOT / "canary" / "checks" / "parity" / "settings.py").is_file()
