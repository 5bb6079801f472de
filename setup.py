"""Build hook of `pip install .`: the wheel carries the repository files the controller reads at run time.

canary/paths.py names them (BUNDLED) and finds them under canary/_data/ when no checkout is around the
package; this copies them there at build time, so the repository keeps one copy of each.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "canary"))
from paths import BUNDLED  # noqa: E402  (canary/paths.py alone: the package's imports need its dependencies)


class BuildPyWithData(build_py):
    """build_py, then the BUNDLED repository paths into <build>/canary/_data/."""

    def run(self) -> None:
        super().run()
        target = Path(self.build_lib) / "canary" / "_data"
        for relative in BUNDLED:
            source, dest = HERE / relative, target / relative
            dest.parent.mkdir(parents=True, exist_ok=True)
            if source.is_dir():
                shutil.copytree(source, dest, dirs_exist_ok=True, ignore=shutil.ignore_patterns("__pycache__"))
            else:
                shutil.copy2(source, dest)


setup(cmdclass={"build_py": BuildPyWithData})
