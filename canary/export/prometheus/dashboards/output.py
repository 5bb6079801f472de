"""Grafana dashboards of the canary, generated from code (grafana-foundation-sdk, Grafana 11).

The dashboards as committed JSON: render, write, and the command line.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from grafana_foundation_sdk.cog.encoder import JSONEncoder

from canary.export.prometheus.dashboards.overview import overview
from canary.export.prometheus.dashboards.performance import performance


@dataclass(frozen=True)
class Rendered:
    """One dashboard as committed: file name and JSON text."""

    filename: str
    text: str


def render_all() -> list[Rendered]:
    """Every dashboard as the JSON text that is committed."""
    out = []
    for builder in (overview(), performance()):
        model = builder.build()
        for index, panel in enumerate(model.panels or [], start=1):
            panel.id_val = index  # unique, stable ids: Grafana links and repeats rely on them
        text = json.dumps(model, cls=JSONEncoder, indent=2, sort_keys=True) + "\n"
        out.append(Rendered(f"{model.uid}.json", text))
    return out


def write_all(out_dir: Path) -> list[Path]:
    """Write every dashboard into out_dir; returns the paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for rendered in render_all():
        path = out_dir / rendered.filename
        path.write_text(rendered.text, encoding="utf-8")
        paths.append(path)
    return paths


def main(argv: Sequence[str] | None = None) -> int:
    """CLI: python -m canary.export.prometheus.dashboards --out configs/dashboards."""
    parser = argparse.ArgumentParser(
        prog="python -m canary.export.prometheus.dashboards", description=(__doc__ or "").splitlines()[0]
    )
    parser.add_argument("--out", type=Path, default=Path("configs/dashboards"), help="output directory")
    args = parser.parse_args(argv)
    for path in write_all(args.out):
        print(path)
    return 0
