"""The `checks` section, assembled from the check folders: one field per `canary/checks/<name>/settings.py`.

A check's settings live beside the check (its folder's `settings.py` defines the model and declares
`SECTION`); that module imports only canary.config and canary.core, so canary.LAYERS puts every
`canary.checks.*.settings` in the config layer and the config stays below the checks. This module
finds the folders on `canary.checks.__path__` (whose `__init__` imports nothing) and builds
ChecksConfig with one field per folder, named after it; CheckName is the set of those names.

mypy sees the built-in sections as typed attributes (the `TYPE_CHECKING` block, held to the folders
by tests/unit/checks/test_registry.py); a check added later reads its own section with
`config.checks.section(Model)`.
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from pydantic import Field, create_model

from canary.config.base import CheckSection, Strict

if TYPE_CHECKING:
    from canary.checks.accuracy.settings import AccuracyCheckConfig
    from canary.checks.kv_transfer.settings import KvTransferCheckConfig
    from canary.checks.lifecycle.settings import LifecycleCheckConfig
    from canary.checks.parity.settings import ParityCheckConfig
    from canary.checks.startup.settings import StartupCheckConfig
    from canary.checks.throughput.settings import ThroughputCheckConfig

CHECKS_PACKAGE = "canary.checks"
"""The package whose sub-packages are the checks (each with a `settings.py` and a `check.py`)."""
SectionT = TypeVar("SectionT", bound=Strict)


def check_folders() -> list[str]:
    """The check folders' names, sorted: the sub-packages on canary.checks' path."""
    package = importlib.import_module(CHECKS_PACKAGE)
    return sorted(info.name for info in pkgutil.iter_modules(package.__path__) if info.ispkg)


def discover() -> dict[str, CheckSection]:
    """Every check folder's declared section (`SECTION` of its `settings.py`), by folder name."""
    sections: dict[str, CheckSection] = {}
    for name in check_folders():
        module = importlib.import_module(f"{CHECKS_PACKAGE}.{name}.settings")
        section = getattr(module, "SECTION", None)
        if not isinstance(section, CheckSection):
            raise TypeError(
                f"{module.__name__} must declare SECTION = CheckSection(<its settings model>, <description>)"
            )
        sections[name] = section
    return sections


SECTIONS: dict[str, CheckSection] = discover()


class ChecksConfig(Strict):
    """Per-check settings."""

    if TYPE_CHECKING:
        startup: StartupCheckConfig = Field(default_factory=StartupCheckConfig)
        kv_transfer: KvTransferCheckConfig = Field(default_factory=KvTransferCheckConfig)
        accuracy: AccuracyCheckConfig = Field(default_factory=AccuracyCheckConfig)
        parity: ParityCheckConfig = Field(default_factory=ParityCheckConfig)
        throughput: ThroughputCheckConfig = Field(default_factory=ThroughputCheckConfig)
        lifecycle: LifecycleCheckConfig = Field(default_factory=LifecycleCheckConfig)

    def section(self, model: type[SectionT]) -> SectionT:
        """The section whose model is `model` (typed access for any check, built-in or added)."""
        for name, section in SECTIONS.items():
            if section.model is model:
                value = getattr(self, name)
                assert isinstance(value, model)
                return value
        raise KeyError(f"no check declares {model.__name__} as its settings")


def _fields(sections: dict[str, CheckSection]) -> dict[str, Any]:
    return {
        name: (section.model, Field(default_factory=section.model, description=section.description))
        for name, section in sections.items()
    }


if not TYPE_CHECKING:  # at run time: one field per check folder
    ChecksConfig = create_model(
        "ChecksConfig", __base__=ChecksConfig, __module__=__name__, __doc__=ChecksConfig.__doc__, **_fields(SECTIONS)
    )
    CheckName = Literal[tuple(SECTIONS)]
else:
    CheckName = str
"""A check's name: one of the check folders (canary.checks.base.check_order gives their run order)."""
