"""Start phases read from a vLLM log's own stamps (canary/checks/startup/phases.py)."""

from __future__ import annotations

from datetime import datetime

from canary.checks.startup.phases import milestones, phases, slowest

LAUNCH = datetime(2026, 11, 30, 17, 51, 40).timestamp()


def _log(engine_core: bool = True, year_end: bool = False) -> str:
    day = "12-31 23:59" if year_end else "11-30 17:51"
    lines = [
        "# canary: python -m vllm.entrypoints.openai.api_server ...",
        "/venv/.../api_server.py:24: DeprecationWarning: ...",
        f"(APIServer pid=1) INFO {day}:56 [api_utils.py:347] version 0.33.0",
        f"(APIServer pid=1) INFO {day}:57 [model.py:733] Resolved architecture: LlamaForCausalLM",
    ]
    prefix = "(EngineCore pid=2)" if engine_core else "(APIServer pid=1)"
    lines += [
        f"{prefix} INFO 11-30 17:52:06 [core.py:133] Initializing a V1 LLM engine",
        f"{prefix} INFO 11-30 17:52:07 [default_loader.py:501] Loading weights took 0.01 seconds",
        f"{prefix} INFO 11-30 17:52:09 [core.py:402] init engine (profile, create kv cache, warmup model) took 0.59 s",
        "(APIServer pid=1) INFO 11-30 17:52:10 [entry.py:140] Starting vLLM server on http://127.0.0.1:8000",
        "(APIServer pid=1) INFO 11-30 17:52:55 [launcher.py:195] Route: /health, Methods: GET",
    ]
    return "\n".join(lines)


def test_phases_split_the_start_at_the_logs_milestones() -> None:
    record = phases(_log(), LAUNCH, ready_seconds=31.0)
    assert record["seconds"] == {
        "python_imports": 16.0,
        "engine_core_start": 10.0,
        "engine_init": 0.59,
        "model_load": 0.01,
        "api_server_up": 1.0,
        "readiness": 1.0,
    }
    assert record["missing"] == []
    assert slowest({"prefill": record}) == "prefill python imports 16s"


def test_milestones_stop_at_serving_and_a_missing_engine_core_is_reported_not_guessed() -> None:
    record = phases(_log(engine_core=False), LAUNCH, ready_seconds=31.0)
    assert "engine_core_start" not in record["seconds"]
    assert record["missing"] == ["engine_core_start"]
    assert milestones(_log(), LAUNCH).serving == datetime(2026, 11, 30, 17, 52, 10).timestamp()


def test_a_log_without_stamps_yields_no_phase_but_the_readiness_gap_is_unknown_too() -> None:
    record = phases("plain text\nno stamps here", LAUNCH, ready_seconds=12.0)
    assert record["seconds"] == {}
    assert len(record["missing"]) == 6


def test_stamps_without_a_year_take_the_year_nearest_the_launch() -> None:
    new_year_launch = datetime(2027, 1, 1, 0, 0, 5).timestamp()
    marks = milestones(_log(year_end=True), new_year_launch)
    assert marks.first_line == datetime(2026, 12, 31, 23, 59, 56).timestamp()


def test_stamps_from_another_clock_keep_only_the_unstamped_phases() -> None:
    two_hours_later = LAUNCH + 7200  # the log written in another time zone than the launcher's
    record = phases(_log(), two_hours_later, ready_seconds=31.0)
    assert record["seconds"] == {"engine_init": 0.59, "model_load": 0.01}
    assert "python_imports" in record["missing"]
