"""A check is one folder that declares itself: the registry against the config and the metric schema.

Registering a check (canary.checks.base.register) declares its name, its order, its config model and
the metric keys it exports; these tests hold every declaration against the config's CheckName
literal and ChecksConfig fields, the folder layout, and the schema's check-metric map, so adding or
renaming a check fails here, naming what is out of step.
"""

from __future__ import annotations

from typing import get_args

from canary.checks.base import check_order, specs
from canary.config import CheckName, ChecksConfig
from canary.export.history.tracked import TRACKED
from canary.export.prometheus.schema import CHECK_METRIC_KEYS
from canary.paths import REPO_ROOT


def test_every_check_folder_registers_one_check() -> None:
    folders = sorted(p.name for p in (REPO_ROOT / "canary" / "checks").iterdir() if (p / "check.py").is_file())
    assert folders == sorted(specs())


def test_the_registered_order_is_the_config_literal_order() -> None:
    assert check_order() == get_args(CheckName)
    orders = [spec.order for spec in specs().values()]
    assert len(set(orders)) == len(orders), f"two checks declare the same order: {orders}"
    assert check_order()[0] == "startup"


def test_each_check_declares_the_config_model_of_its_section() -> None:
    fields = ChecksConfig.model_fields
    assert sorted(fields) == sorted(specs()), "ChecksConfig needs one field per registered check"
    for name, spec in specs().items():
        annotation = fields[name].annotation
        assert annotation is spec.settings, f"checks.{name} is {annotation}, declared {spec.settings}"


def test_each_check_declares_exactly_the_keys_the_schema_exports() -> None:
    written_by_the_history = set(TRACKED.values())  # change points, added to a check's numbers after the run
    for name, spec in specs().items():
        exported = set(CHECK_METRIC_KEYS.get(name, ())) - written_by_the_history
        declared = set(spec.metric_keys)
        only_declared, only_exported = sorted(declared - exported), sorted(exported - declared)
        assert declared == exported, f"{name}: declared only {only_declared}, exported only {only_exported}"


def test_a_key_missing_from_a_declaration_is_caught() -> None:
    spec = specs()["kv_transfer"]
    assert set(spec.metric_keys[1:]) != set(CHECK_METRIC_KEYS["kv_transfer"])
