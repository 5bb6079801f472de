"""`python -m canary.export.prometheus.dashboards --out DIR`: write the dashboards' JSON."""

import sys

from canary.export.prometheus.dashboards.output import main

sys.exit(main())
