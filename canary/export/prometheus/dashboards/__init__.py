"""Grafana dashboards of the canary, generated from code (grafana-foundation-sdk, Grafana 11).

`python -m canary.export.prometheus.dashboards --out configs/dashboards` (or `make dashboards`) regenerates the JSON;
it is committed and shipped by the canary chart as a ConfigMap for Grafana's dashboard sidecar.
A test fails when the committed JSON is stale.

Every query is built from the metric names and labels of canary.export.prometheus.schema, so the
dashboards, the exporters and the alert rules cannot drift apart; a panel that names an alert shows
that alert's own expression, read from configs/alerts/canary-rules.yaml (canary.export.prometheus.alerts),
never a copy. Every query is kept to the chosen job and scope (several canaries may share one
Prometheus), panels of cells show the $limit worst (a GPU matrix has hundreds of cells), every panel
has a unit and a description that explains its words (tests/unit/export/prometheus/test_dashboards.py);
the Prometheus tests run each panel query against a real Prometheus holding a pushed run, also a
GPU-sized matrix (tests/prometheus/test_prom_gpu_matrix.py).

Dashboards:
- vllm-canary-overview: alerts firing now (one number per rule), last run (age, outcome, duration,
  cells by verdict), failing cells (CanaryCellFailing: fail, unexpected-pass) apart from
  inconclusive ones (invalid, error), both grouped by backend and block size, the matrix status
  (backend x block size per topology and image, coloured by verdict), the worst cells and checks
  over time, slowest startups and failure classes, cell age (stale and oldest cells of a rotating
  matrix), P/D health (NIXL bytes, recomputed prompt tokens, greedy parity), KV fidelity against
  the null floor (the gate's threshold drawn, cells reading corrupt KV) and drift of candidate
  images against the baseline image.
- vllm-canary-performance: the slowest cells' throughput and latency (TTFT/TPOT/ITL/E2E
  percentiles), history change points, candidate/baseline throughput with the alert's threshold,
  SLO capacity with its interval and each P/D cell's disaggregation gain over its control (where
  checks.throughput.capacity ran), GSM8K accuracy with its Wilson bounds and gate.

The package: `base` (data source, filters, units, glossary, query helpers), `panels` (the panel
builders), `fidelity` (the KV-fidelity tables), one module per dashboard (`overview`, `performance`:
one function per row of panels, assembled in order), `output` (the committed JSON and the CLI).
"""

from __future__ import annotations

from canary.export.prometheus.dashboards.base import FAILED_WORD as FAILED_WORD
from canary.export.prometheus.dashboards.base import GLOSSARY as GLOSSARY
from canary.export.prometheus.dashboards.base import INCONCLUSIVE_WORD as INCONCLUSIVE_WORD
from canary.export.prometheus.dashboards.base import LIMIT_DEFAULT as LIMIT_DEFAULT
from canary.export.prometheus.dashboards.base import LIMIT_VAR as LIMIT_VAR
from canary.export.prometheus.dashboards.base import OVER_FLOOR_LIMIT as OVER_FLOOR_LIMIT
from canary.export.prometheus.dashboards.base import U_GAIN as U_GAIN
from canary.export.prometheus.dashboards.base import U_NATS as U_NATS
from canary.export.prometheus.dashboards.base import U_OVER_THRESHOLD as U_OVER_THRESHOLD
from canary.export.prometheus.dashboards.base import U_RATIO as U_RATIO
from canary.export.prometheus.dashboards.base import U_REQUESTS_PER_S as U_REQUESTS_PER_S
from canary.export.prometheus.dashboards.base import U_SECONDS as U_SECONDS
from canary.export.prometheus.dashboards.base import U_TOKENS_PER_S as U_TOKENS_PER_S
from canary.export.prometheus.dashboards.base import on_cells as on_cells
from canary.export.prometheus.dashboards.output import Rendered as Rendered
from canary.export.prometheus.dashboards.output import main as main
from canary.export.prometheus.dashboards.output import render_all as render_all
from canary.export.prometheus.dashboards.output import write_all as write_all
from canary.export.prometheus.dashboards.overview import overview as overview
from canary.export.prometheus.dashboards.performance import performance as performance
