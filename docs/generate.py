"""Write (or check) the documentation pages that are generated from the code.

    python docs/generate.py --write    regenerate every page below (what `make docs-generate` runs)
    python docs/generate.py --check    exit 1 naming each stale page (`make docs-check`, tests/unit/test_docs.py)

Pages: docs/reference/config.md (canary.config.reference), docs/reference/metrics.md
(canary.export.prometheus.reference), docs/reference/exit-codes.md (canary.cli.EXIT_CODES) and
docs/architecture.svg and docs/_snippets/layers.md (canary.LAYERS). Docs tooling, not part of the
canary: run it with the controller venv (`.venv/bin/python docs/generate.py`); it imports the canary of
the checkout it lies in.
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections.abc import Callable
from html import escape
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:  # run as a script from anywhere: import this checkout's canary
    sys.path.insert(0, str(REPO))

from canary import LAYERS, cli  # noqa: E402
from canary.config import reference as config_reference  # noqa: E402
from canary.core.atomic import write_atomic  # noqa: E402
from canary.export.prometheus import reference as metrics_reference  # noqa: E402

REGENERATE = "make docs-generate (PYTHONPATH=. .venv/bin/python docs/generate.py --write)"

# --------------------------------------------------------------------------- exit codes


def _exit_code_details() -> list[str]:
    """The `- N: ...` bullets of canary/cli.py's docstring, one string per code."""
    doc = cli.__doc__ or ""
    bullets: list[str] = []
    for line in doc.splitlines():
        if line.startswith("- "):
            bullets.append(line[2:].strip())
        elif bullets and line.startswith("  ") and line.strip():
            bullets[-1] += " " + line.strip()
    codes = [e.code for e in cli.EXIT_CODES]
    if [int(b.split(":", 1)[0]) for b in bullets] != codes:
        raise SystemExit(f"canary/cli.py: its docstring's exit-code bullets do not list {codes} in order")
    return [b.split(":", 1)[1].strip() for b in bullets]


def exit_codes_page() -> str:
    """docs/reference/exit-codes.md: the table of canary.cli.EXIT_CODES and the docstring's details."""
    rows = ["| code | constant | `canary --help` says |", "|---|---|---|"]
    rows += [f"| {e.code} | `{e.name}` | {e.meaning} |" for e in cli.EXIT_CODES]
    details = [f"- **{e.code}**: {text}" for e, text in zip(cli.EXIT_CODES, _exit_code_details(), strict=True)]
    commands = ["| command | exits with (its `--help` lists these) |", "|---|---|"]
    for command in cli.COMMANDS:
        codes = "; ".join(f"**{code}** {meaning}" for code, meaning in cli.command_exit_codes(command).items())
        commands.append(f"| `{command}` | {codes} |")
    return (
        "# Exit codes\n\n"
        "What `canary` (every subcommand; `make canary` passes it on) exits with, generated from the table "
        "`EXIT_CODES` in `canary/cli.py` and its docstring by `docs/generate.py`; a test fails when this page "
        "is stale.\n\n" + "\n".join(rows) + "\n\n## In detail\n\n" + "\n".join(details) + "\n\n"
        "A run's outcome line (`OK: ...`, `FAILED: ...`, `INCONCLUSIVE: ...`) says which; INCONCLUSIVE is "
        "never a pass: see [Troubleshooting](../operations/troubleshooting.md).\n\n"
        "## By command\n\n"
        "Each command's `--help` lists only the codes that command exits with (`COMMON_EXITS` and "
        "`COMMAND_EXITS` in `canary/cli.py`):\n\n" + "\n".join(commands) + "\n"
    )


# --------------------------------------------------------------------------- architecture picture

STAGES: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("plan", "cells from the matrix", ("config", "plan")),
    ("deploy", "start or find each cell", ("targets",)),
    ("check", "startup, KV, GSM8K, parity, load", ("checks", "load")),
    ("judge", "verdicts, expectations", ("judge",)),
    ("export", "reports, Prometheus, history", ("export",)),
)
"""The pipeline's stages, what each does, and the layers of canary.LAYERS that hold it."""
STAGE_COLORS = ("#e3f2fd", "#e8f5e9", "#fff3e0", "#f3e5f5", "#e0f7fa")
OTHER_COLOR = "#eceff1"
FONT = "font-family='system-ui,sans-serif' font-size='13'"


def _stage_of_layer() -> dict[str, int]:
    names = {name for name, _ in LAYERS}
    out: dict[str, int] = {}
    for index, (stage, _, layers) in enumerate(STAGES):
        for layer in layers:
            if layer not in names:
                raise SystemExit(f"docs/generate.py: stage {stage!r} names layer {layer!r}, not in canary.LAYERS")
            out[layer] = index
    return out


def architecture_svg() -> str:
    """docs/architecture.svg: the pipeline on top, canary.LAYERS below (highest layer first)."""
    box_w, box_h, gap, top = 172, 58, 18, 40
    width = 20 + len(STAGES) * box_w + (len(STAGES) - 1) * gap
    stage_of = _stage_of_layer()
    row_h, stack_top = 26, top + box_h + 70
    height = stack_top + row_h * len(LAYERS) + 10
    out = [
        f"<svg xmlns='http://www.w3.org/2000/svg' width='{width}' height='{height}' "
        f"viewBox='0 0 {width} {height}' {FONT} role='img'>",
        "<title>vllm-canary: the pipeline plan, deploy, check, judge, export, and the package layers</title>",
        "<defs><marker id='arrow' markerWidth='8' markerHeight='8' refX='7' refY='4' orient='auto'>"
        "<path d='M0,0 L8,4 L0,8 z' fill='#455a64'/></marker></defs>",
        f"<text x='10' y='{top - 16}' font-weight='bold'>Pipeline (canary run)</text>",
    ]
    for index, (stage, what, layers) in enumerate(STAGES):
        x = 10 + index * (box_w + gap)
        out.append(
            f"<rect x='{x}' y='{top}' width='{box_w}' height='{box_h}' rx='6' fill='{STAGE_COLORS[index]}' "
            "stroke='#455a64'/>"
        )
        out.append(f"<text x='{x + box_w / 2}' y='{top + 20}' text-anchor='middle' font-weight='bold'>{stage}</text>")
        out.append(
            f"<text x='{x + box_w / 2}' y='{top + 36}' text-anchor='middle' font-size='11'>{escape(what)}</text>"
        )
        packages = ", ".join(f"canary.{layer}" for layer in layers)
        out.append(
            f"<text x='{x + box_w / 2}' y='{top + 51}' text-anchor='middle' font-size='10' "
            f"fill='#37474f'>{escape(packages)}</text>"
        )
        if index:
            out.append(
                f"<line x1='{x - gap}' y1='{top + box_h / 2}' x2='{x - 2}' y2='{top + box_h / 2}' "
                "stroke='#455a64' marker-end='url(#arrow)'/>"
            )
    out.append(
        f"<text x='10' y='{stack_top - 14}' font-weight='bold'>Layers (canary.LAYERS, highest first): "
        "a module imports its own layer and those below</text>"
    )
    for row, (layer, prefixes) in enumerate(reversed(LAYERS)):
        y = stack_top + row * row_h
        color = STAGE_COLORS[stage_of[layer]] if layer in stage_of else OTHER_COLOR
        out.append(f"<rect x='10' y='{y}' width='{width - 20}' height='{row_h - 4}' fill='{color}' stroke='#90a4ae'/>")
        out.append(f"<text x='20' y='{y + 16}' font-weight='bold'>{escape(layer)}</text>")
        out.append(
            f"<text x='130' y='{y + 16}' font-family='monospace' font-size='12'>{escape(', '.join(prefixes))}</text>"
        )
        if layer in stage_of:
            out.append(
                f"<text x='{width - 20}' y='{y + 16}' text-anchor='end' font-size='11' fill='#37474f'>"
                f"stage: {STAGES[stage_of[layer]][0]}</text>"
            )
    out.append("</svg>")
    return "\n".join(out) + "\n"


# --------------------------------------------------------------------------- the layer table


def _module_file(module: str) -> Path:
    path = REPO / module.replace(".", "/")
    return path / "__init__.py" if path.is_dir() else path.with_suffix(".py")


def _first_line(module: str) -> str:
    """The first line of a module's docstring, read from its source (nothing is imported)."""
    path = _module_file(module)
    doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"), filename=str(path)))
    if not doc:
        raise SystemExit(f"docs/generate.py: {path.relative_to(REPO)} has no docstring")
    return doc.splitlines()[0]


def _job(prefix: str) -> str:
    """A prefix's job: its module's first docstring line; for a `*` prefix, the modules it matches and the
    first one's line."""
    if "*" not in prefix:
        return _first_line(prefix)
    paths = sorted(REPO.glob(prefix.replace(".", "/") + ".py"))
    modules = [".".join(p.relative_to(REPO).with_suffix("").parts) for p in paths]
    if not modules:
        raise SystemExit(f"docs/generate.py: canary.LAYERS names {prefix}, which matches no module")
    return f"{len(modules)} modules ({', '.join(m.split('.')[-2] for m in modules)}), e.g.: {_first_line(modules[0])}"


def layers_snippet() -> str:
    """docs/_snippets/layers.md (included by architecture.md): canary.LAYERS, lowest first, with
    each package's job from the first line of its docstring."""
    rows = ["| # | layer | module | its job (first line of its docstring) |", "|---|---|---|---|"]
    for index, (layer, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            job = _job(prefix).replace("|", "\\|")
            rows.append(f"| {index} | {layer} | `{prefix}` | {job} |")
    return "\n".join(rows) + "\n"


# --------------------------------------------------------------------------- the pages

GENERATED: dict[str, Callable[[], str]] = {
    str(config_reference.PAGE): config_reference.page,
    str(metrics_reference.PAGE): metrics_reference.page,
    "docs/reference/exit-codes.md": exit_codes_page,
    "docs/architecture.svg": architecture_svg,
    "docs/_snippets/layers.md": layers_snippet,
}
"""Path relative to the repository root -> the function that renders it."""


def stale(root: Path = REPO) -> list[str]:
    """The generated pages whose file differs from what the code renders now (missing ones included)."""
    out = []
    for path, render in GENERATED.items():
        target = root / path
        if not target.is_file() or target.read_text(encoding="utf-8") != render():
            out.append(path)
    return out


def main(argv: list[str] | None = None) -> int:
    """CLI: --write regenerates every page, --check names the stale ones (exit 1)."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--write", action="store_true", help="regenerate every generated page")
    mode.add_argument("--check", action="store_true", help="exit 1 when a generated page is stale")
    args = parser.parse_args(argv)
    if args.write:
        for path, render in GENERATED.items():
            write_atomic(REPO / path, render())
        print(f"docs: wrote {', '.join(GENERATED)}")
        return 0
    outdated = stale()
    for path in outdated:
        print(f"docs: {path} is stale: run {REGENERATE}", file=sys.stderr)
    return 1 if outdated else 0


if __name__ == "__main__":
    sys.exit(main())
