"""P/D tensor-parallel shapes: prefill and decode TP sizes as cell dimensions (2p1d, 1p2d), in the id, the
matches, the plan table, the GPUs a cell holds, and each role's planned argv and CPU binds."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from canary.config import CanaryConfig, CellMatch
from canary.config.load import validate_config
from canary.errors import ConfigError
from canary.export.report.plan_table import plan_table, shared_values
from canary.paths import REPO_ROOT
from canary.plan.cell import RISK_PD_TP_RATIO, Cell
from canary.plan.matrix import matches, plan
from canary.plan.waves import engine_gpus
from canary.targets.engine_plan import EngineBuild, EnginePlanner, port_names


def _pd(**fields: Any) -> dict[str, Any]:
    return {"backend": "CPU_ATTN", "prefill_block_size": 128, "decode_block_size": 128, "topology": "pd-nixl", **fields}


def _data(*includes: dict[str, Any]) -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((REPO_ROOT / "configs" / "cpu-default.yaml").read_text())
    data["matrix"].update(
        include=list(includes), prefill_block_sizes=[128], topologies=["aggregated"], expectations=[], images=None
    )
    data["images"] = {"baseline": data["images"]["baseline"]}
    return data


def _config(*includes: dict[str, Any], **matrix: Any) -> CanaryConfig:
    data = _data(*includes)
    data["matrix"].update(matrix)
    return validate_config(data, "test")


def _cells(config: CanaryConfig) -> dict[str, Cell]:
    return {c.id: c for c in plan(config).planned()}


def test_include_shapes_get_their_own_ids_risk_and_per_role_sizes() -> None:
    cells = _cells(_config(_pd(prefill_tp=2, decode_tp=1), _pd(prefill_tp=1, decode_tp=2), _pd()))
    assert sorted(cells) == [
        "agg.cpu_attn.b128.auto.v1.baseline",
        "pd.cpu_attn.p128-d128.auto.v1.baseline",  # 1/1: the id it always had
        "pd.cpu_attn.p128-d128.tp1p2d.auto.v1.baseline",
        "pd.cpu_attn.p128-d128.tp2p1d.auto.v1.baseline",
    ]
    two_one = cells["pd.cpu_attn.p128-d128.tp2p1d.auto.v1.baseline"]
    assert (two_one.tp_for("prefill"), two_one.tp_for("decode"), two_one.tp_shape) == (2, 1, "tp2p1d")
    assert RISK_PD_TP_RATIO in two_one.risks and two_one.high_risk
    plain = cells["pd.cpu_attn.p128-d128.auto.v1.baseline"]
    assert (plain.prefill_tp, plain.decode_tp, plain.tp_shape_set) == (1, 1, False)
    assert RISK_PD_TP_RATIO not in plain.risks
    assert "prefill_tp" not in plain.axis_values() and two_one.axis_values()["prefill_tp"] == "2"


def test_dims_cross_prefill_and_decode_sizes_for_pd_cells_only() -> None:
    config = _config(topologies=["aggregated", "pd-nixl"], prefill_tp_sizes=[1, 2], decode_tp_sizes=[1, 2])
    cells = _cells(config)
    shapes = sorted(c.tp_shape for c in cells.values())
    assert shapes == ["tp1", "tp1p1d", "tp1p2d", "tp2p1d", "tp2p2d"]  # the aggregated control keeps the model's
    assert {k: v for k, v in engine_gpus(cells["pd.cpu_attn.p128-d128.tp2p2d.auto.v1.baseline"], config).items()} == {
        "prefill": 2,
        "decode": 2,
    }


def test_a_model_of_tp_two_keeps_its_ids_and_a_shape_off_its_size_is_labelled() -> None:
    data = _data(_pd(decode_tp=1))
    data["models"][0]["tensor_parallel_size"] = 2
    data["matrix"]["topologies"] = ["aggregated", "pd-nixl"]
    cells = _cells(validate_config(data, "tp2 model"))
    assert sorted(cells) == [
        "agg.cpu_attn.b128.auto.v1.baseline",
        "pd.cpu_attn.p128-d128.auto.v1.baseline",
        "pd.cpu_attn.p128-d128.tp2p1d.auto.v1.baseline",
    ]
    assert cells["agg.cpu_attn.b128.auto.v1.baseline"].prefill_tp == 2
    assert cells["pd.cpu_attn.p128-d128.auto.v1.baseline"].tp_shape == "tp2p2d"


def test_cell_match_selects_by_tp_and_expectations_follow() -> None:
    data = _data(_pd(prefill_tp=2, decode_tp=1), _pd(prefill_tp=1, decode_tp=2))
    data["matrix"]["expectations"] = [
        {"match": {"prefill_tp": 2}, "expect": "check-fail", "reason": "a known heterogeneous-TP bug"}
    ]
    cells = _cells(validate_config(data, "test"))
    expected = sorted(c.id for c in cells.values() if c.expect is not None)
    assert expected == ["pd.cpu_attn.p128-d128.tp2p1d.auto.v1.baseline"]
    one_two = cells["pd.cpu_attn.p128-d128.tp1p2d.auto.v1.baseline"]
    assert matches(CellMatch(decode_tp=2), one_two) and not matches(CellMatch(decode_tp=1), one_two)
    assert matches(CellMatch(prefill_tp=1, decode_tp=2, topology="pd-nixl"), one_two)


def test_an_expectation_on_a_shape_the_matrix_lacks_names_the_shapes_it_has() -> None:
    data = _data(_pd(prefill_tp=2, decode_tp=1))
    data["matrix"]["expectations"] = [{"match": {"decode_tp": 4}, "expect": "pass", "reason": "x"}]
    with pytest.raises(ConfigError, match=r"no cell has decode_tp 4 \(the matrix has 1\)"):
        from canary.plan.validate import validate_plan

        validate_plan(validate_config(data, "test"), "test")


@pytest.mark.parametrize(
    ("include", "message"),
    [
        (_pd(topology="aggregated", decode_tp=2), "decode_tp is decode's tensor-parallel size: it needs topology"),
        (_pd(prefill_tp=0), "greater than 0"),
    ],
)
def test_bad_shapes_are_config_errors(include: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        _config(include)


def test_empty_or_duplicate_tp_dims_are_config_errors() -> None:
    with pytest.raises(ConfigError, match="an empty list plans nothing"):
        _config(prefill_tp_sizes=[])
    with pytest.raises(ConfigError, match="duplicate entries"):
        _config(decode_tp_sizes=[2, 2])


def test_plan_table_shows_tp_only_where_a_cell_has_a_shape() -> None:
    without = plan(_config(_pd()))
    assert "TP" in shared_values(without.cells)  # every cell one rank per role: no TP column, no title words
    assert "TP" not in plan_table(without).title
    mixed = plan(_config(_pd(prefill_tp=2, decode_tp=1)))
    assert "TP" not in shared_values(mixed.cells)


@pytest.mark.parametrize(
    ("shape", "cores", "binds"),
    [
        ((2, 1), 2, ("0|0", "1")),  # both prefill ranks on prefill's core, decode's core alone
        ((1, 2), 2, ("0", "1|1")),
        ((1, 1), 2, ("0", "1")),
        ((2, 1), 16, ("0-3|4-7", "8-15")),  # disjoint cores per rank where there are enough
        ((2, 2), 6, ("0|1-2", "3|4-5")),
    ],
)
def test_planner_gives_each_role_its_tp_argv_and_each_rank_a_bind(
    tmp_path: Path, shape: tuple[int, int], cores: int, binds: tuple[str, str]
) -> None:
    prefill_tp, decode_tp = shape
    config = _config(_pd(prefill_tp=prefill_tp, decode_tp=decode_tp))
    (cell,) = [c for c in plan(config).planned() if c.topology == "pd-nixl"]
    planner = EnginePlanner(config, cache_dir=tmp_path, cores=cores, gpus_here=None)
    ports = {name: str(20000 + i) for i, name in enumerate(port_names(cell))}
    builds = {"baseline": EngineBuild(tmp_path / "python")}
    servers = {s.role: s for s in planner.plan(cell, ports, builds, layout_root="/logs", dry_run=True).servers}

    def tp_flag(argv: list[str]) -> str | None:
        return argv[argv.index("--tensor-parallel-size") + 1] if "--tensor-parallel-size" in argv else None

    assert tp_flag(servers["prefill"].argv) == (None if prefill_tp == 1 else str(prefill_tp))
    assert tp_flag(servers["decode"].argv) == (None if decode_tp == 1 else str(decode_tp))
    got = (servers["prefill"].env["VLLM_CPU_OMP_THREADS_BIND"], servers["decode"].env["VLLM_CPU_OMP_THREADS_BIND"])
    assert got == binds


def test_parity_judges_a_tp_shape_against_its_control_with_the_tp_tolerances(tmp_path: Path) -> None:
    """2p1d against a TP-1 control: the logprob tolerances widen (another summation order), said in the
    evidence; the 1/1 pair keeps the exact ones."""
    from canary.checks.base import CheckContext
    from canary.checks.parity.check import tp_settings
    from canary.judge.results import CellResult, CheckResult
    from canary.targets.base import Deployment

    config = _config(_pd(prefill_tp=2, decode_tp=1), _pd())
    cells = _cells(config)
    control = cells["agg.cpu_attn.b128.auto.v1.baseline"]
    started = CellResult(cell=control, verdict="pass", checks=[CheckResult(name="startup", verdict="pass")])
    settings = config.checks.parity
    for cell_id, widened in (
        ("pd.cpu_attn.p128-d128.tp2p1d.auto.v1.baseline", True),
        ("pd.cpu_attn.p128-d128.auto.v1.baseline", False),
    ):
        cell = cells[cell_id]
        ctx = CheckContext(cell, Deployment(cell, "http://127.0.0.1:9", "tiny"), config, tmp_path)
        ctx.earlier = {control.id: started}
        evidence: dict[str, Any] = {}
        judged = tp_settings(ctx, settings, evidence)
        if widened:
            assert (judged.kl_tolerance, judged.logprob_tolerance) == (5e-3, 0.1)
            assert evidence["tolerance"]["why"] == "tp2p1d against a control of 1 rank(s): another summation order"
        else:
            assert judged == settings and evidence == {}


@pytest.mark.parametrize(
    ("bind", "cores"),
    [("0|0", (0,)), ("1|1", (1,)), ("0-3|4-7", tuple(range(8))), ("1", (1,)), ("0,2|3", (0, 2, 3)), ("auto", ())],
)
def test_a_rank_bind_names_the_engines_cores(bind: str, cores: tuple[int, ...]) -> None:
    """The cores a multi-rank engine's engine core is moved to (canary.targets.restart.bind_engine_core)."""
    from canary.targets.affinity import bind_cores

    assert bind_cores(bind) == cores


@pytest.mark.parametrize(
    ("shape", "in_process"),
    [
        ((1, 2), {"prefill": False, "decode": True}),  # the single-rank prefill before a TP-2 decode: its own core
        ((2, 1), {"prefill": True, "decode": True}),
        ((2, 2), {"prefill": True, "decode": True}),
        ((1, 1), {"prefill": True, "decode": True}),
    ],
)
def test_a_single_rank_prefill_before_a_multi_rank_decode_runs_its_engine_core_in_its_own_process(
    tmp_path: Path, shape: tuple[int, int], in_process: dict[str, bool]
) -> None:
    """Measured on cpu-families' 1p2d pair: with the prefill's engine core in its API server's process, decode's two
    ranks missed vLLM's fixed 5 s NIXL handshake deadline on the first request (2 of 2 runs); in its own process
    (vLLM's default) the pair passed."""
    prefill_tp, decode_tp = shape
    config = _config(_pd(prefill_tp=prefill_tp, decode_tp=decode_tp))
    (cell,) = [c for c in plan(config).planned() if c.topology == "pd-nixl"]
    planner = EnginePlanner(config, cache_dir=tmp_path, cores=2, gpus_here=None)
    ports = {name: str(20000 + i) for i, name in enumerate(port_names(cell))}
    builds = {"baseline": EngineBuild(tmp_path / "python")}
    servers = {s.role: s for s in planner.plan(cell, ports, builds, layout_root="/logs", dry_run=True).servers}
    for role, expected in in_process.items():
        assert (servers[role].env.get("VLLM_ENABLE_V1_MULTIPROCESSING") == "0") is expected, role
