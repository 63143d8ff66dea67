"""`python -m collectors collect|trigger ...`: the same commands as `traceview collect|trigger`."""

import sys

from collectors.cli import main

sys.exit(main())
