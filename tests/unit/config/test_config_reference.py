"""The config reference page (canary/config/reference.py): every model from the root, prose safe for
Markdown, and a --write that produces exactly the page (what docs/reference/config.md must equal)."""

from __future__ import annotations

from pathlib import Path

from canary.config import CanaryConfig, ImageSpec, LocalTargetConfig
from canary.config import reference as r


def test_every_nested_model_gets_a_table_under_its_key_path() -> None:
    page = r.page()
    assert page.startswith("# Config reference\n")
    assert "## `(root)` (CanaryConfig)" in page
    assert "## `target.local` (LocalTargetConfig)" in page
    assert "## `target.kubernetes.nixl` (NixlTransportConfig)" in page
    for name in LocalTargetConfig.model_fields:
        assert f"| `{name}` |" in page
    assert page.count("\n## ") >= len(CanaryConfig.model_fields)


def test_angle_brackets_in_prose_are_escaped_but_not_in_code() -> None:
    assert r._text("RESULTS_DIR/<run-id>/ and `<kept>`") == "RESULTS_DIR/&lt;run-id&gt;/ and `<kept>`"
    row = next(line for line in r.page().splitlines() if line.startswith("| `ref` |"))
    assert "&lt;registry&gt;/vllm-patched" in row and "<registry>" not in row
    assert ImageSpec.model_fields["ref"].description and "<registry>" in ImageSpec.model_fields["ref"].description


def test_a_models_summary_is_its_whole_first_paragraph() -> None:
    page = r.page()
    # CompressedCache's first docstring line ends mid-sentence; the summary keeps the sentence whole.
    heading = page.index("## `models.compressed_cache` (CompressedCache)")
    summary = page[heading:].splitlines()[2]
    assert summary.startswith("A compressed KV cache") and not summary.endswith("per")


def test_write_produces_the_page(tmp_path: Path) -> None:
    target = tmp_path / "config.md"
    assert r.main(["--write", str(target)]) == 0
    assert target.read_text(encoding="utf-8") == r.page()
    assert [p.name for p in tmp_path.iterdir()] == ["config.md"]  # no temp file left behind
