"""`python -m traceview`: the command line (traceview/cli/main.py)."""

import sys

from .cli.main import main

sys.exit(main())
