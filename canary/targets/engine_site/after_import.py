"""Run a function on a module right after it is first executed: the one import hook of the engine site.

sitecustomize.py (the NIXL progress floor), layout_probe.py and timing_probe.py each wrap a few of
vLLM's or NIXL's functions, and must do it after the module that defines them has run but before
anything calls them, without importing vLLM early (an engine's import order stays its own). An
`AfterImport` on sys.meta_path finds the real spec of each module it wants and wraps its loader's
`exec_module`: the module runs unchanged, then `then(module)`. An exception of `then` goes to
`on_error(name, exc)`; without one it propagates (the engine then fails to import the module).

The engine site is not a package inside an engine (its directory is on PYTHONPATH), so these modules
import this one as `after_import`; the controller and the tests import it as
`canary.targets.engine_site.after_import`. The Kubernetes chart ships a copy (helm/vllm-pd/files).
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
from collections.abc import Callable
from types import ModuleType
from typing import Any

NOT_INSTALLED = "canary-engine-site: not installed: "
"""What an engine-site module that failed to install prints on stderr (so into the engine's log), followed
by `<module>: <error>`. The controller reads it back (canary.checks.startup.layout): a layout probe that was
expected and did not install is said as loudly as a failed gate, not left to a terminal nobody reads."""


class AfterImport(importlib.abc.MetaPathFinder):
    """Calls `then(module)` right after each module whose name `wanted` accepts is first executed."""

    def __init__(
        self,
        wanted: Callable[[str], bool],
        then: Callable[[ModuleType], None],
        on_error: Callable[[str, Exception], None] | None = None,
    ) -> None:
        self.wanted = wanted
        self.then = then
        self.on_error = on_error

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if not self.wanted(fullname):
            return None
        sys.meta_path.remove(self)  # find the real spec without finding ourselves
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None:
            return None
        loader, then, on_error = spec.loader, self.then, self.on_error
        original = loader.exec_module

        def exec_module(module: ModuleType) -> None:
            original(module)
            if on_error is None:
                then(module)
                return
            try:
                then(module)
            except Exception as exc:
                on_error(fullname, exc)

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def install(hook: AfterImport) -> AfterImport:
    """Put `hook` first on sys.meta_path (before the default finders) and return it."""
    sys.meta_path.insert(0, hook)
    return hook
