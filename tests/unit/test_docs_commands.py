"""The docs' shell commands are run, so a renamed flag, config, key or make target breaks the build,
not the user. Every fenced bash block of README.md and docs/operations/*.md (with the pages they
include, such as helm/README.md) is read line by line:

- `canary ...` (also `.venv/bin/canary`, `python -m canary`): parsed by the real CLI parser. A
  concrete `plan`, `run` or `render-values` then plans its config with its `--set`s and `--only`s
  through the CLI (`canary plan`: a run would start engines); every other concrete command, and
  every synopsis line (placeholders such as CONFIG, `[--flag ...]`, `a | b`), is checked against its
  command's `--help`: the command exists, and so does every flag it names.
- `make TARGET [VAR=value]`: `make -n` knows the target.
- every `configs/*.yaml` a command names exists (a plan would fail without it, a synopsis too).

Also: the README's docs table lists every page under docs/, and docs/operations/configs.md every
config in configs/.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import re
import shlex
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from canary import cli
from canary.paths import REPO_ROOT

README = REPO_ROOT / "README.md"
DOCS = REPO_ROOT / "docs"
PAGES = (README, *sorted((DOCS / "operations").glob("*.md")))
BASH_BLOCK = re.compile(r"^```(?:bash|sh|shell)\n(.*?)^```", re.M | re.S)
INCLUDE = re.compile(r'^--8<-- "([^"]+)"$', re.M)
CANARY_PREFIXES = (("canary",), (".venv/bin/canary",), ("python", "-m", "canary"), (".venv/bin/python", "-m", "canary"))
PLACEHOLDER = re.compile(r"^[A-Z][A-Z0-9_]*$|[\[\]|]|\.\.\.")
PLANNED = frozenset({"plan", "run", "render-values"})
"""Commands whose config is planned through `canary plan` (running them would start or write things)."""


@dataclass(frozen=True)
class Command:
    page: str
    line: str
    argv: tuple[str, ...]

    def __str__(self) -> str:
        return f"{self.page}: {self.line}"


def _text(page: Path) -> str:
    """A page with the files it includes (`--8<-- "path"`, the mkdocs snippets syntax) inlined."""
    text = page.read_text(encoding="utf-8")
    return INCLUDE.sub(lambda m: (REPO_ROOT / m.group(1)).read_text(encoding="utf-8"), text)


def _lines(block: str) -> list[str]:
    """A block's command lines: heredoc bodies dropped, continuations joined, pipes (into a program),
    `&&` and `;` cut."""
    block = re.sub(r"<<'?(\w+)'?\n.*?^\1\n", "\n", block, flags=re.M | re.S).replace("\\\n", " ")
    out = []
    for raw in block.splitlines():
        for part in re.split(r"\s(?:\|(?=\s+[a-z])|&&|;)\s", raw):  # `--a | --b` is a synopsis, not a pipe
            line = part.strip()
            if line and not line.startswith("#"):
                out.append(line)
    return out


def documented() -> list[Command]:
    commands = []
    for page in PAGES:
        for block in BASH_BLOCK.findall(_text(page)):
            for line in _lines(block):
                argv = shlex.split(line, comments=True)
                if argv:
                    commands.append(Command(str(page.relative_to(REPO_ROOT)), line, tuple(argv)))
    return commands


COMMANDS = documented()


def _canary_args(argv: tuple[str, ...]) -> tuple[str, ...] | None:
    for prefix in CANARY_PREFIXES:
        if argv[: len(prefix)] == prefix:
            return argv[len(prefix) :]
    return None


CANARY = [(c, args) for c in COMMANDS if (args := _canary_args(c.argv)) is not None]
MAKE = [c for c in COMMANDS if c.argv[0] == "make"]


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _command_parser(args: tuple[str, ...]) -> tuple[list[str], argparse.ArgumentParser]:
    """The command path the words name (`history show`) and its parser; a word that is no command fails."""
    parser, path = cli.build_parser(), []
    for word in args:
        children = _subparsers(parser)
        if not children:
            break
        assert word in children, f"`canary {' '.join([*path, word])}`: no such command (has: {sorted(children)})"
        parser, path = children[word], [*path, word]
    return path, parser


def _options(parser: argparse.ArgumentParser) -> set[str]:
    return {option for action in parser._actions for option in action.option_strings}


def _main(argv: list[str]) -> tuple[int, str, str]:
    """`canary ARGV` in this process: exit code, stdout, stderr (argparse's exits included)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = cli.main(argv)
        except SystemExit as exc:
            code = int(exc.code or 0)
    return code, out.getvalue(), err.getvalue()


def test_the_docs_have_commands_of_every_kind() -> None:
    """The extraction itself works: the pages' canary and make commands are found."""
    assert len(CANARY) >= 20 and len(MAKE) >= 5, (len(CANARY), len(MAKE))
    assert any(args[:1] == ("run",) for _, args in CANARY)


@pytest.mark.parametrize(("command", "args"), CANARY, ids=[str(c) for c, _ in CANARY])
def test_a_documented_canary_command_works(command: Command, args: tuple[str, ...]) -> None:
    path, parser = _command_parser(args)
    code, _, err = _main([*path, "--help"])
    assert code == 0, f"{command}: `canary {' '.join(path)} --help` exits {code}: {err}"
    for word in args:
        if word.startswith("configs/") and word.endswith(".yaml"):
            assert (REPO_ROOT / word).is_file(), f"{command}: {word} is not there"
    if any(PLACEHOLDER.search(word) for word in args):  # a synopsis: its flags must exist
        flags = {w.split("=", 1)[0] for w in args if w.startswith("-")}
        unknown = flags - _options(parser)
        assert not unknown, f"{command}: `canary {' '.join(path)}` has no {sorted(unknown)}"
        return
    try:
        parsed = cli.build_parser().parse_args(list(args))
    except SystemExit:  # argparse: an unknown or renamed flag, a missing argument
        pytest.fail(f"{command}: the CLI refuses its arguments (its message is above)")
    if path[0] not in PLANNED:
        return
    plan_args = [parsed.config, *(a for o in parsed.overrides for a in ("--set", o))]
    plan_args += [a for o in parsed.only for a in ("--only", o)] + (["--pairwise"] if parsed.pairwise else [])
    code, _, err = _main(["plan", *plan_args, "--json"])
    assert code == 0, f"{command}: its config does not plan (exit {code}): {err.strip()}"


@pytest.mark.parametrize("command", MAKE, ids=[str(c) for c in MAKE])
def test_a_documented_make_target_exists(command: Command) -> None:
    done = subprocess.run(
        ["make", "-n", "--no-print-directory", *command.argv[1:]],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert "No rule to make target" not in done.stderr, f"{command}: {done.stderr.strip()}"
    assert done.returncode == 0, f"{command}: make -n exits {done.returncode}: {done.stderr.strip()[-500:]}"


def test_the_readme_docs_table_lists_every_page() -> None:
    table = README.read_text(encoding="utf-8").split("## Documentation", 1)[1]
    linked = set(re.findall(r"\]\((docs/[^)#\s]+)", table))
    pages = {str(p.relative_to(REPO_ROOT)) for p in DOCS.rglob("*.md") if "_snippets" not in p.parts}
    assert pages - linked == set(), "README.md's docs table does not link these pages"


def test_the_configs_page_lists_every_config() -> None:
    page = (DOCS / "operations" / "configs.md").read_text(encoding="utf-8")
    configs = {f"configs/{p.name}" for p in (REPO_ROOT / "configs").glob("*.yaml")}
    assert {c for c in configs if f"`{c}`" not in page} == set(), "docs/operations/configs.md does not name these"
