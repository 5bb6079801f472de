"""A check is one folder that declares itself: the registry against the config and the metric schema.

Registering a check (canary.checks.base.register) declares its name, its order, its config model,
the metrics it exports and its time estimate; these tests hold every declaration against the
config's CheckName and ChecksConfig fields (assembled from the folders), the folder layout and the
schema's check metrics, so a check out of step fails here, naming what. test_new_check.py adds a
throwaway check in a folder of its own.
"""

from __future__ import annotations

import ast
from typing import get_args

from canary.checks.base import check_order, specs
from canary.config import CheckName, ChecksConfig
from canary.config.checks import SECTIONS
from canary.export.history.tracked import TRACKED
from canary.export.prometheus.schema import CHECK_METRIC_KEYS, CHECK_METRICS, HISTORY_CHANGE_WORSE
from canary.paths import REPO_ROOT


def test_every_check_folder_registers_one_check() -> None:
    folders = sorted(p.name for p in (REPO_ROOT / "canary" / "checks").iterdir() if (p / "check.py").is_file())
    assert folders == sorted(specs())


def test_the_config_names_the_registered_checks() -> None:
    assert sorted(check_order()) == sorted(get_args(CheckName)) == sorted(SECTIONS)
    orders = [spec.order for spec in specs().values()]
    assert len(set(orders)) == len(orders), f"two checks declare the same order: {orders}"
    assert check_order()[0] == "startup"


def test_each_check_declares_the_config_model_of_its_section() -> None:
    fields = ChecksConfig.model_fields
    assert sorted(fields) == sorted(specs()), "ChecksConfig needs one field per registered check"
    for name, spec in specs().items():
        annotation = fields[name].annotation
        assert annotation is spec.settings, f"checks.{name} is {annotation}, declared {spec.settings}"


def test_the_typed_view_of_the_sections_is_the_folders() -> None:
    # mypy reads ChecksConfig's TYPE_CHECKING block; at run time the fields come from the folders
    tree = ast.parse((REPO_ROOT / "canary" / "config" / "checks.py").read_text(encoding="utf-8"))
    body = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "ChecksConfig").body
    block = next(n for n in body if isinstance(n, ast.If)).body
    typed = {ast.unparse(n.target): ast.unparse(n.annotation) for n in block if isinstance(n, ast.AnnAssign)}
    assert typed == {name: section.model.__name__ for name, section in SECTIONS.items()}


def test_each_check_declares_exactly_the_keys_the_schema_exports() -> None:
    written_by_the_history = set(TRACKED.values())  # change points, added to a check's numbers after the run
    for name, spec in specs().items():
        exported = set(CHECK_METRIC_KEYS.get(name, ())) - written_by_the_history
        declared = set(spec.metric_keys)
        only_declared, only_exported = sorted(declared - exported), sorted(exported - declared)
        assert declared == exported, f"{name}: declared only {only_declared}, exported only {only_exported}"


def test_the_schema_exports_each_declaration_in_check_order() -> None:
    declared = [(name, m.spec, m.key, m.extra) for name, spec in specs().items() for m in spec.metrics]
    exported = [(m.check, m.spec, m.key, m.extra) for m in CHECK_METRICS if m.spec is not HISTORY_CHANGE_WORSE]
    assert exported == declared
    assert len({m.spec.name for _, spec in specs().items() for m in spec.metrics if not m.extra}) == len(
        [m for spec in specs().values() for m in spec.metrics if not m.extra]
    ), "two checks declare the same metric"


def test_a_key_missing_from_a_declaration_is_caught() -> None:
    spec = specs()["kv_transfer"]
    assert set(spec.metric_keys[1:]) != set(CHECK_METRIC_KEYS["kv_transfer"])
