"""vllm-canary: deploy vLLM prefill/decode pairs across a matrix and check every cell.

The package's folders follow the pipeline plan -> deploy -> check -> judge -> export. LAYERS is the
one declaration of their import order, lowest first: a module may import its own layer and the
layers below it, never one above (tests/unit/test_layers.py reads every import and enforces it).
"""

__version__ = "0.1.0"

LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("foundation", ("canary", "canary.errors", "canary.paths")),
    ("core", ("canary.core",)),
    ("sources", ("canary.vllm_source", "canary.model", "canary.images")),
    (
        "config",
        ("canary.config", "canary.checks.*.settings", "canary.targets.*.settings", "canary.load.workloads.*.settings"),
    ),
    ("plan", ("canary.plan",)),
    ("load", ("canary.load",)),
    ("judge", ("canary.judge",)),
    ("targets", ("canary.targets",)),
    ("checks", ("canary.checks",)),
    ("export", ("canary.export",)),
    ("run", ("canary.run",)),
    ("bisect", ("canary.bisect",)),
    ("selftest", ("canary.selftest",)),
    ("cli", ("canary.cli", "canary.__main__")),
)
"""(layer, module prefixes) from the bottom up; a prefix covers the module and everything below it, the
longest prefix wins, and a `*` stands for any one name: every check folder's settings module sits in the
config layer (canary.config assembles `checks` from them, so a check's settings live beside it), and so
does every target folder's (`target.kind` and its `target.<kind>` section) and workload kind's."""

SEPARATE: tuple[tuple[str, str], ...] = (("canary.export.report", "canary.export.prometheus"),)
"""Pairs of packages in one layer that never import each other (two views of the same results)."""
