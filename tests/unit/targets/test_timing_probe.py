"""The engine-side timing recorder (canary/targets/engine_site/timing_probe.py) on stand-in classes with
vLLM's names and signatures (the real hook points are pinned by tests/source/test_source_timing_probe.py;
the real engines run it in tests/integration/test_pd_time.py): what it writes, that it never changes a
call, that a hook point it cannot find or a hook that fails is recorded, not raised, and that the file
stays bounded."""

from __future__ import annotations

import json
import types
from pathlib import Path
from typing import Any

import pytest

from canary.targets.engine_site import timing_probe as tp


class _Request:
    def __init__(self, rid: str, cid: str | None, kv: dict[str, Any] | None = None) -> None:
        self.request_id = rid
        self.arrival_time = 1.0
        self.num_prompt_tokens = 64
        self.num_output_tokens = 0
        self.sampling_params = types.SimpleNamespace(extra_args={tp.CLIENT_ID_KEY: cid} if cid else None)
        self.kv_transfer_params = kv


class _Out:
    def __init__(self, rid: str, tokens: list[int], finish: str | None = None) -> None:
        self.request_id, self.new_token_ids, self.finish_reason = rid, tokens, finish


def _scheduler_module() -> types.ModuleType:
    module = types.ModuleType(tp.SCHEDULER)

    class Scheduler:
        def __init__(self) -> None:
            self.requests: dict[str, _Request] = {}

        def add_request(self, request: _Request) -> None:
            self.requests[request.request_id] = request

        def schedule(self) -> Any:
            return types.SimpleNamespace(num_scheduled_tokens={r: 1 for r in self.requests})

        def update_from_output(self, scheduler_output: Any, model_runner_output: Any) -> dict[int, Any]:
            outs = [_Out(r, [7], "length") for r in self.requests]
            for r in self.requests.values():
                r.num_output_tokens = 1
            return {0: types.SimpleNamespace(outputs=outs)}

        def _set_kv_fetch_stage(self, request: _Request, stage: str | None) -> None:
            pass

        def finish_requests(self, request_ids: Any, finished_status: Any) -> str:
            return "finished-by-vllm"

    module.Scheduler = Scheduler  # type: ignore[attr-defined]
    return module


def _lines(directory: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for p in sorted(directory.glob("timing.*.jsonl")) for x in p.read_text().splitlines()]


def test_a_request_is_written_once_it_finishes(tmp_path: Path) -> None:
    recorder = tp.TimingRecorder(str(tmp_path))
    module = _scheduler_module()
    tp.install_hooks(recorder, module)
    scheduler = module.Scheduler()
    kv = {"do_remote_prefill": True, "remote_request_id": "p-1", "remote_engine_id": "e", "remote_block_ids": [[1, 2]]}
    scheduler.add_request(_Request("d-1", "tp0-ab-3", kv))
    scheduler._set_kv_fetch_stage(scheduler.requests["d-1"], "in_progress")
    scheduler._set_kv_fetch_stage(scheduler.requests["d-1"], "completed_waiting")
    scheduler.update_from_output(scheduler.schedule(), types.SimpleNamespace(kv_connector_output=None))
    lines = _lines(tmp_path)
    assert lines[0]["ev"] == "start" and {"wall", "mono", "pid"} <= set(lines[0])
    assert {line["name"] for line in lines if line["ev"] == "hook"} == {
        f"{tp.SCHEDULER}.Scheduler.{m}" for _, m in tp.HOOKS[tp.SCHEDULER]
    }
    (req,) = [line for line in lines if line["ev"] == "req"]
    assert req["id"] == "d-1" and req["cid"] == "tp0-ab-3" and req["status"] == "finished" and req["out"] == 1
    assert req["remote_prefill"] and req["remote_id"] == "p-1" and req["remote_blocks"] == 2
    assert req["add"] <= req["wait"] <= req["kv_ready"] <= req["sched"] <= req["first"] <= req["finish"]
    assert req["sched_tokens"] == 1


def test_a_call_is_never_changed_and_a_failing_hook_is_recorded(tmp_path: Path) -> None:
    recorder = tp.TimingRecorder(str(tmp_path))
    module = _scheduler_module()
    tp.install_hooks(recorder, module)
    scheduler = module.Scheduler()
    assert scheduler.finish_requests(["nobody"], "aborted") == "finished-by-vllm"
    scheduler.update_from_output(None, types.SimpleNamespace(kv_connector_output=None))  # nothing tracked
    # an output object without the fields the recorder reads (a vLLM that renamed them): the hook records
    # its error, vLLM's result goes back unchanged
    broken = {0: types.SimpleNamespace(outputs=[object()])}
    scheduler.add_request(_Request("x", "c"))
    wrapped = tp._after(recorder, "h.update_from_output", "update_from_output", lambda self, a, b: broken)
    assert wrapped(scheduler, None, None) is broken
    assert wrapped(scheduler, None, None) is broken  # once broken, the hook stays out of the way
    statuses = [line["status"] for line in _lines(tmp_path) if line.get("name") == "h.update_from_output"]
    assert len(statuses) == 1 and statuses[0].startswith("error: AttributeError")


def test_a_missing_hook_point_is_recorded_as_missing(tmp_path: Path) -> None:
    recorder = tp.TimingRecorder(str(tmp_path))
    module = types.ModuleType(tp.NIXL_PULL)
    tp.install_hooks(recorder, module)
    (line,) = [x for x in _lines(tmp_path) if x["ev"] == "hook"]
    assert line["status"] == "missing: no class NixlPullConnectorWorker in this vLLM"


def test_an_abort_is_written_and_the_open_set_is_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tp, "MAX_OPEN", 2)
    recorder = tp.TimingRecorder(str(tmp_path))
    module = _scheduler_module()
    tp.install_hooks(recorder, module)
    scheduler = module.Scheduler()
    for i in range(3):
        scheduler.add_request(_Request(f"r{i}", f"c{i}"))
    scheduler.finish_requests("r2", "aborted")
    statuses = {line["id"]: line["status"] for line in _lines(tmp_path) if line["ev"] == "req"}
    assert statuses == {"r0": "evicted", "r2": "aborted"}


def test_the_file_stops_at_its_size_bound(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tp, "MAX_BYTES", 600)
    recorder = tp.TimingRecorder(str(tmp_path))
    for i in range(50):
        recorder.write({"ev": "req", "id": f"r{i}", "cid": None, "status": "finished"})
    (path,) = tmp_path.glob("timing.*.jsonl")
    lines = path.read_text().splitlines()
    assert json.loads(lines[-1])["ev"] == "truncated" and path.stat().st_size < 700
    recorder.write({"ev": "req", "id": "late"})
    assert path.read_text().splitlines() == lines


def test_a_kv_read_is_timed_from_its_first_post_to_its_completion(tmp_path: Path) -> None:
    recorder = tp.TimingRecorder(str(tmp_path))
    pull, base = types.ModuleType(tp.NIXL_PULL), types.ModuleType(tp.NIXL_BASE)
    handle = object()

    class Telemetry:
        totalBytes = 4096  # NIXL's name
        xferDuration = 250.0  # microseconds

    class Wrapper:
        def get_xfer_telemetry(self, h: object) -> Telemetry:
            return Telemetry()

    class NixlBaseConnectorWorker:
        engine_id = "decode-engine"

        def __init__(self) -> None:
            self.nixl_wrapper = Wrapper()
            self._recving_transfers: dict[str, list[object]] = {}

        def _pop_done_transfers(self, transfers: dict[str, list[object]]) -> tuple[set[str], set[str]]:
            for handles in transfers.values():
                for h in handles:
                    self.nixl_wrapper.get_xfer_telemetry(h)
            done = set(transfers)
            transfers.clear()
            return done, set()

    class NixlPullConnectorWorker(NixlBaseConnectorWorker):
        def _read_blocks(self, read_spec: Any, dst_engine_id: str, request_id: str, remote_request_id: str) -> bool:
            self._recving_transfers.setdefault(request_id, []).append(handle)
            return True

    base.NixlBaseConnectorWorker = NixlBaseConnectorWorker  # type: ignore[attr-defined]
    pull.NixlPullConnectorWorker = NixlPullConnectorWorker  # type: ignore[attr-defined]
    tp.install_hooks(recorder, base)
    tp.install_hooks(recorder, pull)
    worker = NixlPullConnectorWorker()
    spec = types.SimpleNamespace(local_block_ids=[[1, 2, 3]])
    assert worker._read_blocks(read_spec=spec, dst_engine_id="p", request_id="d-1", remote_request_id="p-1")
    worker._pop_done_transfers(worker._recving_transfers)
    (read,) = [x for x in _lines(tmp_path) if x["ev"] == "read"]
    assert read["id"] == "d-1" and read["remote_id"] == "p-1" and read["engine"] == "p" and read["ok"]
    assert read["blocks"] == 3 and read["bytes"] == 4096 and read["nixl_s"] == pytest.approx(0.00025)
    assert read["start"] <= read["posted"] <= read["done"] and read["local_engine"] == "decode-engine"


def test_the_client_id_key_is_the_load_generators() -> None:
    """One fact in two places that cannot import each other (the engine site imports nothing of canary)."""
    from canary.load.workload import CLIENT_ID_KEY

    assert tp.CLIENT_ID_KEY == CLIENT_ID_KEY
