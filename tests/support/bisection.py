"""A finished run directory to bisect without engines: the sample run (tests/support/sample.py: the
CPU matrix on a baseline and a candidate image) written with every report, its config.json with the
candidate image's patch series set to the seeded 8-patch series of tests/faults/bisect-series, and
scripted judges that stand in for the cell runs of a step (the search, the files and the reports
are the real ones)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from canary.bisect.search import Judgement
from canary.config import CanaryConfig
from canary.config.load import validate_config
from canary.export.report import write_all
from canary.judge.results import RunResult
from canary.paths import REPO_ROOT
from canary.run.orchestrate import RUN_CONFIG_NAME
from tests.support.sample import sample_config, sample_run

SERIES = REPO_ROOT / "tests" / "faults" / "bisect-series" / "series"
CULPRIT = "05-nixl-kv-beyond-first-block.patch"
SLOW_CANDIDATE = "agg.cpu_attn.b32.auto.v1.candidate"
"""Fails on the candidate (45% slower), passes on the baseline: bisected."""
NO_KV_CANDIDATE = "pd.cpu_attn.p128-d128.auto.v1.candidate"
"""Fails on the candidate (no KV transfer), passes on the baseline: bisected."""


def config_with_series(series: Path | None = SERIES) -> CanaryConfig:
    """The sample config, the candidate image with `series` as its patches (None: none)."""
    data = sample_config().model_dump(mode="json")
    data["images"]["candidate"]["patches"] = None if series is None else str(series)
    return validate_config(data, "tests.support.bisection")


def write_run_dir(root: Path, run: RunResult | None = None, config: CanaryConfig | None = None) -> Path:
    """ROOT/<run id>/ with every report of the run (sample_run by default) and its config.json."""
    run = run or sample_run()
    config = config or config_with_series()
    run_dir = root / run.run_id
    run_dir.mkdir(parents=True)
    write_all(run, run_dir)
    (run_dir / RUN_CONFIG_NAME).write_text(config.model_dump_json(), encoding="utf-8")
    return run_dir


def culprit_at(first_bad: int) -> Callable[[int], Judgement]:
    """A judge: points from `first_bad` on fail (the candidate's check), those before pass."""

    def judge(point: int) -> Judgement:
        verdict = "fail" if point >= first_bad else "pass"
        observation = "bad" if point >= first_bad else "good"
        return Judgement(observation, f"{verdict}: scripted at prefix {point}", {"verdict": verdict})

    return judge


def always_failing(point: int) -> Judgement:
    """A judge: every prefix fails, also no patch at all (the failure is not the series')."""
    return Judgement("bad", f"fail: scripted at prefix {point}", {"verdict": "fail"})
