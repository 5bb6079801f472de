"""`canary bisect --images` on the container target, over three locally built image tags (no stand-ins).

The tags play a row of nightly images, built here from the CPU engine image (`make images-cpu`) by the
container target's own derived-image build, each with a prefix of the seeded bisect series
(tests/faults/bisect-series: 7 comment-only patches, #5 corrupts KV beyond the first block in P/D):

    nightly-1  the image as built             good
    nightly-2  patches 01-05                  bad: the first bad image (inside the range, not its end)
    nightly-3  all 8                          bad

A real container-target run of configs/selftest.yaml on nightly-3 (parity only) turns its P/D cell red;
`canary bisect RUN --cell pd. --images nightly-1 nightly-2 nightly-3` must name nightly-2 in 3 cell runs
(the bad end rerun red, the good end green, then nightly-2 red), and leave no container behind. About
5 minutes on 2 cores; four tags (one more search step) took 6.7 min.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from canary import cli
from canary.bisect.model import BISECT_JSON
from canary.config.load import load_config
from canary.images.patchseries import read_series
from canary.images.table import cpu_engine_ref
from canary.paths import CONFIGS_DIR, REPO_ROOT
from canary.targets.container.target import ContainerTarget
from canary.targets.container_cli import MANAGED_LABEL, find_cli

pytestmark = [pytest.mark.engine, pytest.mark.slow, pytest.mark.timeout(2400)]

SERIES = REPO_ROOT / "tests" / "faults" / "bisect-series" / "series"
NIGHTLY = "localhost/vllm-canary-nightly"
PREFIXES = {"nightly-1": 0, "nightly-2": 5, "nightly-3": 8}
ONLY_PARITY = [
    "target.kind=container",
    "checks.accuracy.enabled=false",
    "checks.throughput.enabled=false",
    "checks.kv_transfer.enabled=false",
    # five prompts, four loading 2-7 blocks of 32 (fault 07 corrupts every block after the first),
    # instead of selftest.yaml's ~10 block-relative ones with a 2031-token prompt: the agg cell's
    # reference and null arm took 38 s of each run
    "checks.parity.block_relative=false",
    "checks.parity.prompt_lengths=[8, 50, 70, 130, 200]",
]


def _prefix_series(k: int, where: Path) -> Path:
    """The first k patches of the seeded series as a series file of its own."""
    where.mkdir(parents=True)
    patches = read_series(SERIES).patches[:k]
    for patch in patches:
        shutil.copy(patch, where / patch.name)
    (where / "series").write_text("".join(f"{p.name}\n" for p in patches), encoding="utf-8")
    return where / "series"


@pytest.fixture(scope="module")
def nightly_tags(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[str]]:
    podman = find_cli(None)
    base = cpu_engine_ref()
    assert podman.image_inspect(base) is not None, f"{base} not built: run `make images-cpu` (make test does)"
    scratch = tmp_path_factory.mktemp("nightly")
    tags = []
    for name, k in PREFIXES.items():
        ref = f"{NIGHTLY}:{name}"
        source = base
        if k:
            series = _prefix_series(k, scratch / name)
            config = load_config(CONFIGS_DIR / "selftest.yaml", [*ONLY_PARITY, f"images.baseline.patches={series}"])
            source = ContainerTarget(config, cache_dir=scratch / "cache").resolve_image("baseline")
        podman.check("tag", source, ref, what=f"tag {ref}")
        tags.append(ref)
    ids = {str((podman.image_inspect(ref) or {}).get("Id")) for ref in tags}
    assert len(ids) == len(tags), f"the tags are not {len(tags)} images: {ids}"
    yield tags
    for ref in tags:
        podman.call("untag", ref, ref, what=f"untag {ref}")  # this name only: nightly-1 is the engine image itself
    assert podman.image_inspect(base) is not None, f"removing the test's tags took {base} with them"


def test_bisect_over_three_local_tags_names_the_first_bad_image(nightly_tags: list[str], tmp_path: Path) -> None:
    podman = find_cli(None)
    # the P/D cell only: its parity reference then comes from its own prefill server (no aggregated
    # control deployed, in the run or in any bisect step)
    argv = ["run", str(CONFIGS_DIR / "selftest.yaml"), "--results-dir", str(tmp_path), "--only", "pd."]
    for override in [*ONLY_PARITY, f"target.container.images.baseline={nightly_tags[-1]}"]:
        argv += ["--set", override]
    assert cli.main(argv) == cli.EXIT_FAILED_CELLS  # the P/D cell is red on nightly-3
    run_dir = (tmp_path / "latest").resolve()
    results = json.loads((run_dir / "results.json").read_text())
    pd = next(c for c in results["cells"] if c["cell"]["id"].startswith("pd."))
    checks = {c["name"]: c for c in pd["checks"]}
    assert checks["parity"]["verdict"] == "fail", checks
    facts = checks["startup"]["evidence"]["image_facts"]
    assert {f["ref"] for f in facts.values()} == {nightly_tags[-1]}, facts  # the image it ran, per role
    assert all(f["digest"] and f["vllm_version"] for f in facts.values()), facts

    assert cli.main(["bisect", str(run_dir), "--cell", "pd.", "--images", *nightly_tags]) == 0
    (report,) = json.loads((run_dir / BISECT_JSON).read_text())["bisections"]
    assert report["outcome"] == "found", report["reason"]
    assert report["culprit"]["name"] == nightly_tags[1]
    observed = [(s["phase"], s["point"], s["observation"]) for s in report["steps"]]
    assert observed == [("bad-end", 2, "bad"), ("good-end", 0, "good"), ("search", 1, "bad")], observed
    assert report["cell_runs"] == 3, report["cell_runs"]
    assert podman.labelled(f"{MANAGED_LABEL}=true") == [], "a bisect step left a container behind"
