"""The run history: every run's verdicts and numbers, kept by the canary itself.

- ``store``: the tables (one row per run x cell x check metric, plus run, cell and check rows)
  in SQLite (default: ``<results_dir>/history.sqlite``) or PostgreSQL (``export.history.url``).
- ``rows``: a RunResult flattened into those rows; ``importer``: results/*/results.json into it.
- ``changepoints``: E-Divisive means change points per cell and metric.
- ``compare``: two runs, verdict by verdict and metric by metric; ``plot``: a series as SVG.
- ``record``: what `canary run` calls after the cells ran (write, find change points).
"""
