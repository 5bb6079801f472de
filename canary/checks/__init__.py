"""Checks, one folder each (`checks/<name>/check.py` registers it); importing this package registers every check."""

from __future__ import annotations

import importlib
import pkgutil

for _module in pkgutil.iter_modules(__path__):
    if _module.ispkg:
        importlib.import_module(f"{__name__}.{_module.name}.check")
