"""The one-line starts: `canary check URL` and `canary run --image REF` (canary/run/quickstart.py).

`canary check` runs end to end against the ScriptedServer STAND-IN (real HTTP, scripted timing, no /metrics,
no text worth grading) and the endpoint tests' STAND-IN with `vllm:cache_config_info`; the real-engine run is
tests/integration/test_check_command.py. `canary run --image` is dry-run (podman renders the containers,
starts none) and refused for an image podman does not have.
"""

from __future__ import annotations

import json
import shutil
import threading
from collections.abc import Iterator
from http.server import ThreadingHTTPServer
from pathlib import Path

import pytest

from canary import cli
from canary.images.table import cpu_engine_ref
from canary.paths import CONFIGS_DIR
from canary.run.quickstart import CheckRequest, EndpointFacts, check_config, discover, image_overrides
from tests.support.scripted_server import ScriptedServer
from tests.unit.targets.test_endpoint_target import StandInServer


def _main(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


# --------------------------------------------------------------------------- canary check: refusals


def test_a_url_without_a_scheme_exits_2_at_once_naming_it(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _main(capsys, "check", "127.0.0.1:8000")
    assert code == 2
    assert "URL '127.0.0.1:8000': no http:// or https:// scheme" in err


def test_a_bad_metrics_url_is_named_by_its_flag(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _main(
        capsys, "check", "http://127.0.0.1:1", "--prefill-metrics-url", "p:1/metrics", "--decode-metrics-url", "x"
    )
    assert code == 2
    assert "--prefill-metrics-url 'p:1/metrics'" in err


def test_a_router_without_its_engines_metrics_is_refused_before_any_wait(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _main(capsys, "check", "http://127.0.0.1:1", "--topology", "pd-nixl", "--ready-timeout", "600")
    assert code == 2  # at once: the 600 s wait for a URL nothing serves never starts
    assert "pd-nixl needs --prefill-metrics-url and --decode-metrics-url" in err


def test_nothing_serving_is_a_named_error(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _main(capsys, "check", "http://127.0.0.1:1", "--ready-timeout", "1")
    assert code == 1
    assert "http://127.0.0.1:1 is not ready after 1 s (--ready-timeout)" in err


# --------------------------------------------------------------------------- canary check: a run


@pytest.fixture(scope="module")
def scripted() -> Iterator[ScriptedServer]:
    with ScriptedServer(0.01, 0.002, model="scripted") as server:
        yield server


def test_check_runs_one_cell_against_a_stand_in_with_runs_outcome_and_files(
    scripted: ScriptedServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    results = tmp_path / "results"
    code, out, err = _main(capsys, "check", scripted.url, "--gsm8k", "off", "--results-dir", str(results))
    assert code == 0, err
    assert "live config not verified" in err and "/metrics" in err  # the stand-in has no /metrics: said, not hidden
    assert "OK: 1 cell" in out  # the outcome line of `canary run`
    run = json.loads((results / "latest" / "results.json").read_text())
    (cell,) = run["cells"]
    assert cell["cell"]["id"] == "agg.cpu_attn.b128.auto.v1.endpoint"
    assert [c["name"] for c in cell["checks"]] == ["startup", "throughput"]  # no control: no parity; gsm8k off
    throughput = next(c for c in cell["checks"] if c["name"] == "throughput")
    assert throughput["metrics"]["requests_per_s"] > 0
    assert json.loads((results / "latest" / "config.json").read_text())["target"]["endpoint"]["url"] == scripted.url


def test_a_model_the_endpoint_does_not_serve_exits_2_naming_what_it_serves(
    scripted: ScriptedServer, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = _main(capsys, "check", scripted.url, "--model", "llama", "--gsm8k", "off")
    assert code == 2
    assert "--model 'llama'" in err and "lists scripted" in err


def test_a_bad_set_is_blamed_on_the_set(scripted: ScriptedServer, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _main(capsys, "check", scripted.url, "--set", "checks.throughput.concurrency=0")
    assert code == 2
    assert "--set checks.throughput.concurrency=0" in err


@pytest.fixture()
def metrics_stand_in() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), StandInServer)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    StandInServer.block_size, StandInServer.healthy = 64, True
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_the_cell_is_what_the_engines_report(metrics_stand_in: str) -> None:
    request = CheckRequest(url=metrics_stand_in, gsm8k="off")
    facts = discover(request)
    assert (facts.model, facts.block_sizes, facts.unread) == ("tiny", {"aggregated": 64}, [])
    config = check_config(request, facts)
    assert config.matrix.prefill_block_sizes == [64]
    assert config.checks.startup.verify_live_config  # read, so verified: a server that changes it fails startup
    assert not config.checks.parity.enabled and not config.checks.throughput.load_parity.enabled


def test_a_router_gets_parity_and_kv_transfer_and_both_block_sizes() -> None:
    request = CheckRequest(
        url="http://127.0.0.1:9",
        prefill_metrics_url="http://127.0.0.1:10/metrics",
        decode_metrics_url="http://127.0.0.1:11/metrics",
        gsm8k="hub",
    )
    facts = EndpointFacts("m", "org/m", 4096, {"prefill": 32, "decode": 64})
    config = check_config(request, facts)
    assert config.target.endpoint is not None and config.target.endpoint.topology == "pd-nixl"
    assert (config.matrix.prefill_block_sizes, config.matrix.decode_block_sizes) == ([32], [64])
    assert config.checks.parity.enabled and config.checks.kv_transfer.enabled
    assert config.checks.accuracy.dataset.source == "hub" and config.checks.accuracy.limit == 50


# --------------------------------------------------------------------------- canary run --image


def test_image_overrides_replace_the_candidate_and_its_facts() -> None:
    overrides = image_overrides(CONFIGS_DIR / "cpu-default.yaml", "registry.example.com/me/vllm:mine")
    assert "target.kind=container" in overrides
    assert 'target.container.images.kernel32="registry.example.com/me/vllm:mine"' in overrides
    assert not any(o.startswith("target.container.images.baseline") for o in overrides)
    kept = json.loads(next(o for o in overrides if o.startswith("matrix.expectations=")).split("=", 1)[1])
    assert all(e["match"].get("image") != "kernel32" for e in kept) and len(kept) == 2  # block 16, p32-d64


NO_PODMAN = "make test installs podman (mk/containers.mk); only `make test-fast` on a bare machine lacks it"


@pytest.mark.skipif(shutil.which("podman") is None, reason=f"podman renders the container commands: {NO_PODMAN}")
def test_run_image_dry_run_shows_ref_in_every_candidate_container(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ref = "registry.example.com/me/vllm-cpu:mine"
    code, out, err = _main(capsys, "run", "--image", ref, "--dry-run", "--all", "--results-dir", str(tmp_path))
    assert code == 0, err
    assert f"a run would stop here: --image {ref}" in err  # not here: rendered, and said
    cells = {c["cell"]: c for c in json.loads(out)["cells"]}
    assert json.loads(out)["target"] == "container"

    def images(cell_id: str) -> dict[str, str]:
        engines = [s for s in cells[cell_id]["servers"] if s["role"] != "router"]  # the router has its own image
        return {s["role"]: s["argv"][s["argv"].index("--entrypoint") + 2] for s in engines}

    baseline = cpu_engine_ref()
    assert images("pd.cpu_attn.p128-d128.auto.v1.kernel32") == {"prefill": ref, "decode": ref}
    assert images("agg.cpu_attn.b128.auto.v1.kernel32") == {"aggregated": ref}
    assert images("pd.cpu_attn.p128-d128.auto.v1.kernel32-baseline") == {"prefill": ref, "decode": baseline}
    assert images("pd.cpu_attn.p128-d128.auto.v1.baseline") == {"prefill": baseline, "decode": baseline}


@pytest.mark.skipif(shutil.which("podman") is None, reason=f"podman is asked whether it has the image: {NO_PODMAN}")
def test_run_image_refuses_an_image_podman_does_not_have(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ref = "localhost/vllm-canary-no-such-image:test"
    code, _, err = _main(capsys, "run", "--image", ref, "--results-dir", str(tmp_path))
    assert code == 2
    assert f"--image {ref}: podman has no image {ref} in local storage" in err
    assert not any(tmp_path.iterdir())  # refused before a run directory was made


def test_run_without_config_or_image_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _main(capsys, "run")
    assert code == 2
    assert "canary run needs a CONFIG" in err
