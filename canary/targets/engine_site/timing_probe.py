"""The engine-side request timing recorder: where each request's time goes inside one engine.

Loaded by sitecustomize.py beside the layout probe (same switch, CANARY_LAYOUT_DIR). It wraps a few
vLLM functions by name as their modules are imported and appends one JSON line per finished
request (scheduler side) and per finished KV read (NIXL worker side) to
`$CANARY_LAYOUT_DIR/timing.<pid>.jsonl`. Read-only like the layout probe: it never changes an
argument, a return value or an exception, a failure inside a hook is recorded as that hook's status
(`{"ev": "hook", "name": ..., "status": "error: ..."}`) and the hook stops recording, and a hook
point missing in a vLLM version is recorded as `"missing: <why>"`: the throughput check then says
"decomposition unavailable: <why>" instead of guessing.

Clock: every stamp is `time.monotonic()` of the recording process; the file's first line is an
anchor `{"ev": "start", "wall": time.time(), "mono": time.monotonic()}` taken once, so a reader
converts each process's stamps to the host's wall clock with that process's own anchor (never
mixing one process's monotonic readings with another's).

Lines (schema_version 1):
  start   pid, wall, mono, schema_version, vllm_version (first line)
  hook    name, status: installed | missing: ... | error: ...
  req     one request as the scheduler saw it: id (vLLM's internal request id), cid (the client's
          id from sampling_params.extra_args["canary_request_id"], the body's `vllm_xargs`, which
          the P/D router forwards to both engines while it replaces X-Request-Id), prompt tokens,
          remote_prefill / remote_decode and the prefill's ids from kv_transfer_params, and the
          stamps add (entered the scheduler), wait (started waiting for remote KV), kv_ready (the
          scheduler learnt the KV arrived), sched (first scheduled to compute) with sched_tokens
          (tokens that first step computed: 1 after a complete KV load, the whole prompt after a
          recompute fallback), first (first output token), finish, out (tokens it emitted);
          kv_failed (the load failed and the scheduler fell back to recompute), status finished |
          aborted | evicted
  read    one request's KV read on the decode side (NIXL pull): id, remote_id (the prefill's
          request id), engine (the remote engine id), start (first _read_blocks entered), posted
          (its transfers posted), done (the last handle seen complete), ok, blocks, reads, bytes and
          nixl_s (NIXL's own telemetry: bytes moved and transfer time, where it reports them)
  truncated  the file reached MAX_BYTES; nothing more is written

Hook points (vLLM 0.32/0.33 names; pinned by tests/source/test_source_timing_probe.py):
  vllm.v1.core.sched.scheduler.Scheduler: add_request, schedule, update_from_output,
      _set_kv_fetch_stage, finish_requests
  vllm.distributed.kv_transfer.kv_connector.v1.nixl.pull_worker.NixlPullConnectorWorker._read_blocks
  vllm.distributed.kv_transfer.kv_connector.v1.nixl.base_worker.NixlBaseConnectorWorker._pop_done_transfers
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import sys
import threading
import time
from collections.abc import Callable
from types import ModuleType
from typing import Any

try:  # as canary.targets.engine_site.timing_probe (the controller, the tests)
    from .after_import import AfterImport
    from .after_import import install as install_after_import
except ImportError:  # as a top-level module beside sitecustomize.py (inside an engine)
    from after_import import AfterImport  # type: ignore[no-redef,import-not-found]
    from after_import import install as install_after_import  # type: ignore[no-redef]

LAYOUT_DIR_ENV = "CANARY_LAYOUT_DIR"
SCHEMA_VERSION = 1
CLIENT_ID_KEY = "canary_request_id"
"""The key in a request's `vllm_xargs` (sampling_params.extra_args) that carries the client's id."""
MAX_BYTES = 8 * 1024 * 1024
"""One process's timing file stops growing here (a `truncated` line says so)."""
MAX_OPEN = 8192
"""Requests tracked at once; beyond it the oldest is written out as `evicted`."""

SCHEDULER = "vllm.v1.core.sched.scheduler"
NIXL_BASE = "vllm.distributed.kv_transfer.kv_connector.v1.nixl.base_worker"
NIXL_PULL = "vllm.distributed.kv_transfer.kv_connector.v1.nixl.pull_worker"

HOOKS: dict[str, list[tuple[str, str]]] = {
    SCHEDULER: [
        ("Scheduler", "add_request"),
        ("Scheduler", "schedule"),
        ("Scheduler", "update_from_output"),
        ("Scheduler", "_set_kv_fetch_stage"),
        ("Scheduler", "finish_requests"),
    ],
    NIXL_PULL: [("NixlPullConnectorWorker", "_read_blocks")],
    NIXL_BASE: [("NixlBaseConnectorWorker", "_pop_done_transfers")],
}
REQUIRED_HOOKS: tuple[str, ...] = tuple(f"{m}.{c}.{f}" for m, entries in HOOKS.items() for c, f in entries)
"""Every hook point the decomposition of a P/D request needs (the reader checks their status)."""


def _now() -> float:
    return time.monotonic()


class TimingRecorder:
    """One engine process's timing lines, appended to timing.<pid>.jsonl."""

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self.lock = threading.Lock()
        self.path = os.path.join(directory, f"timing.{os.getpid()}.jsonl")
        self.written = 0
        self.closed = False
        self.handle: Any = None
        self.requests: dict[str, dict[str, Any]] = {}
        self.unscheduled: set[str] = set()
        self.reads: dict[str, dict[str, Any]] = {}
        self.telemetry: dict[int, tuple[int, float]] = {}
        """NIXL telemetry (bytes, seconds) by id() of the transfer handle, between completion and the read line."""
        self.broken: set[str] = set()
        self.anchor = {"wall": time.time(), "mono": _now()}

    # ---------------------------------------------------------------- output

    def write(self, line: dict[str, Any]) -> None:
        """Append one line; the first write opens the file and writes the anchor."""
        with self.lock:
            if self.closed:
                return
            try:
                if self.handle is None:
                    os.makedirs(self.directory, exist_ok=True)
                    self.handle = open(self.path, "a", encoding="utf-8", buffering=1)  # noqa: SIM115
                    self._emit({"ev": "start", "pid": os.getpid(), "schema_version": SCHEMA_VERSION, **self.anchor})
                self._emit(line)
            except OSError as exc:
                self.closed = True
                print(f"canary timing probe: cannot write to {self.directory}: {exc}", file=sys.stderr)

    def _emit(self, line: dict[str, Any]) -> None:
        text = json.dumps(line, separators=(",", ":"), default=str) + "\n"
        if self.written + len(text) > MAX_BYTES:
            self.handle.write(json.dumps({"ev": "truncated", "at": _now()}) + "\n")
            self.closed = True
            return
        self.handle.write(text)
        self.written += len(text)

    def hook_status(self, name: str, status: str) -> None:
        self.write({"ev": "hook", "name": name, "status": status[:300]})

    # ---------------------------------------------------------------- scheduler side

    def on_add(self, request: Any) -> None:
        params = getattr(request, "sampling_params", None)
        extra = getattr(params, "extra_args", None) or {}
        kv = getattr(request, "kv_transfer_params", None) or {}
        cid = extra.get(CLIENT_ID_KEY) if isinstance(extra, dict) else None
        rid = str(request.request_id)
        entry: dict[str, Any] = {
            "ev": "req",
            "id": rid,
            "cid": None if cid is None else str(cid),
            "add": _now(),
            "arrival": getattr(request, "arrival_time", None),
            "prompt": int(getattr(request, "num_prompt_tokens", 0) or 0),
            "remote_prefill": bool(kv.get("do_remote_prefill")) if isinstance(kv, dict) else False,
            "remote_decode": bool(kv.get("do_remote_decode")) if isinstance(kv, dict) else False,
        }
        if isinstance(kv, dict) and kv.get("do_remote_prefill"):
            entry["remote_id"] = kv.get("remote_request_id")
            entry["remote_engine"] = kv.get("remote_engine_id")
            blocks = kv.get("remote_block_ids")
            with contextlib.suppress(TypeError):
                entry["remote_blocks"] = (
                    sum(len(g) for g in blocks) if blocks and isinstance(blocks[0], list) else len(blocks or [])
                )
        evicted: dict[str, Any] | None = None
        with self.lock:
            if len(self.requests) >= MAX_OPEN:
                oldest = next(iter(self.requests))
                evicted = self.requests.pop(oldest)
                self.unscheduled.discard(oldest)
            self.requests[rid] = entry
            self.unscheduled.add(rid)
        if evicted is not None:
            self.write({**evicted, "status": "evicted"})

    def on_stage(self, request: Any, stage: Any) -> None:
        entry = self.requests.get(str(getattr(request, "request_id", "")))
        if entry is None or stage is None:
            return
        if stage == "in_progress":  # vllm.v1.metrics.stats.KV_FETCH_IN_PROGRESS
            entry.setdefault("wait", _now())
        elif stage == "completed_waiting":  # KV_FETCH_COMPLETED_WAITING
            entry.setdefault("kv_ready", _now())

    def on_schedule(self, output: Any) -> None:
        if not self.unscheduled:
            return
        scheduled = getattr(output, "num_scheduled_tokens", None) or {}
        now = _now()
        with self.lock:
            for rid in [r for r in self.unscheduled if r in scheduled]:
                self.unscheduled.discard(rid)
                entry = self.requests.get(rid)
                if entry is not None:
                    entry["sched"] = now
                    entry["sched_tokens"] = int(scheduled[rid])

    def on_output(self, runner_output: Any, result: Any) -> None:
        now = _now()
        kv_out = getattr(runner_output, "kv_connector_output", None)
        for rid in getattr(kv_out, "failed_recving", None) or ():
            entry = self.requests.get(str(rid))
            if entry is not None:
                entry["kv_failed"] = True
        done: list[dict[str, Any]] = []
        for outputs in (result or {}).values():
            for out in getattr(outputs, "outputs", None) or ():
                rid = str(out.request_id)
                entry = self.requests.get(rid)
                if entry is None:
                    continue
                if out.new_token_ids:
                    entry.setdefault("first", now)
                    entry["out"] = entry.get("out", 0) + len(out.new_token_ids)
                if out.finish_reason is not None:
                    entry["finish"] = now
                    entry["status"] = "finished"
                    done.append(entry)
        for entry in done:
            with self.lock:
                self.requests.pop(entry["id"], None)
                self.unscheduled.discard(entry["id"])
            self.write(entry)

    def on_finish_requests(self, request_ids: Any) -> None:
        if request_ids is None:
            return
        ids = [request_ids] if isinstance(request_ids, str) else list(request_ids)
        for rid in ids:
            with self.lock:
                entry = self.requests.pop(str(rid), None)
                self.unscheduled.discard(str(rid))
            if entry is not None:
                self.write({**entry, "finish": _now(), "status": "aborted"})

    # ---------------------------------------------------------------- NIXL worker side

    def on_read(self, worker: Any, kwargs: dict[str, Any], started: float) -> None:
        rid = str(kwargs.get("request_id"))
        spec = kwargs.get("read_spec")
        blocks = 0
        with contextlib.suppress(TypeError):
            local = getattr(spec, "local_block_ids", None) or []
            blocks = sum(len(g) for g in local) if local and isinstance(local[0], list | tuple) else len(local)
        self._watch_telemetry(worker)
        with self.lock:
            read = self.reads.get(rid)
            if read is None:
                read = self.reads[rid] = {
                    "ev": "read",
                    "id": rid,
                    "remote_id": kwargs.get("remote_request_id"),
                    "engine": kwargs.get("dst_engine_id"),
                    "local_engine": getattr(worker, "engine_id", None),
                    "start": started,
                    "blocks": 0,
                    "reads": 0,
                    "handles": [],
                }
            read["blocks"] += blocks
            read["reads"] += 1
            read["posted"] = _now()
            transfers = getattr(worker, "_recving_transfers", None)
            handles = transfers.get(rid) if isinstance(transfers, dict) else None
            if handles:
                read["handles"] = [id(h) for h in handles][-64:]

    def _watch_telemetry(self, worker: Any) -> None:
        """Keep NIXL's per-handle telemetry (bytes, transfer time) as vLLM reads it on completion."""
        wrapper = getattr(worker, "nixl_wrapper", None)
        if wrapper is None or getattr(wrapper, "_canary_timing", False):
            return
        original = getattr(wrapper, "get_xfer_telemetry", None)
        if original is None:
            return
        recorder = self

        def get_xfer_telemetry(handle: Any) -> Any:
            res = original(handle)
            with contextlib.suppress(Exception):
                if res is not None:
                    recorder.telemetry[id(handle)] = (int(res.totalBytes), float(res.xferDuration) / 1e6)
                    if len(recorder.telemetry) > MAX_OPEN:
                        recorder.telemetry.pop(next(iter(recorder.telemetry)))
            return res

        with contextlib.suppress(Exception):
            wrapper.get_xfer_telemetry = get_xfer_telemetry
            wrapper._canary_timing = True

    def on_pop_done(self, result: Any) -> None:
        done, failed = result if isinstance(result, tuple) and len(result) == 2 else (set(), set())
        now = _now()
        finished: list[dict[str, Any]] = []
        with self.lock:
            for rid in list(done or ()) + list(failed or ()):
                read = self.reads.pop(str(rid), None)
                if read is None:
                    continue
                read["done"] = now
                read["ok"] = rid not in (failed or ())
                handles = read.pop("handles", [])
                seen = [self.telemetry.pop(h) for h in handles if h in self.telemetry]
                if seen:
                    read["bytes"] = sum(b for b, _ in seen)
                    read["nixl_s"] = sum(s for _, s in seen)
                finished.append(read)
        for read in finished:
            self.write(read)


# --------------------------------------------------------------------------- hooking


def _arg(args: tuple[Any, ...], kwargs: dict[str, Any], index: int, name: str) -> Any:
    return args[index] if len(args) > index else kwargs.get(name)


def _after(recorder: TimingRecorder, hook: str, method: str, original: Callable[..., Any]) -> Callable[..., Any]:
    """The wrapper of one hook point: the original call, then the recorder (never raising)."""

    @functools.wraps(original)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        started = _now() if method == "_read_blocks" else 0.0
        result = original(self, *args, **kwargs)
        if hook in recorder.broken:
            return result
        try:
            if method == "add_request":
                recorder.on_add(_arg(args, kwargs, 0, "request"))
            elif method == "schedule":
                recorder.on_schedule(result)
            elif method == "update_from_output":
                recorder.on_output(_arg(args, kwargs, 1, "model_runner_output"), result)
            elif method == "_set_kv_fetch_stage":
                recorder.on_stage(_arg(args, kwargs, 0, "request"), _arg(args, kwargs, 1, "stage"))
            elif method == "finish_requests":
                recorder.on_finish_requests(_arg(args, kwargs, 0, "request_ids"))
            elif method == "_read_blocks":
                names = ("read_spec", "dst_engine_id", "request_id", "remote_request_id")
                named = {n: _arg(args, kwargs, i, n) for i, n in enumerate(names)}
                recorder.on_read(self, named, started)
            elif method == "_pop_done_transfers":
                recorder.on_pop_done(result)
        except Exception as exc:
            recorder.broken.add(hook)
            recorder.hook_status(hook, f"error: {type(exc).__name__}: {exc}")
        return result

    return wrapper


def install_hooks(recorder: TimingRecorder, module: ModuleType) -> None:
    """Wrap the hook points of one freshly imported module."""
    for class_name, method in HOOKS.get(module.__name__, []):
        hook = f"{module.__name__}.{class_name}.{method}"
        cls = getattr(module, class_name, None)
        original = getattr(cls, method, None) if cls is not None else None
        if original is None:
            what = f"class {class_name}" if cls is None else f"method {method}"
            recorder.hook_status(hook, f"missing: no {what} in this vLLM")
            continue
        setattr(cls, method, _after(recorder, hook, method, original))
        recorder.hook_status(hook, "installed")


def install() -> TimingRecorder | None:
    """Install the import hook when CANARY_LAYOUT_DIR is set (sitecustomize calls this)."""
    directory = os.environ.get(LAYOUT_DIR_ENV, "")
    if not directory:
        return None
    recorder = TimingRecorder(directory)

    def on_error(name: str, exc: Exception) -> None:
        recorder.hook_status(name, f"error: {type(exc).__name__}: {exc}")

    install_after_import(AfterImport(HOOKS.__contains__, functools.partial(install_hooks, recorder), on_error))
    return recorder
