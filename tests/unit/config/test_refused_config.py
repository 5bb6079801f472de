"""Config errors that used to pass `plan` and `--dry-run` and start engines in `run`: an unknown builtin
model, requests longer than a model takes, a dataset path its source ignores, a missing patch series, an
aggregated include with two block sizes. Each exits 2 at plan, run --dry-run and run, naming the file and
the key path, before anything starts (tests/support/refusal.py)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from canary import cli
from canary.config.load import load_config
from canary.paths import CONFIGS_DIR
from tests.support.refusal import COMMAND_IDS, COMMANDS, assert_refused, base_config, run_cli, write_config

Mutation = Callable[[dict[str, Any], Path], None]


def _set(path: str, value: object) -> Mutation:
    def mutate(data: dict[str, Any], _tmp: Path) -> None:
        node: Any = data
        parts = path.split(".")
        for part in parts[:-1]:
            node = node[int(part)] if isinstance(node, list) else node.setdefault(part, {})
        node[int(parts[-1]) if isinstance(node, list) else parts[-1]] = value

    return mutate


def _second_model(max_model_len: int) -> Mutation:
    def mutate(data: dict[str, Any], _tmp: Path) -> None:
        data["models"].append({"name": "short", "source": "builtin:tiny", "max_model_len": max_model_len})

    return mutate


def _series_missing_its_patch(data: dict[str, Any], tmp: Path) -> None:
    series = tmp / "patches" / "series"
    series.parent.mkdir()
    series.write_text("0001-not-there.patch\n")
    data["images"]["kernel32"]["patches"] = str(series)


def _long_trace_line(data: dict[str, Any], tmp: Path) -> None:
    trace = tmp / "trace.jsonl"
    rows = [
        {"timestamp": 0, "input_length": 100, "output_length": 10},
        {"timestamp": 5, "input_length": 2040, "output_length": 30},
    ]
    trace.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    data["checks"]["throughput"].update(workload={"kind": "trace", "trace_path": str(trace)}, open_loop=True)


REFUSED: list[tuple[str, Mutation, str, str]] = [
    # (case, mutation of cpu-default, key path, text in the message)
    ("unknown builtin", _set("models.0.source", "builtin:tiyn"), "models.0.source", "unknown builtin model"),
    ("builtin with a slash", _set("models.0.source", "builtin:a/b"), "models.0.source", "is not builtin:NAME"),
    (
        "throughput prompt beyond max_model_len",
        _set("checks.throughput.prompt_tokens", 2040),
        "checks.throughput.prompt_tokens",
        "HTTP 400",
    ),
    (
        "throughput output beyond max_model_len",
        _set("checks.throughput.output_tokens", 4096),
        "checks.throughput.output_tokens",
        "models.0.max_model_len 2048",
    ),
    ("every model is checked", _second_model(80), "checks.throughput.prompt_tokens", "models.1.max_model_len 80"),
    (
        "uniform spread reaches beyond",
        lambda d, t: d["checks"]["throughput"].update(
            prompt_tokens=1600, length_distribution="uniform", length_spread=0.3
        ),
        "checks.throughput.prompt_tokens",
        "up to 2080",
    ),
    (
        "shared prefix plus suffix beyond",
        _set("checks.throughput.workload", {"kind": "shared_prefix", "prefix_tokens": 2000}),
        "checks.throughput.workload.prefix_tokens",
        "longest request is 2096 tokens (prefix_tokens 2000 + a suffix up to 64 + output up to 32)",
    ),
    (
        "the last turn beyond",
        _set("checks.throughput.workload", {"kind": "multi_turn", "turns": 22}),
        "checks.throughput.workload.turns",
        "longest request is 2112 tokens (turn 22 of a conversation",
    ),
    (
        "block residues of the matrix's largest block beyond",
        _set("checks.throughput.workload", {"kind": "block_residues", "block_multiples": [1, 16]}),
        "checks.throughput.workload.block_multiples",
        "a 2049-token prompt (16 x block 128 + 1)",
    ),
    ("a trace line beyond", _long_trace_line, "checks.throughput.workload.trace_path", "trace.jsonl:2 asks 2040 + 30"),
    (
        "parity prompt beyond max_model_len",
        _set("checks.parity.prompt_lengths", [8, 2040]),
        "checks.parity.prompt_lengths.1",
        "the longest that fits is 2015",
    ),
    ("parity max_tokens leave no prompt", _set("checks.parity.max_tokens", 2047), "checks.parity.max_tokens", ""),
    ("accuracy answers fill the model", _set("checks.accuracy.max_gen_toks", 2048), "checks.accuracy.max_gen_toks", ""),
    (
        "dataset path with source builtin",
        _set("checks.accuracy.dataset", {"path": "/data/gsm8k"}),
        "checks.accuracy.dataset.path",
        "source: local",
    ),
    (
        "dataset test_path with source hub",
        _set("checks.accuracy.dataset", {"source": "hub", "test_path": "t.jsonl"}),
        "checks.accuracy.dataset.test_path",
        "source is hub",
    ),
    (
        "dataset source local without files",
        _set("checks.accuracy.dataset", {"source": "local", "train_path": "t.jsonl"}),
        "checks.accuracy.dataset.path",
        "both train_path and test_path",
    ),
    (
        "patch series not there",
        _set("images.kernel32.patches", "configs/engine-patches/no-such/series"),
        "images.kernel32.patches",
        "not found",
    ),
    (
        "image ref with an uppercase repository",
        _set("images.baseline.ref", "ghcr.io/Me/vllm:1"),
        "images.baseline.ref",
        "neither a container image reference",
    ),
    ("image ref with a space", _set("images.baseline.ref", "my image:1"), "images.baseline.ref", "no spaces"),
    (
        "image ref with a bad digest",
        _set("images.baseline.ref", "ghcr.io/me/vllm@sha256:abc"),
        "images.baseline.ref",
        "@sha256:<64 hex>",
    ),
    ("patch series naming a missing patch", _series_missing_its_patch, "images.kernel32.patches", "does not exist"),
    (
        "aggregated include with two block sizes",
        _set("matrix.include.1.decode_block_size", 64),
        "matrix.include.1.decode_block_size",
        "an aggregated cell runs one block size",
    ),
]


@pytest.mark.parametrize("command", COMMANDS, ids=COMMAND_IDS)
@pytest.mark.parametrize(("case", "mutate", "key_path", "text"), REFUSED, ids=[c[0] for c in REFUSED])
def test_refused_before_anything_starts(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    command: tuple[str, ...],
    case: str,
    mutate: Mutation,
    key_path: str,
    text: str,
) -> None:
    data = base_config(tmp_path)
    mutate(data, tmp_path)
    assert_refused(write_config(tmp_path, data), key_path, monkeypatch, capsys, command, text=text)


def test_a_set_override_is_named_as_such(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_config(tmp_path, base_config(tmp_path))
    err = assert_refused(
        config, "checks.throughput.prompt_tokens", monkeypatch, capsys, ("run",), "--set",
        "checks.throughput.prompt_tokens=4000", source="--set checks.throughput.prompt_tokens=4000",
    )  # fmt: skip
    assert str(config) not in err, err  # the file is not at fault
    assert len(err.strip().splitlines()) == 1, err


def test_a_disabled_check_is_not_held_to_the_model_length(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    data = base_config(tmp_path)
    data["checks"]["throughput"].update(enabled=False, prompt_tokens=4000)
    code, err = run_cli(["plan", str(write_config(tmp_path, data))], monkeypatch, capsys)
    assert code == cli.EXIT_OK, err


def test_what_fits_exactly_is_accepted() -> None:
    config = load_config(
        CONFIGS_DIR / "cpu-default.yaml",
        [
            "checks.throughput.prompt_tokens=2016",
            "checks.parity.prompt_lengths=[2015]",
            "checks.accuracy.max_gen_toks=2047",
        ],
    )
    assert config.checks.throughput.prompt_tokens + config.checks.throughput.output_tokens == 2048


def test_named_workloads_that_fit_exactly_are_accepted() -> None:
    for overrides in (
        ["checks.throughput.workload.kind=shared_prefix", "checks.throughput.workload.prefix_tokens=1952"],
        ["checks.throughput.workload.kind=multi_turn", "checks.throughput.output_tokens=32",
         "checks.throughput.prompt_tokens=96", "checks.throughput.workload.turns=16"],
        ["checks.throughput.workload.kind=block_residues", "checks.throughput.workload.block_multiples=[15]",
         "checks.throughput.output_tokens=127"],
    ):  # fmt: skip
        load_config(CONFIGS_DIR / "cpu-default.yaml", overrides)  # 1952 + 64 + 32; 16 x 128; 15 x 128 + 1 + 127
