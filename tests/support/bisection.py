"""A finished run directory to bisect without engines: the sample run (tests/support/sample.py: the
CPU matrix on a baseline and a candidate image) written with every report, its config.json with the
candidate image's patch series set to the seeded 8-patch series of tests/faults/bisect-series, and
scripted judges that stand in for the cell runs of a step (the search, the files and the reports
are the real ones); and a bisect.json of that run as the search writes one (`sample_bisections`)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from pathlib import Path

from canary.bisect.model import patch_subject
from canary.bisect.search import Judgement
from canary.config import CanaryConfig
from canary.config.load import validate_config
from canary.export.report import write_all
from canary.images.patchseries import read_series
from canary.judge.bisection import BisectFile, BisectReport, Culprit, StepRecord, point_label
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
_STARTED = dt.datetime(2026, 12, 2, 16, 0, tzinfo=dt.UTC)


def _step(number: int, point: int, phase: str, verdict: str, seconds: float) -> StepRecord:
    return StepRecord(
        number=number,
        point=point,
        label=point_label("series", read_series(SERIES).names, point),
        phase=phase,  # type: ignore[arg-type]
        observation="bad" if verdict == "fail" else "good",
        detail=f"{verdict}: parity {'5/10 prompts beyond the null floor' if verdict == 'fail' else 'held'}",
        evidence={"verdict": verdict},
        duration_s=seconds,
    )


def sample_bisections(run_id: str) -> BisectFile:
    """A bisect.json as the search writes it, for the sample run's two red candidate cells: the slow
    cell found at patch 5 in 5 steps of ~50 s, the no-KV cell inconclusive (the good end fails too)."""
    steps = [(8, "bad-end", "fail"), (0, "good-end", "pass"), (4, "search", "pass"), (6, "search", "fail")]
    steps.append((5, "search", "fail"))
    found = BisectReport(
        cell=SLOW_CANDIDATE,
        image="candidate",
        range_kind="series",
        range=read_series(SERIES).names,
        series=str(SERIES),
        rerun_checks=["throughput"],
        policy={"confirm": 1},
        outcome="found",
        reason="first bad: patches 01..05 (failed 2 of 2 runs); last good: patches 01..04 (passed 1 of 1)",
        culprit=Culprit(
            position=5,
            name=CULPRIT,
            subject=patch_subject(read_series(SERIES).patches[4]),
            path=str(read_series(SERIES).patches[4]),
        ),
        last_good=4,
        first_bad=5,
        steps=[_step(i, p, ph, v, 48.0 + i) for i, (p, ph, v) in enumerate(steps, start=1)],
        cell_runs=5,
        started_at=_STARTED,
        finished_at=_STARTED + dt.timedelta(minutes=4),
        duration_s=252.0,
    )
    unclear = found.model_copy(
        update={
            "cell": NO_KV_CANDIDATE,
            "outcome": "inconclusive",
            "reason": "the good end (no patch (the image without its series)) fails too",
            "culprit": None,
            "steps": found.steps[:2],
            "cell_runs": 2,
        }
    )
    return BisectFile(run_id=run_id, bisections=[found, unclear])


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
