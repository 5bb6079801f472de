"""python -m canary."""

import sys

from canary.cli import main

sys.exit(main())
