"""LoadSession: many load runs in one load process, against a STAND-IN server (tests/support/scripted_server.py,
not vLLM). Each run gives what run_load gives for the same spec; a run the process cannot do is a LoadError
that leaves the session usable; the process (and its group) is gone after the `with` block, also on an error."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from canary.load.launch import LoadError, LoadSession, run_load
from canary.load.workload import WorkloadSpec
from tests.support.scripted_server import ScriptedServer

TTFT_S, ITL_S, TOKENS = 0.02, 0.01, 8


@pytest.fixture(scope="module")
def standin() -> Iterator[ScriptedServer]:
    """A stand-in for vLLM (not vLLM): scripted timing."""
    with ScriptedServer(ttft_s=TTFT_S, itl_s=ITL_S) as server:
        yield server


def _spec(server: ScriptedServer, **changes: object) -> WorkloadSpec:
    base: dict[str, object] = {
        "base_url": server.url,
        "model": server.model,
        "prompt_tokens": 8,
        "output_tokens": TOKENS,
        "concurrency": 2,
        "num_requests": 6,
        "max_duration_s": 30.0,
        "token_pool": list(range(100, 140)),
        "seed": 1,
        "max_client_lag_p99_s": 1.0,
        "max_client_cpu_ratio": 1.0,
    }
    base.update(changes)
    return WorkloadSpec.model_validate(base)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_one_process_serves_many_runs_like_run_load(standin: ScriptedServer, tmp_path: Path) -> None:
    with LoadSession(tmp_path / "session.log") as session:
        assert session._proc is not None
        pid = session._proc.pid
        first = session.run(_spec(standin, seed=1), tmp_path, "w0")
        second = session.run(_spec(standin, seed=2, num_requests=4, open_loop=True, request_rate=20.0), tmp_path, "w1")
        assert session._proc is not None and session._proc.pid == pid  # the same process did both
    alone = run_load(_spec(standin, seed=1), tmp_path, name="alone")
    assert len(first.samples) == 6 and len(second.samples) == 4
    assert all(s.error is None and s.output_tokens == TOKENS for s in first.samples + second.samples)
    assert first.metrics["requests_total"] == alone.metrics["requests_total"] == 6
    # same seed, same prompts: the session's run sent what a run of its own would have sent
    assert sorted(s.prompt_tokens for s in first.samples) == sorted(s.prompt_tokens for s in alone.samples)
    assert (tmp_path / "w0.json").exists() and (tmp_path / "w1.json").exists()
    assert not _alive(pid)


def test_a_run_it_cannot_do_is_an_error_and_the_session_goes_on(standin: ScriptedServer, tmp_path: Path) -> None:
    with LoadSession(tmp_path / "session.log") as session:
        with pytest.raises(LoadError, match=r"spec\.workers must be 0"):
            session.run(_spec(standin, workers=2, concurrency=2), tmp_path, "bad")
        after = session.run(_spec(standin), tmp_path, "good")
    assert len(after.samples) == 6


def test_the_process_is_stopped_when_the_block_raises(standin: ScriptedServer, tmp_path: Path) -> None:
    with pytest.raises(KeyboardInterrupt), LoadSession(tmp_path / "session.log") as session:
        assert session._proc is not None
        pid = session._proc.pid
        raise KeyboardInterrupt
    assert not _alive(pid)
    with pytest.raises(LoadError, match="not running"):
        session.run(_spec(standin), tmp_path, "late")


def test_the_client_runs_on_the_cores_its_spec_names(standin: ScriptedServer, tmp_path: Path) -> None:
    """spec.client_cpus (the target's helper cores) places the load process; None leaves it where it was."""
    import json

    everywhere = sorted(os.sched_getaffinity(0))
    with LoadSession(tmp_path / "session.log") as session:
        session.run(_spec(standin, client_cpus=[everywhere[-1]]), tmp_path, "placed")
    run_load(_spec(standin), tmp_path, name="free")
    placed = json.loads((tmp_path / "placed.json").read_text(encoding="utf-8"))
    free = json.loads((tmp_path / "free.json").read_text(encoding="utf-8"))
    assert placed["client_cpus"] == [everywhere[-1]]
    assert free["client_cpus"] == everywhere
