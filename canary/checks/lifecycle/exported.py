"""The lifecycle check's exported metrics: none yet.

Its numbers (the prefill restart's seconds, whether decode survived, parity after the restart) are in the
CheckResult and the run's report; a Prometheus series would need a dashboard panel beside it
(tests/unit/export/prometheus/test_schema.py holds every check metric to one), left for when the check
runs nightly.
"""

from __future__ import annotations

from canary.core.metric_spec import Exported

EXPORTED: tuple[Exported, ...] = ()
"""What this check exports (its `register(metrics=...)`): nothing."""
