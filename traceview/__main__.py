"""`python -m traceview`: the command line (traceview/cli/main.py)."""

import gc
import sys

# An analyzer run keeps the cyclic collector off until the process ends (`cli.main._analyzer_run`): off from here,
# the CLI's own imports allocate no garbage either (their young collections: ~1 ms of a small trace's start-up)
gc.disable()

from .cli.main import ANALYZER_COMMANDS, main  # noqa: E402

if sys.argv[1:2] and sys.argv[1] in ANALYZER_COMMANDS:
    main()  # (ends the process: `cli.main._exit`)
gc.enable()  # every other command collects as before
sys.exit(main())
